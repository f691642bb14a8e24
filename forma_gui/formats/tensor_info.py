"""`TensorInfo`: where one tensor lives in a weight file, shared by every weight reader."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: element type (not block-quantized) -> numpy storage type, byte order left to the file.
#: Types numpy lacks are stored as unsigned integers of their width (BF16, F8_*).
ELEMENT_STORAGE: dict[str, str] = {
    "F64": "f8", "F32": "f4", "F16": "f2", "BF16": "u2",
    "I64": "i8", "I32": "i4", "I16": "i2", "I8": "i1",
    "U64": "u8", "U32": "u4", "U16": "u2", "U8": "u1",
    "BOOL": "b1", "F8_E4M3": "u1", "F8_E5M2": "u1",
}


def storage_dtype(dtype: str, byte_order: str = "<") -> "np.dtype":
    """The numpy dtype one stored element of `dtype` is viewed as.

    >>> storage_dtype("BF16"), storage_dtype("F32", ">")
    (dtype('uint16'), dtype('>f4'))
    """
    import numpy as np

    return np.dtype(byte_order + ELEMENT_STORAGE[dtype])


@dataclass(frozen=True)
class TensorInfo:
    """One stored tensor: numpy-order shape, GGML-style type name, absolute byte range.

    >>> t = TensorInfo("w", (2, 64), "Q8_0", offset=96, nbytes=136, file="m.gguf")
    >>> t.n_elements, t.end
    (128, 232)
    """

    name: str
    shape: tuple[int, ...]  # numpy row-major order (GGUF dims reversed)
    dtype: str              # "F32", "Q4_1", "BF16", ... (GGML names; safetensors adds U8, BOOL, F8_*)
    offset: int             # absolute offset of the first byte in `file`
    nbytes: int
    file: str               # the file holding the bytes (differs between shards)

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def end(self) -> int:
        """Absolute offset one past the last byte."""
        return self.offset + self.nbytes
