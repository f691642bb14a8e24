"""Fuzz the safetensors reader (SafetensorsFile, open_weights on files, indexes and folders).

The test data holds no safetensors file, so the seeds are written by the `safetensors`
library from real tensors: the F32 norm weights of the SmolLM2 GGUF (as F32, F16, I8, U8
and I64 copies), with the GGUF's general.* strings as `__metadata__`; and the same split in
two shards with a model.safetensors.index.json.
"""
from __future__ import annotations

import functools
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forma_gui import open_weights
from forma_gui.formats.safetensors import SafetensorsFile
from tests.conftest import data_file
from tests.fuzz.harness import (Field, apply_json_ops, apply_ops, byte_ops, fresh_path,
                                fuzz_settings, json_ops, json_paths, note_example, run_reader)

st_numpy = pytest.importorskip("safetensors.numpy")

#: JSON costs a few bytes per Python object of ~30-100 bytes (a shape list of zeros: 2 bytes
#: per 8-byte list slot); the tensor data is mapped, not read
MEMORY_MULTIPLE = 32
N_TENSORS = 6


@functools.lru_cache(maxsize=1)
def real_tensors() -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """A few small real tensors from the SmolLM2 model, in several dtypes, and metadata."""
    path = data_file("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
    with open_weights(path) as w:
        norms = [t.name for t in w.tensors if t.dtype == "F32"][:N_TENSORS]
        arrays = {name: np.array(w.raw(name)) for name in norms}
        meta = {k: v for k, v in w.metadata.items()
                if k.startswith("general.") and isinstance(v, str)}
    names = list(arrays)
    out = {names[0]: arrays[names[0]], names[1]: arrays[names[1]].astype(np.float16),
           names[2]: (arrays[names[2]] * 100).astype(np.int8),
           names[3]: (arrays[names[3]] * 100).astype(np.uint8).reshape(-1, 8),
           names[4]: arrays[names[4]][:16].astype(np.int64)}
    out[names[5]] = arrays[names[5]][:0]  # an empty tensor: zero bytes at some offset
    return out, meta


@functools.lru_cache(maxsize=None)
def seed_file() -> tuple[bytes, int]:
    """(file bytes, header length) of a single-file seed written by the library."""
    tensors, meta = real_tensors()
    blob = st_numpy.save(tensors, metadata=meta)
    return blob, struct.unpack("<Q", blob[:8])[0]


@functools.lru_cache(maxsize=None)
def seed_shards() -> tuple[bytes, bytes, bytes]:
    """(index JSON, shard 1, shard 2) of a sharded seed."""
    tensors, meta = real_tensors()
    names = list(tensors)
    first, second = names[:3], names[3:]
    shard1 = st_numpy.save({n: tensors[n] for n in first})
    shard2 = st_numpy.save({n: tensors[n] for n in second})
    weight_map = {n: "model-00001-of-00002.safetensors" for n in first}
    weight_map.update({n: "model-00002-of-00002.safetensors" for n in second})
    index = {"metadata": {"total_size": len(shard1) + len(shard2)}, "weight_map": weight_map}
    return json.dumps(index).encode(), shard1, shard2


@functools.lru_cache(maxsize=None)
def header_paths() -> list[tuple]:
    blob, n = seed_file()
    return json_paths(json.loads(blob[8:8 + n]))


@functools.lru_cache(maxsize=None)
def index_paths() -> list[tuple]:
    return json_paths(json.loads(seed_shards()[0]))


def check_weights(w) -> None:
    """Every tensor's raw view has its byte size and shape; each one dequantizes."""
    for t in w.tensors:
        raw = w.raw(t.name)
        assert raw.nbytes == t.nbytes and raw.shape == t.shape
        if t.n_elements <= 4096:
            x = w.dequantize(t.name)
            assert x.shape == t.shape and x.dtype == np.float32


def check_file(f: SafetensorsFile) -> None:
    at = f.data_offset
    for t in sorted(f.tensors, key=lambda t: (t.offset, t.end)):
        assert t.offset == at
        at = t.end
    assert at == f.file_size


def run_single(path: Path) -> None:
    note_example("safetensors")
    run_reader(lambda: SafetensorsFile(path), [path], memory_multiple=MEMORY_MULTIPLE,
               check=check_file)
    run_reader(lambda: open_weights(path), [path], memory_multiple=MEMORY_MULTIPLE,
               check=check_weights)


# -- the fuzz tests ----------------------------------------------------------------------------

@st.composite
def header_edits(draw: st.DrawFn) -> tuple[list[tuple], str, list[tuple]]:
    """JSON edits of the header, how its length prefix is set, then byte edits."""
    edits = draw(json_ops(header_paths()))
    prefix = draw(st.sampled_from(["exact", "exact", "keep", "extreme"]))
    return edits, prefix, draw(st.none() | byte_ops(64, max_ops=2))


@fuzz_settings(0.4)
@given(example=header_edits())
def test_header_json_edits(tmp_path: Path, example) -> None:
    """Fields replaced by extreme values and wrong types; the length prefix exact or not."""
    edits, prefix, ops = example
    blob, n = seed_file()
    header = apply_json_ops(json.loads(blob[8:8 + n]), edits)
    length = {"exact": len(header), "keep": n, "extreme": 2**63}[prefix]
    data = struct.pack("<Q", length) + header + blob[8 + n:]
    path = fresh_path(tmp_path, "model.safetensors")
    path.write_bytes(apply_ops(data, ops or ()))
    run_single(path)


@fuzz_settings(0.4)
@given(ops=byte_ops(seed_file()[1] + 8, [Field(0, 8)]))
def test_byte_edits(tmp_path: Path, ops: list[tuple]) -> None:
    """Truncation, bit flips and overwrites in the length prefix and the JSON header."""
    blob, _ = seed_file()
    path = fresh_path(tmp_path, "model.safetensors")
    path.write_bytes(apply_ops(blob, ops))
    run_single(path)


@fuzz_settings(0.2)
@given(which=st.integers(0, 2), data=st.data())
def test_sharded(tmp_path: Path, which: int, data: st.DataObject) -> None:
    """A sharded model: JSON edits of the index, or byte edits of one shard."""
    index, shard1, shard2 = seed_shards()
    if which == 0:
        index = apply_json_ops(json.loads(index), data.draw(json_ops(index_paths())))
    else:
        shard = shard1 if which == 1 else shard2
        mutated = apply_ops(shard, data.draw(byte_ops(len(shard), [Field(0, 8)])))
        shard1, shard2 = (mutated, shard2) if which == 1 else (shard1, mutated)
    folder = fresh_path(tmp_path, "model")
    folder.mkdir()
    files = [folder / "model.safetensors.index.json", folder / "model-00001-of-00002.safetensors",
             folder / "model-00002-of-00002.safetensors"]
    for path, blob in zip(files, (index, shard1, shard2)):
        path.write_bytes(blob)
    note_example("safetensors")
    run_reader(lambda: open_weights(folder), files, memory_multiple=MEMORY_MULTIPLE,
               check=check_weights)


def test_seeds_load(tmp_path: Path) -> None:
    """The unmutated seeds open, and equal what the library reads."""
    blob, _ = seed_file()
    path = tmp_path / "model.safetensors"
    path.write_bytes(blob)
    expected = st_numpy.load_file(str(path))
    with open_weights(path) as w:
        check_weights(w)
        for name, array in expected.items():
            np.testing.assert_array_equal(w.raw(name), array)


# -- regressions: minimal inputs for the bugs the fuzz found -------------------------------------

def test_header_length_over_the_library_cap(tmp_path: Path) -> None:
    """A 1 GiB sparse file whose header length claims 500 MB: the reader used to read and
    parse all of it; the safetensors library refuses headers over 100,000,000 bytes."""
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 500_000_000) + b"{")
        f.truncate(2**30)
    err = run_reader(lambda: SafetensorsFile(path), [path], memory_multiple=0,
                     input_bytes=0, expect_error=True)
    assert err.offset == 0 and "100000000-byte limit" in err.message


@pytest.mark.parametrize("dtype", [["F32"], {"F32": 1}])
def test_dtype_of_a_wrong_json_type(tmp_path: Path, dtype: object) -> None:
    """A list or object as dtype leaked TypeError (unhashable) from the dtype lookup."""
    header = json.dumps({"w": {"dtype": dtype, "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    err = run_reader(lambda: SafetensorsFile(path), [path], memory_multiple=0,
                     expect_error=True)
    assert "unsupported dtype" in err.message


@pytest.mark.parametrize("shard", ["a\u0000b.safetensors", "\ud800.safetensors"],
                         ids=["nul", "lone-surrogate"])
def test_shard_names_the_os_cannot_open(tmp_path: Path, shard: str) -> None:
    """JSON can spell a NUL or a lone surrogate in a shard name: opening it leaked
    ValueError (embedded null byte) or UnicodeEncodeError instead of a FormatError."""
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": shard}}), encoding="utf-8")
    err = run_reader(lambda: open_weights(tmp_path), [index], expect_error=True,
                     memory_multiple=MEMORY_MULTIPLE)
    assert err.path == str(index) and "plain file name" in err.message
