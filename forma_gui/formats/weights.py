"""`open_weights`: one interface over GGUF files (split ones too), safetensors files and
sharded folders.

A `WeightFile` lists tensors (`TensorInfo`: numpy-order shape, GGML-style type name,
absolute offset) and hands out zero-copy views of their bytes (`raw`) or float32 copies
(`dequantize`). The format is recognised by content, never by name alone. Pickles
(PyTorch .bin/.pt) are refused: unpickling runs code.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from forma_gui.core.ggml_types import tensor_nbytes
from forma_gui.errors import FormatError, shown
from forma_gui.formats.file_bytes import PICKLE_HINT, read_bytes, read_head
from forma_gui.formats.json_text import located, parse_json
from forma_gui.formats.tensor_info import ELEMENT_STORAGE, TensorInfo, storage_dtype

if TYPE_CHECKING:  # pragma: no cover
    from forma_gui.core.tensor import BlockLayout

__all__ = ["TensorInfo", "WeightFile", "open_weights"]

INDEX_NAME = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 * 2**20  # an index lists names only; real ones are well under 1 MB


class _Source(Protocol):
    """What a WeightFile needs from one open file (GGUFFile and SafetensorsFile have it)."""

    path: str
    byte_order: str
    file_size: int
    data: np.ndarray

    def check_size(self) -> None: ...
    def close(self) -> None: ...


class WeightFile:
    """Tensors of one model, memory-mapped read-only, possibly spread over several files."""

    def __init__(self, path: str | os.PathLike, kind: str, metadata: dict[str, Any],
                 sources: list[_Source], tensors: list[TensorInfo],
                 metadata_types: dict[str, str] | None = None) -> None:
        self.path = os.fspath(path)
        self.format = kind  # "gguf" or "safetensors"
        self.metadata = metadata
        #: key -> stored type name ("UINT32", "ARRAY[STRING]", ...; "STRING" for safetensors)
        self.metadata_types = metadata_types or {k: _type_name(v) for k, v in metadata.items()}
        self.tensors = tensors
        self.files = [s.path for s in sources]
        #: container facts for display: sizes, and for GGUF version, byte order, alignment
        self.format_info: dict[str, Any] = {"file_size": sum(s.file_size for s in sources)}
        self._sources = {s.path: s for s in sources}
        self._by_name = {t.name: t for t in tensors}

    def tensor(self, name: str) -> TensorInfo:
        """The tensor called `name`; KeyError if there is none."""
        return self._by_name[name]

    def raw(self, name: str) -> np.ndarray:
        """A zero-copy read-only view of the stored tensor.

        Element types come typed, in the tensor's shape (BF16 and F8 as their unsigned bits);
        block-quantized types come as uint8 of shape (*shape[:-1], bytes per row), as gguf-py.
        """
        t = self.tensor(name)
        source = self._source(t)
        data = source.data[t.offset:t.end]
        if t.dtype in ELEMENT_STORAGE:
            return data.view(storage_dtype(t.dtype, source.byte_order)).reshape(t.shape)
        return data.reshape(*t.shape[:-1], tensor_nbytes(t.dtype, t.shape[-1]))

    def dequantize(self, name: str) -> np.ndarray:
        """The tensor as a new float32 array of its shape (exact for every 16-bit-or-less type)."""
        t = self.tensor(name)
        raw = self.raw(name)
        if t.dtype in ELEMENT_STORAGE:
            return ELEMENT_TO_F32.get(t.dtype, _astype_f32)(raw).reshape(t.shape)
        if self._sources[t.file].byte_order != "<":
            raise FormatError(f"tensor {shown(name)}: big-endian {t.dtype} blocks are not supported",
                              path=t.file, offset=t.offset)
        return _dequantize_blocks(raw, t.dtype).reshape(t.shape)

    def layout(self, name: str) -> BlockLayout:
        """Where each element's block lives in the file (element types: blocks of one)."""
        from forma_gui.core.tensor import BlockLayout

        t = self.tensor(name)
        if t.dtype in ELEMENT_STORAGE:
            return BlockLayout(t.shape, 1, storage_dtype(t.dtype).itemsize, t.offset)
        return BlockLayout.of(t.shape, t.dtype, t.offset)

    def _source(self, t: TensorInfo) -> _Source:
        source = self._sources.get(t.file)
        if source is None:
            raise FormatError("the weight file is closed", path=t.file)
        source.check_size()  # touching pages past a shrunk file's end would be SIGBUS
        return source

    def close(self) -> None:
        """Release every file; views handed out before stay readable."""
        for source in self._sources.values():
            source.close()
        self._sources = {}

    def __enter__(self) -> WeightFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WeightFile({self.path!r}, {self.format}, {len(self.tensors)} tensors)"


#: Python type of a JSON value -> the type label shown for it
JSON_TYPE_NAMES: dict[type, str] = {str: "STRING", bool: "BOOL", int: "INT", float: "FLOAT",
                                    list: "ARRAY", dict: "OBJECT"}


def _type_name(value: Any) -> str:
    """A type label for metadata that carries no stored type (safetensors, index JSON)."""
    return JSON_TYPE_NAMES.get(type(value), type(value).__name__)


# -- element conversions ------------------------------------------------------------------

def _astype_f32(raw: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # float64 past float32's range becomes inf, as a cast does
        return raw.astype(np.float32)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of a float32: shift the bits back (exact).

    >>> bf16_to_f32(np.array([0x3F80, 0xC040], np.uint16)).tolist()
    [1.0, -3.0]
    """
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float8_table(exponent_bits: int, mantissa_bits: int, *, ieee_specials: bool) -> np.ndarray:
    """All 256 values of an 8-bit float, decoded from the bit layout (OCP FP8 spec).

    E5M2 keeps IEEE infinities and NaNs; E4M3 ("fn", finite) has no infinity and only
    S.1111.111 is NaN. Subnormals for exponent 0.

    >>> float8_table(4, 3, ieee_specials=False)[[0x01, 0x7E, 0x80]].tolist()
    [0.001953125, 448.0, -0.0]
    """
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> mantissa_bits) & ((1 << exponent_bits) - 1)
    man = codes & ((1 << mantissa_bits) - 1)
    bias = (1 << (exponent_bits - 1)) - 1
    frac = man / (1 << mantissa_bits)
    value = np.where(exp == 0, frac * 2.0 ** (1 - bias), (1 + frac) * 2.0 ** (exp - bias))
    top = exp == (1 << exponent_bits) - 1
    if ieee_specials:
        value = np.where(top, np.where(man == 0, np.inf, np.nan), value)
    else:
        value = np.where(top & (man == (1 << mantissa_bits) - 1), np.nan, value)
    return (sign * value).astype(np.float32)


F8_E4M3_TABLE = float8_table(4, 3, ieee_specials=False)
F8_E5M2_TABLE = float8_table(5, 2, ieee_specials=True)

#: element type -> exact float32 conversion where astype is not the answer
ELEMENT_TO_F32: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "BF16": bf16_to_f32,
    "F8_E4M3": F8_E4M3_TABLE.__getitem__,
    "F8_E5M2": F8_E5M2_TABLE.__getitem__,
}


def _dequantize_blocks(raw: np.ndarray, dtype: str) -> np.ndarray:
    from forma_gui.core import quant  # numpy kernels and tables, loaded on first use

    try:
        return quant.dequantize(raw, dtype)
    except KeyError as e:
        raise NotImplementedError(f"dequantizing {dtype} is not implemented") from e


# -- opening -------------------------------------------------------------------------------

def open_weights(path: str | os.PathLike) -> WeightFile:
    """Open a .gguf (any shard of a split one opens them all), a .safetensors, a sharded
    index .json, or a folder holding one of them."""
    path = Path(path)
    if path.is_dir():
        return _open_folder(path)
    kind = sniff_weights(path)
    if kind == "gguf":
        return _open_gguf(path)
    if kind == "index":
        return _open_shards(path)
    return _open_safetensors([path], path, {})


def sniff_weights(path: Path) -> str:
    """"gguf", "safetensors" or "index", from the first bytes; FormatError otherwise."""
    head = read_head(path, 16)
    if head[:4] == b"GGUF":
        return "gguf"
    if len(head) > 8 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] > 1:
        return "safetensors"
    if head.lstrip()[:1] == b"{":
        return "index"
    raise FormatError("not a weight file this tool knows (expected GGUF, safetensors or a "
                      "model.safetensors.index.json)", path=path, offset=0)


def _open_folder(folder: Path) -> WeightFile:
    """A folder: sharded safetensors by index, else its safetensors, its one GGUF or the shards
    of its one split GGUF model."""
    if (folder / INDEX_NAME).is_file():
        return _open_shards(folder / INDEX_NAME)
    shards = sorted(folder.glob("*.safetensors"))
    if shards:
        return _open_safetensors(shards, folder, {})
    ggufs = sorted(folder.glob("*.gguf"))
    if len(ggufs) == 1:
        return _open_gguf(ggufs[0])
    if _is_one_split_model(ggufs):
        w = _open_gguf(ggufs[0])  # the lowest shard: names a missing one, if any
        if len(w.files) == len(ggufs):
            return w
        w.close()  # shard names on files that are not split after all
    if ggufs:
        raise FormatError(f"{len(ggufs)} GGUF files in this folder; open one of them: "
                          + ", ".join(p.name for p in ggufs[:8]), path=folder)
    if any(folder.glob("*.bin")) or any(folder.glob("*.pt")) or any(folder.glob("*.pth")):
        raise FormatError(PICKLE_HINT, path=folder)
    raise FormatError("no weight file in this folder (looked for "
                      f"{INDEX_NAME}, *.safetensors, *.gguf)", path=folder)


def _open_gguf(path: Path) -> WeightFile:
    """One GGUF file, or every shard of the split model it is part of (see gguf_split)."""
    from forma_gui.formats.gguf import GGUFFile
    from forma_gui.formats.gguf_split import open_shards

    g = GGUFFile(path)
    shards: list[GGUFFile] = [g]
    try:
        shards = open_shards(g)
        tensors = _union(shards)
    except BaseException:
        for s in shards:  # g, and the other shards once open_shards returned them
            s.close()
        raise
    first = shards[0]  # holds the model's metadata; later shards hold only split.*
    w = WeightFile(path, "gguf", first.metadata, shards, tensors, first.metadata_types)
    # a split model has no one data offset: each shard has its own
    where = {"data_offset": first.data_offset} if len(shards) == 1 else {}
    w.format_info.update(version=first.version, alignment=first.alignment, **where,
                         byte_order="big" if first.byte_order == ">" else "little")
    if len(shards) > 1:
        w.format_info["split_count"] = len(shards)
    return w


def _is_one_split_model(paths: list[Path]) -> bool:
    from forma_gui.formats.gguf_split import is_one_split_model

    return is_one_split_model([p.name for p in paths])


def _open_safetensors(paths: list[Path], where: Path, metadata: dict[str, Any]) -> WeightFile:
    from forma_gui.formats.safetensors import SafetensorsFile

    sources: list[SafetensorsFile] = []
    try:
        for p in paths:
            sources.append(SafetensorsFile(p))
        tensors = _union(sources)
    except BaseException:
        for s in sources:
            s.close()
        raise
    merged = {k: v for s in sources for k, v in s.metadata.items()}
    return WeightFile(where, "safetensors", {**merged, **metadata}, sources, tensors)


def _union(sources: list[Any]) -> list[TensorInfo]:
    """All shards' tensors; a name in two shards is an error."""
    seen: dict[str, str] = {}
    tensors = []
    for s in sources:
        for t in s.tensors:
            if t.name in seen:
                raise FormatError(f"tensor {shown(t.name)} is in both {seen[t.name]} and {s.path}",
                                  path=s.path)
            seen[t.name] = s.path
            tensors.append(t)
    return tensors


def _open_shards(index_path: Path) -> WeightFile:
    """A model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard}}."""
    index, data = _read_index(index_path)
    weight_map = index["weight_map"]
    folder = index_path.parent
    names = list(dict.fromkeys(weight_map.values()))
    for name in names:
        if Path(name).name != name or name in ("", ".", "..") or not _file_name_ok(name):
            tensor = next(t for t, shard in weight_map.items() if shard == name)
            raise located(FormatError(f"shard name {name!r:.80} is not a plain file name in this folder",
                                      path=index_path, json_path=("weight_map", tensor)), data)
    wf = _open_safetensors([folder / n for n in names], index_path, index.get("metadata", {}))
    for tensor, shard in weight_map.items():
        info = wf._by_name.get(tensor)
        if info is None or Path(info.file).name != shard:
            wf.close()
            raise located(FormatError(f"the index puts {tensor!r} in {shard}, but that shard does not "
                                      "hold it", path=index_path, json_path=("weight_map", tensor)), data)
    return wf


def _file_name_ok(name: str) -> bool:
    """A name the OS can open: no NUL, no lone surrogate (JSON can spell both)."""
    try:
        return b"\0" not in os.fsencode(name)
    except UnicodeEncodeError:
        return False


def _read_index(path: Path) -> tuple[dict[str, Any], bytes]:
    """(the index, its bytes: errors about its values name their offsets)."""
    data = read_bytes(path, limit=MAX_INDEX_BYTES, what="index")
    index = parse_json(data, path)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()):
        bad = next((k for k, v in weight_map.items() if not isinstance(v, str)), None) \
            if isinstance(weight_map, dict) else None
        raise located(FormatError("expected an object with a \"weight_map\" of tensor -> shard file",
                                  path=path, json_path=("weight_map", bad) if bad is not None else ("weight_map",)),
                      data)
    if not isinstance(index.get("metadata", {}), dict):
        raise located(FormatError("expected \"metadata\" to be an object", path=path, json_path=("metadata",)),
                      data)
    return index, data
