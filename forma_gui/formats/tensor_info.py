"""`TensorInfo`: where one tensor lives in a weight file, shared by every weight reader."""
from __future__ import annotations

import math
from dataclasses import dataclass


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
