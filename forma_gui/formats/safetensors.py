"""safetensors reader: an 8-byte little-endian header length, a JSON header, then raw data.

    u64 n | n bytes of JSON {"name": {"dtype": "F32", "shape": [2, 3],
                                      "data_offsets": [begin, end]}, ...,
                             "__metadata__": {"key": "value"}} | data

Offsets are relative to the data section. As the format's specification requires, the
tensors must tile the data section exactly: in range, no overlap, no hole, nothing after.
All data is little-endian. The file is memory-mapped; opening reads the header only.
"""
from __future__ import annotations

import math
import os
import struct
from typing import Any

import numpy as np

from forma_gui.errors import FormatError, shown
from forma_gui.formats.json_text import located, parse_json
from forma_gui.formats.limits import shape_fits
from forma_gui.formats.mapped_file import MappedFile
from forma_gui.formats.tensor_info import ELEMENT_STORAGE, TensorInfo

#: safetensors dtype -> numpy storage, little-endian explicitly (as safetensors' numpy.py);
#: BF16 and F8 have no numpy type and are viewed as their unsigned-integer bits
SAFETENSORS_DTYPES: dict[str, np.dtype] = {
    name: np.dtype("<" + code) for name, code in ELEMENT_STORAGE.items()
}

HEADER_LENGTH_BYTES = 8
MAX_DIMS = 64  # more dimensions than any model uses; bounds the work per header entry
#: the safetensors library refuses longer headers (MAX_HEADER_SIZE in its lib.rs); without
#: a cap, a hostile length in a multi-GB file makes the reader read and parse gigabytes
MAX_HEADER_BYTES = 100_000_000


class SafetensorsFile(MappedFile):
    """One .safetensors file: `metadata` (the `__metadata__` strings), `tensors`, `data`.

    >>> with SafetensorsFile("model.safetensors") as f:          # doctest: +SKIP
    ...     f.tensors[0].dtype, f.tensors[0].shape
    ('BF16', (151936, 1024))
    """

    byte_order = "<"

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__(path)
        self._header_bytes = b""  # (while the header is checked: errors locate their value in it)
        with self._closing_on_error():
            header = self._read_header()
            self.data_offset = HEADER_LENGTH_BYTES + self.header_length
            self.metadata = self._metadata(header.pop("__metadata__", {}))
            self.tensors = self._tensors(header)
            self._header_bytes = b""
            self._map()

    def _fail(self, message: str, offset: int | None = None, *,
              json_path: tuple[str, ...] | None = None) -> FormatError:
        """The error, at the byte of the header value `json_path` names when given (else at
        `offset`)."""
        if json_path is not None:
            found = located(FormatError(message, path=self.path, json_path=json_path),
                            self._header_bytes, base=HEADER_LENGTH_BYTES)
            if found.offset is not None:
                return found
        return FormatError(message, path=self.path, offset=offset)

    def _read_header(self) -> dict[str, Any]:
        head = self._file.read(HEADER_LENGTH_BYTES)
        if len(head) < HEADER_LENGTH_BYTES:
            raise self._fail("expected an 8-byte header length, but the file has only "
                             f"{len(head)} bytes", 0)
        (n,) = struct.unpack("<Q", head)
        if n > self.file_size - HEADER_LENGTH_BYTES:
            raise self._fail(f"header length {n} runs past the end of the file "
                             f"({self.file_size} bytes)", 0)
        if n > MAX_HEADER_BYTES:
            raise self._fail(f"header length {n} is over the {MAX_HEADER_BYTES}-byte limit "
                             "of the safetensors format", 0)
        self.header_length = n
        self._header_bytes = self._file.read(n)
        return self._parse_json(self._header_bytes)

    def _parse_json(self, text: bytes) -> dict[str, Any]:
        header = parse_json(text, self.path, base=HEADER_LENGTH_BYTES)
        if not isinstance(header, dict):
            raise self._fail("expected the header to be a JSON object", HEADER_LENGTH_BYTES)
        return header

    def _metadata(self, meta: Any) -> dict[str, str]:
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise self._fail("expected __metadata__ to map strings to strings",
                             HEADER_LENGTH_BYTES, json_path=("__metadata__",))
        return dict(meta)

    def _tensors(self, header: dict[str, Any]) -> list[TensorInfo]:
        tensors = [self._tensor(name, entry) for name, entry in header.items()]
        self._check_tiling(tensors)
        return tensors

    def _tensor(self, name: str, entry: Any) -> TensorInfo:
        where = f"tensor {shown(name)}"
        if not isinstance(entry, dict):
            raise self._fail(f"{where}: expected an object with dtype, shape, data_offsets",
                             HEADER_LENGTH_BYTES, json_path=(name,))
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
            raise self._fail(f"{where}: unsupported dtype {dtype!r:.80} (expected one of "
                             f"{', '.join(SAFETENSORS_DTYPES)})", HEADER_LENGTH_BYTES,
                             json_path=(name, "dtype"))
        if not _int_list(shape) or len(shape) > MAX_DIMS or any(d < 0 for d in shape):
            raise self._fail(f"{where}: expected shape to be a list of at most {MAX_DIMS} "
                             f"non-negative integers, found {shape!r:.80}", HEADER_LENGTH_BYTES,
                             json_path=(name, "shape"))
        if not _int_list(offsets) or len(offsets) != 2:
            raise self._fail(f"{where}: expected data_offsets [begin, end], found "
                             f"{offsets!r:.80}", HEADER_LENGTH_BYTES, json_path=(name, "data_offsets"))
        return self._place(name, dtype, tuple(shape), *offsets)

    def _place(self, name: str, dtype: str, shape: tuple[int, ...], begin: int,
               end: int) -> TensorInfo:
        data_size = self.file_size - self.data_offset
        if not 0 <= begin <= end <= data_size:
            raise self._fail(f"tensor {shown(name)}: data_offsets [{begin}, {end}] outside the "
                             f"{data_size}-byte data section", HEADER_LENGTH_BYTES,
                             json_path=(name, "data_offsets"))
        if not shape_fits(shape):
            raise self._fail(f"tensor {shown(name)}: shape {list(shape)!s:.80} is too large for an "
                             "array", HEADER_LENGTH_BYTES, json_path=(name, "shape"))
        expected = math.prod(shape) * SAFETENSORS_DTYPES[dtype].itemsize
        if end - begin != expected:
            raise self._fail(f"tensor {shown(name)}: shape {list(shape)} of {dtype} needs {expected} "
                             f"bytes, but data_offsets span {end - begin}", HEADER_LENGTH_BYTES,
                             json_path=(name, "data_offsets"))
        return TensorInfo(name, shape, dtype, self.data_offset + begin, end - begin, self.path)

    def _check_tiling(self, tensors: list[TensorInfo]) -> None:
        """Tensors cover the data section exactly, in some order (the spec forbids holes)."""
        at = self.data_offset
        for t in sorted(tensors, key=lambda t: (t.offset, t.end)):
            if t.offset != at:
                problem = "overlaps the tensor before it" if t.offset < at else \
                    f"leaves a hole of {t.offset - at} bytes before it"
                raise self._fail(f"tensor {shown(t.name)} at byte {t.offset} {problem}", at)
            at = t.end
        if at != self.file_size:
            raise self._fail(f"{self.file_size - at} bytes after the last tensor belong to "
                             "no tensor", at)


def _int_list(value: Any) -> bool:
    """A JSON list of plain integers (not booleans, not floats)."""
    return isinstance(value, list) and all(type(v) is int for v in value)
