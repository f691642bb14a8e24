"""GGUF reader: header, metadata and tensor infos of a memory-mapped GGUF v2/v3 file.

Layout (all integers in the file's byte order, little-endian unless the version is swapped):

    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv x      (string key, u32 value type, value)
    n_tensors x (string name, u32 n_dims, u64 dims[n_dims] innermost first, u32 ggml type,
                 u64 offset relative to the data section)
    padding to `general.alignment` (default 32), then the tensor data.

A string is a u64 byte length followed by that many bytes. Strings are decoded as UTF-8 with
``errors="surrogateescape"``: GGUF vocabularies may hold byte sequences that are not valid
UTF-8 (partial characters of byte-level BPE), and this keeps every byte;
``s.encode("utf-8", "surrogateescape")`` gives the stored bytes back exactly.

Every count and length is checked against the bytes left in the file before anything is
allocated, so a hostile header costs at most a small multiple of the file size; and a header
may take at most `MAX_HEADER_BYTES`, so that even a multi-GB file costs bounded time and
memory. Only `FormatError` is raised for bad input. Opening reads the header pages only,
never tensor data.
"""
from __future__ import annotations

import math
import os
import struct
from typing import Any

import numpy as np

from forma_gui.core.ggml_types import GGML_TYPE_NAMES, GGML_TYPES, tensor_nbytes
from forma_gui.errors import FormatError, shown
from forma_gui.formats.limits import shape_fits
from forma_gui.formats.lazy_strings import LazyStrings
from forma_gui.formats.mapped_file import MappedFile
from forma_gui.formats.tensor_info import TensorInfo

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4            # GGML_MAX_DIMS: ggml refuses tensors with more dimensions
MAX_ARRAY_DEPTH = 16    # arrays of arrays nest this deep at most (real files use 2)
#: metadata + tensor infos end within this many bytes; the largest real headers (150k
#: tokens + 280k merges, or 262k tokens with scores and types) take under 10 MiB. Without
#: it, a count in a 10 GB file could make the reader allocate and walk gigabytes.
MAX_HEADER_BYTES = 64 * 2**20

#: GGUF value type id -> (name, struct code); None for the variable-length types
VALUE_TYPES: dict[int, tuple[str, str | None]] = {
    0: ("UINT8", "B"),
    1: ("INT8", "b"),
    2: ("UINT16", "H"),
    3: ("INT16", "h"),
    4: ("UINT32", "I"),
    5: ("INT32", "i"),
    6: ("FLOAT32", "f"),
    7: ("BOOL", "B"),     # one byte, 0 or 1 (checked)
    8: ("STRING", None),
    9: ("ARRAY", None),
    10: ("UINT64", "Q"),
    11: ("INT64", "q"),
    12: ("FLOAT64", "d"),
}
STRING, ARRAY, BOOL = 8, 9, 7

#: smallest encoding of one item of each kind, used to bound counts before allocating
MIN_KV_BYTES = 8 + 4 + 1            # empty key, type, one-byte value
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims = 0, type, offset
MIN_ARRAY_BYTES = 4 + 8             # element type, count


class _Reader:
    """A cursor over the header bytes; every read is bounds-checked and names its offset."""

    def __init__(self, buf: Any, path: str, order: str) -> None:
        self.buf = buf          # mmap (or bytes): supports slicing and struct.unpack_from
        self.end = min(len(buf), MAX_HEADER_BYTES)
        self.room = "the file" if self.end == len(buf) else \
            f"the first {MAX_HEADER_BYTES >> 20} MiB (the most a GGUF header may take)"
        self.path = path
        self.order = order      # "<" or ">"
        self.pos = 0
        self.structs = {code: struct.Struct(order + code) for _, code in VALUE_TYPES.values()
                        if code}
        self.tails: dict[int, struct.Struct] = {}

    def fail(self, message: str, offset: int | None = None) -> FormatError:
        return FormatError(message, path=self.path, offset=self.pos if offset is None else offset)

    def need(self, n: int, what: str) -> None:
        """Refuse to go on unless `n` more bytes exist."""
        if n < 0 or self.pos + n > self.end:
            raise self.fail(f"expected {what} ({n} bytes), but only {self.end - self.pos} "
                            f"bytes are left in {self.room}")

    def scalar(self, code: str, what: str) -> Any:
        s = self.structs[code]
        self.need(s.size, what)
        (value,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return value

    def u32(self, what: str) -> int:
        return self.scalar("I", what)

    def u64(self, what: str) -> int:
        return self.scalar("Q", what)

    def count(self, what: str, min_item_bytes: int) -> int:
        """A u64 count, refused if that many items cannot fit in the rest of the file."""
        start = self.pos
        n = self.u64(f"{what} count")
        left = self.end - self.pos
        if n * min_item_bytes > left:
            raise self.fail(f"{what} count {n} cannot fit in the {left} bytes left in {self.room} "
                            f"(each takes at least {min_item_bytes} bytes)", start)
        return n

    def tensor_tail(self, n_dims: int) -> struct.Struct:
        """The fixed-size rest of a tensor info with `n_dims` dimensions."""
        if n_dims not in self.tails:
            self.tails[n_dims] = struct.Struct(f"{self.order}{n_dims}QIQ")
        return self.tails[n_dims]

    def string(self, what: str) -> str:
        start = self.pos
        n = self.u64(f"{what} length")
        if n > self.end - self.pos:
            raise self.fail(f"{what} length {n} runs past the end of {self.room} "
                            f"({self.end - self.pos} bytes left)", start)
        text = self.buf[self.pos:self.pos + n].decode("utf-8", "surrogateescape")
        self.pos += n
        return text

    def value_type(self, what: str) -> int:
        start = self.pos
        t = self.u32(what)
        if t not in VALUE_TYPES:
            raise self.fail(f"unknown GGUF value type {t} for {what} (expected 0..12)", start)
        return t

    def value(self, vtype: int, depth: int = 0) -> Any:
        """One metadata value of type `vtype`, mapped to a Python/numpy value."""
        if vtype == STRING:
            return self.string("string")
        if vtype == ARRAY:
            return self.array(depth + 1)
        start = self.pos
        value = self.scalar(VALUE_TYPES[vtype][1], VALUE_TYPES[vtype][0])
        if vtype == BOOL:
            if value > 1:
                raise self.fail(f"expected a BOOL (0 or 1), found {value}", start)
            return bool(value)
        return value

    def array(self, depth: int) -> Any:
        """An array: numbers -> numpy array (copied), strings -> LazyStrings, arrays -> list."""
        if depth > MAX_ARRAY_DEPTH:
            raise self.fail(f"arrays nested deeper than {MAX_ARRAY_DEPTH} levels")
        etype = self.value_type("array element type")
        if etype == STRING:
            return self.string_array(self.count("string array", 8))
        if etype == ARRAY:
            n = self.count("array of arrays", MIN_ARRAY_BYTES)
            return [self.array(depth + 1) for _ in range(n)]
        code = VALUE_TYPES[etype][1]
        n = self.count(f"{VALUE_TYPES[etype][0]} array", struct.calcsize(code))
        return self.number_array(etype, n)

    def number_array(self, etype: int, n: int) -> np.ndarray:
        start = self.pos
        code = VALUE_TYPES[etype][1]
        dtype = np.dtype(self.order + code)
        out = np.frombuffer(self.buf, dtype=dtype, count=n, offset=self.pos).astype(
            dtype.newbyteorder("="))  # a small copy in native order; the map is not held
        self.pos += n * dtype.itemsize
        if etype == BOOL:
            if n and out.max() > 1:
                raise self.fail("expected BOOL array items to be 0 or 1", start)
            return out.view(np.bool_)
        return out

    def string_array(self, n: int) -> LazyStrings:
        """`n` strings, decoded on access: vocabularies hold 10^5 of them, and listing a
        model's tensors needs none (see lazy_strings). On a bad length, the slow reader
        names the offset."""
        strings = LazyStrings.from_buffer(self.buf, self.pos, n, self.end, self.order)
        if strings is None:
            self.string_array_reference(n)  # raises FormatError at the bad string
            raise self.fail("expected a string array")  # unreachable: the reference raised
        self.pos += strings.end
        return strings

    def string_array_reference(self, n: int) -> list[str]:
        """Slow readable twin of `string_array` (tests compare them); names bad offsets."""
        return [self.string(f"string {i} of {n} in the array") for i in range(n)]


class GGUFFile(MappedFile):
    """A GGUF file's header, memory-mapped read-only; tensor data is never read here.

    Attributes: `path`, `version`, `byte_order` ("<" or ">"), `metadata` (key -> value),
    `metadata_types` (key -> "UINT32", "STRING", "ARRAY[STRING]", ...), `metadata_offsets`
    (key -> byte offset of its record), `tensors` (list of TensorInfo, numpy-order shapes,
    absolute offsets), `alignment`, `data_offset`, `file_size`, and `data`, a read-only
    uint8 view of the whole file. Values: integers -> int, floats -> float, BOOL -> bool,
    STRING -> str (surrogateescape, see the module docstring), arrays of numbers -> numpy
    arrays (native byte order, copied), arrays of strings -> LazyStrings (a read-only
    Sequence[str] decoded on access, equal to the list), arrays of arrays -> list.
    `read_tensors=False` stops after the metadata (tokenizers need nothing more).

    >>> with GGUFFile(path) as g:                                      # doctest: +SKIP
    ...     g.metadata["tokenizer.ggml.model"], g.tensors[0].dtype
    ('gpt2', 'Q8_0')
    """

    def __init__(self, path: str | os.PathLike, *, read_tensors: bool = True) -> None:
        super().__init__(path)
        with self._closing_on_error():
            self._map()
            self._parse(read_tensors)

    # -- opening ------------------------------------------------------------------------

    def _map(self) -> None:
        if self.file_size < 4:
            raise FormatError("expected the GGUF magic, but the file is shorter than 4 bytes",
                              path=self.path, offset=0)
        super()._map()

    def _parse(self, read_tensors: bool) -> None:
        r = _Reader(self._mm, self.path, "<")
        magic = bytes(self._mm[:4])
        if magic != MAGIC:
            raise FormatError(f"expected the GGUF magic b'GGUF', found {magic!r}",
                              path=self.path, offset=0)
        r.pos = 4
        r = self._detect_order(r)
        self.byte_order = r.order
        r.pos = 8
        n_tensors = r.count("tensor", MIN_TENSOR_INFO_BYTES)
        n_kv = r.count("metadata key/value", MIN_KV_BYTES)
        self.metadata: dict[str, Any] = {}
        self.metadata_types: dict[str, str] = {}
        self.metadata_offsets: dict[str, int] = {}  # key -> offset of its key/value record
        self._read_metadata(r, n_kv)
        self.alignment = self._alignment()
        self.tensors: list[TensorInfo] = []
        self.data_offset: int | None = None
        if read_tensors:
            self._read_tensor_infos(r, n_tensors)

    def _detect_order(self, r: _Reader) -> _Reader:
        """Little-endian, or big-endian when the version only makes sense byte-swapped."""
        version = r.u32("the GGUF version")
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if version not in SUPPORTED_VERSIONS and swapped in SUPPORTED_VERSIONS:
            r = _Reader(self._mm, self.path, ">")
            version = swapped
        if version == 1:
            raise FormatError("GGUF version 1 is not supported (it predates August 2023); "
                              "re-convert the model with a current llama.cpp",
                              path=self.path, offset=4)
        if version not in SUPPORTED_VERSIONS:
            raise FormatError(f"unsupported GGUF version {version} (expected 2 or 3)",
                              path=self.path, offset=4)
        self.version = version
        return r

    def _read_metadata(self, r: _Reader, n_kv: int) -> None:
        for _ in range(n_kv):
            start = r.pos
            key = r.string("metadata key")
            if key in self.metadata:
                raise r.fail(f"duplicate metadata key {shown(key)}", start)
            vtype = r.value_type(f"the value of {shown(key)}")
            type_name = VALUE_TYPES[vtype][0]
            if vtype == ARRAY:
                type_name = f"ARRAY[{self._peek_element_type(r)}]"
            self.metadata_offsets[key] = start
            self.metadata[key] = r.value(vtype)
            self.metadata_types[key] = type_name

    @staticmethod
    def _peek_element_type(r: _Reader) -> str:
        start = r.pos
        etype = r.value_type("array element type")
        r.pos = start
        return VALUE_TYPES[etype][0]

    def _alignment(self) -> int:
        """`general.alignment`: a UINT32 power of two (default 32)."""
        key = "general.alignment"
        if key not in self.metadata:
            return DEFAULT_ALIGNMENT
        alignment, at = self.metadata[key], self.metadata_offsets[key]
        if self.metadata_types[key] != "UINT32":
            raise FormatError(f"expected {key} to be a UINT32, found {self.metadata_types[key]}",
                              path=self.path, offset=at)
        if alignment == 0 or alignment & (alignment - 1):
            raise FormatError(f"expected {key} to be a non-zero power of two, found "
                              f"{alignment}", path=self.path, offset=at)
        return alignment

    # -- tensor infos -------------------------------------------------------------------

    def _read_tensor_infos(self, r: _Reader, n_tensors: int) -> None:
        raw = [self._tensor_info(r) for _ in range(n_tensors)]  # (start, name, shape, dtype, rel)
        self.data_offset = _align(r.pos, self.alignment)
        seen: set[str] = set()
        for start, name, shape, dtype, rel in raw:
            if name in seen:
                raise FormatError(f"duplicate tensor name {shown(name)}", path=self.path, offset=start)
            seen.add(name)
            self.tensors.append(self._place(start, name, shape, dtype, rel))
        self._check_overlaps(raw)

    def _tensor_info(self, r: _Reader) -> tuple[int, str, tuple[int, ...], str, int]:
        start = r.pos
        name = r.string("tensor name")
        n_dims = r.u32("tensor dimension count")
        if n_dims > MAX_DIMS:
            raise r.fail(f"tensor {shown(name)} has {n_dims} dimensions (ggml allows at most "
                         f"{MAX_DIMS})", r.pos - 4)
        tail = r.tensor_tail(n_dims)  # u64 dims[n_dims], u32 type, u64 offset: one unpack
        if r.pos + tail.size > r.end:
            raise r.fail(f"expected the dims, type and data offset of tensor {shown(name)} "
                         f"({tail.size} bytes), but only {r.end - r.pos} bytes are left")
        *dims, type_id, rel = tail.unpack_from(r.buf, r.pos)
        dims_at, r.pos = r.pos, r.pos + tail.size
        dtype = GGML_TYPE_NAMES.get(type_id)
        if dtype is None:
            raise r.fail(f"tensor {shown(name)} has unknown GGML type id {type_id}", r.pos - 12)
        self._check_dims(name, dims, dtype, dims_at)
        if rel % self.alignment:
            raise r.fail(f"tensor {shown(name)} data offset {rel} is not a multiple of the "
                         f"alignment {self.alignment}", r.pos - 8)
        return start, name, tuple(reversed(dims)), dtype, rel

    def _check_dims(self, name: str, dims: list[int], dtype: str, at: int) -> None:
        """Dims an array can have (`shape_fits`: zero dims aside, their product in int64
        bytes), and rows that hold whole blocks."""
        if not shape_fits(dims):
            raise FormatError(f"dimensions {list(dims)} of {shown(name)} overflow an array's int64 size",
                              path=self.path, offset=at)
        block = GGML_TYPES[dtype].block_size
        if block > 1 and not dims:
            raise FormatError(f"tensor {shown(name)}: a {dtype} tensor needs at least one dimension",
                              path=self.path, offset=at)
        if dims and dims[0] % block:
            raise FormatError(f"tensor {shown(name)}: row length {dims[0]} is not a multiple of the "
                              f"{dtype} block size {block}", path=self.path, offset=at)

    def _place(self, start: int, name: str, shape: tuple[int, ...], dtype: str,
               rel: int) -> TensorInfo:
        nbytes = tensor_nbytes(dtype, math.prod(shape))  # whole blocks: _check_dims saw to it
        offset = self.data_offset + rel
        if offset + nbytes > self.file_size:
            raise FormatError(f"tensor {shown(name)} ({nbytes} bytes at data offset {rel}) ends at "
                              f"byte {offset + nbytes}, past the end of the file "
                              f"({self.file_size} bytes)", path=self.path, offset=start)
        return TensorInfo(name, shape, dtype, offset, nbytes, self.path)

    def _check_overlaps(self, raw: list[tuple[int, str, tuple[int, ...], str, int]]) -> None:
        starts = {info.name: start for (start, *_), info in zip(raw, self.tensors)}
        ordered = sorted(self.tensors, key=lambda t: (t.offset, t.nbytes))
        for prev, cur in zip(ordered, ordered[1:]):
            if cur.offset < prev.end and cur.nbytes and prev.nbytes:
                raise FormatError(f"tensor {shown(cur.name)} (bytes {cur.offset}..{cur.end}) overlaps "
                                  f"{shown(prev.name)} (bytes {prev.offset}..{prev.end})",
                                  path=self.path, offset=starts[cur.name])

    # -- data access (data, check_size, close: MappedFile) --------------------------------

    def tensor(self, name: str) -> TensorInfo:
        """The tensor info called `name`; KeyError if there is none."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def __repr__(self) -> str:
        return (f"GGUFFile({self.path!r}, version={self.version}, "
                f"{len(self.metadata)} keys, {len(self.tensors)} tensors)")


def _align(offset: int, alignment: int) -> int:
    """Round `offset` up to a multiple of `alignment`.

    >>> _align(33, 32), _align(64, 32)
    (64, 64)
    """
    return -(-offset // alignment) * alignment
