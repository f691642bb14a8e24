"""safetensors: values equal the library's on files it wrote; bad headers fail cleanly."""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forma_gui import open_weights
from forma_gui.errors import FormatError
from forma_gui.formats.safetensors import SafetensorsFile
from forma_gui.formats.weights import F8_E4M3_TABLE, F8_E5M2_TABLE
from tests.conftest import MAX_EXAMPLES

st_numpy = pytest.importorskip("safetensors.numpy")
safetensors = pytest.importorskip("safetensors")

RNG = np.random.default_rng(7)

#: every dtype safetensors.numpy round-trips, as arrays with awkward values
NUMPY_TENSORS = {
    "f64": RNG.standard_normal((3, 4)),
    "f32": RNG.standard_normal((2, 3, 5)).astype(np.float32),
    "f16": np.array([[0.0, -0.0, 65504.0, 6e-8], [np.inf, -np.inf, 1.5, -2.0]], np.float16),
    "i64": np.array([-2**63, 2**63 - 1, 0], np.int64),
    "i32": np.arange(-6, 6, dtype=np.int32).reshape(3, 4),
    "i16": np.array([-32768, 32767], np.int16),
    "i8": np.array([[-128, 127]], np.int8),
    "u8": np.arange(256, dtype=np.uint8).reshape(16, 16),
    "u16": np.array([0, 65535], np.uint16),
    "u32": np.array([2**32 - 1], np.uint32),
    "u64": np.array([2**64 - 1], np.uint64),
    "bool": np.array([True, False, True]),
    "scalar": np.array(3.5, np.float32),
    "empty": np.zeros((0, 4), np.float32),
}
ST_NAMES = {"f64": "F64", "f32": "F32", "f16": "F16", "i64": "I64", "i32": "I32", "i16": "I16",
            "i8": "I8", "u8": "U8", "u16": "U16", "u32": "U32", "u64": "U64", "bool": "BOOL",
            "scalar": "F32", "empty": "F32"}


def save_raw(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], np.ndarray]],
             metadata: dict[str, str] | None = None) -> None:
    """Write dtypes numpy lacks (bfloat16, float8) through the library's own serializer."""
    specs = {name: safetensors.TensorSpec(dtype=dtype, shape=list(shape),
                                          data_ptr=arr.ctypes.data, data_len=arr.nbytes)
             for name, (dtype, shape, arr) in tensors.items()}
    safetensors.serialize_file(specs, str(path), metadata=metadata)


def test_every_numpy_dtype_equals_the_library(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    st_numpy.save_file(NUMPY_TENSORS, path, metadata={"format": "np", "note": "ü"})
    ref = st_numpy.load_file(path)
    with open_weights(path) as w:
        assert w.format == "safetensors"
        assert w.metadata == {"format": "np", "note": "ü"}
        assert sorted(t.name for t in w.tensors) == sorted(ref)
        for name, arr in ref.items():
            t = w.tensor(name)
            assert (t.shape, t.dtype, t.nbytes) == (arr.shape, ST_NAMES[name], arr.nbytes)
            raw = w.raw(name)
            assert raw.dtype == arr.dtype and raw.shape == arr.shape and not raw.flags.writeable
            np.testing.assert_array_equal(raw, arr)
            deq = w.dequantize(name)
            assert deq.dtype == np.float32 and deq.shape == arr.shape
            np.testing.assert_array_equal(deq, arr.astype(np.float32))
            with open(path, "rb") as f:
                f.seek(t.offset)
                assert f.read(t.nbytes) == arr.tobytes()


def test_bf16_is_the_top_half_of_float32(tmp_path: Path) -> None:
    """bfloat16 = the upper 16 bits of an IEEE float32, so those floats come back exactly."""
    values = np.array([[1.0, -2.5, 3.140625, 0.0], [-0.0, np.inf, 1e-38, 3.3895e38]], np.float32)
    values = (values.view(np.uint32) & 0xFFFF0000).view(np.float32)  # representable in bf16
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    path = tmp_path / "bf16.safetensors"
    save_raw(path, {"w": ("bfloat16", (2, 4), bits)})
    with open_weights(path) as w:
        assert w.tensor("w").dtype == "BF16"
        np.testing.assert_array_equal(w.raw("w"), bits)
        np.testing.assert_array_equal(w.dequantize("w").view(np.uint32), values.view(np.uint32))


#: known values of the OCP 8-bit float formats (OFP8 spec, tables 1 and 2)
F8_KNOWN = {
    "float8_e4m3fn": {0x00: 0.0, 0x01: 2.0**-9, 0x07: 7 * 2.0**-9, 0x08: 2.0**-6, 0x38: 1.0,
                      0x7E: 448.0, 0xFE: -448.0, 0x80: -0.0, 0xB8: -1.0},
    "float8_e5m2": {0x00: 0.0, 0x01: 2.0**-16, 0x04: 2.0**-14, 0x3C: 1.0, 0x7B: 57344.0,
                    0x7C: np.inf, 0xFC: -np.inf, 0xC0: -2.0},
}
F8_NAN = {"float8_e4m3fn": [0x7F, 0xFF], "float8_e5m2": [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]}


@pytest.mark.parametrize("lib_name, ours", [("float8_e4m3fn", "F8_E4M3"),
                                             ("float8_e5m2", "F8_E5M2")])
def test_float8_known_values(tmp_path: Path, lib_name: str, ours: str) -> None:
    codes = np.arange(256, dtype=np.uint8)
    path = tmp_path / "f8.safetensors"
    save_raw(path, {"w": (lib_name, (16, 16), codes)})
    with open_weights(path) as w:
        assert w.tensor("w").dtype == ours
        values = w.dequantize("w").ravel()
    for code, expected in F8_KNOWN[lib_name].items():
        assert values[code] == expected and np.signbit(values[code]) == np.signbit(expected)
    assert np.isnan(values).nonzero()[0].tolist() == F8_NAN[lib_name]
    finite = values[np.isfinite(values)]
    assert finite.size == 256 - len(F8_NAN[lib_name]) - (2 if lib_name == "float8_e5m2" else 0)
    positive = values[:128][np.isfinite(values[:128])]
    assert np.all(np.diff(positive) > 0)  # codes are ordered like their values
    np.testing.assert_array_equal(-values[:128], values[128:])  # sign bit


def test_float8_against_ml_dtypes() -> None:
    import ml_dtypes  # a test dependency: the oracle for the float8 tables
    codes = np.arange(256, dtype=np.uint8)
    for table, dtype in [(F8_E4M3_TABLE, ml_dtypes.float8_e4m3fn),
                         (F8_E5M2_TABLE, ml_dtypes.float8_e5m2)]:
        np.testing.assert_array_equal(table, codes.view(dtype).astype(np.float32))


def test_sharded_folder(tmp_path: Path) -> None:
    shard_a = {"model.embed_tokens.weight": RNG.standard_normal((8, 4)).astype(np.float32),
               "model.norm.weight": np.ones(4, np.float16)}
    shard_b = {"lm_head.weight": RNG.standard_normal((8, 4)).astype(np.float32)}
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    st_numpy.save_file(shard_a, tmp_path / names[0], metadata={"format": "pt"})
    st_numpy.save_file(shard_b, tmp_path / names[1], metadata={"format": "pt"})
    weight_map = {**{k: names[0] for k in shard_a}, **{k: names[1] for k in shard_b}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 168}, "weight_map": weight_map}))
    ref = {**st_numpy.load_file(tmp_path / names[0]), **st_numpy.load_file(tmp_path / names[1])}
    for target in (tmp_path, tmp_path / "model.safetensors.index.json"):
        with open_weights(target) as w:
            assert w.metadata["total_size"] == 168 and w.metadata["format"] == "pt"
            assert {t.name for t in w.tensors} == set(ref)
            assert {Path(f).name for f in w.files} == set(names)
            for name, arr in ref.items():
                assert Path(w.tensor(name).file).name == weight_map[name]
                np.testing.assert_array_equal(w.raw(name), arr)
                np.testing.assert_array_equal(w.dequantize(name), arr.astype(np.float32))


@pytest.mark.parametrize("weight_map, words, at", [
    ({"a": "../outside.safetensors"}, "plain file name", "../outside.safetensors"),
    ({"a": "/etc/passwd"}, "plain file name", "/etc/passwd"),
    ({"a": "x.safetensors", "zzz": "x.safetensors"}, "does not hold it", "x.safetensors"),
    ({"a": "x.safetensors", "b": 5}, "weight_map", 5),
    ({"a": "missing.safetensors"}, "cannot open", None),
])
def test_bad_index(tmp_path: Path, weight_map: dict, words: str, at) -> None:
    """An index entry at fault is named by its byte offset and line (the value there is the
    entry's shard); a shard that cannot be opened is named itself."""
    st_numpy.save_file({"a": np.zeros(2, np.float32)}, tmp_path / "x.safetensors")
    data = json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1).encode()
    (tmp_path / "model.safetensors.index.json").write_bytes(data)
    with pytest.raises(FormatError, match=words) as info:
        open_weights(tmp_path)
    if at is not None:
        error = info.value
        assert error.line == data.count(b"\n", 0, error.offset) + 1 > 1
        assert json.JSONDecoder().raw_decode(data[error.offset:].decode())[0] == at


def test_same_tensor_in_two_shards(tmp_path: Path) -> None:
    for name in ("a.safetensors", "b.safetensors"):
        st_numpy.save_file({"w": np.zeros(2, np.float32)}, tmp_path / name)
    with pytest.raises(FormatError, match="in both"):
        open_weights(tmp_path)


# -- hostile headers ------------------------------------------------------------------------

def blob(header: object, data: bytes = b"", *, raw_header: bytes | None = None,
         length: int | None = None) -> bytes:
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def entry(dtype: str = "F32", shape: list = (2,), offsets: list = (0, 8)) -> dict:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


@pytest.mark.parametrize("content, offset, words", [
    (b"", 0, "8-byte header length"),
    (b"\x05\0\0", 0, "8-byte header length"),
    (blob({}, length=2**63), 0, "runs past the end"),
    (blob({}, length=2**64 - 1), 0, "runs past the end"),
    (blob(None, raw_header=b"{\"a\": "), 14, "invalid JSON"),
    (blob(None, raw_header=b"\xff{}"), 8, "UTF-8"),
    (blob(None, raw_header=b"[" * 100000 + b"]" * 100000), 8, "nested"),
    (blob([1, 2]), 8, "JSON object"),
    (blob({"__metadata__": {"a": 1}}), ("at", {"a": 1}), "strings to strings"),
    (blob({"w": entry(dtype="Q4_0")}, b"\0" * 8), ("at", "Q4_0"), "unsupported dtype 'Q4_0'"),
    (blob({"w": entry(shape=[-2])}, b"\0" * 8), ("at", [-2]), "non-negative"),
    (blob({"w": entry(shape=[2.0])}, b"\0" * 8), ("at", [2.0]), "shape"),
    (blob({"w": entry(shape=[True, 2])}, b"\0" * 8), ("at", [True, 2]), "shape"),
    (blob({"w": entry(offsets=[0])}, b"\0" * 8), ("at", [0]), "data_offsets"),
    (blob({"w": entry(offsets=[0, 2**70])}, b"\0" * 8), ("at", [0, 2**70]), "outside"),
    (blob({"w": entry(offsets=[8, 0])}, b"\0" * 8), ("at", [8, 0]), "outside"),
    (blob({"w": entry(shape=[2**40, 2**40])}, b"\0" * 8), ("at", [2**40, 2**40]), "too large"),
    (blob({"w": entry(shape=[0, 2**62], offsets=[0, 0])}, b""), ("at", [0, 2**62]), "too large"),  # empty, no array
    (blob({"w": entry(shape=[3])}, b"\0" * 8), ("at", [0, 8]), "needs 12 bytes"),
    (blob({"w": entry(), "v": entry(offsets=[4, 12])}, b"\0" * 12), None, "overlaps"),
    (blob({"w": entry(offsets=[4, 12])}, b"\0" * 12), None, "hole"),
    (blob({"w": entry()}, b"\0" * 12), None, "after the last tensor"),
    (blob({"w": "F32"}, b""), ("at", "F32"), "expected an object"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_hostile_headers(tmp_path: Path, content: bytes, offset, words: str) -> None:
    """Each error names the file and a byte offset: a fixed one, or (``("at", value)``) that of
    the header value at fault, which is what decodes there."""
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(FormatError, match=words) as info:
        SafetensorsFile(path)
    assert info.value.path == str(path)
    assert info.value.offset is not None
    if isinstance(offset, tuple):
        assert json.JSONDecoder().raw_decode(content[info.value.offset:].decode())[0] == offset[1]
    elif offset is not None:
        assert info.value.offset == offset


def test_truncation_at_every_offset(tmp_path: Path) -> None:
    full = tmp_path / "full.safetensors"
    st_numpy.save_file({"a": np.arange(6, dtype=np.float32), "b": np.ones(3, np.int16)}, full,
                       metadata={"k": "v"})
    content = full.read_bytes()
    for cut in range(len(content)):
        path = tmp_path / "cut.safetensors"
        path.write_bytes(content[:cut])
        with pytest.raises(FormatError):
            SafetensorsFile(path)


@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=1,
                      max_size=4))
def test_bit_flips_give_format_error_or_a_result(tmp_path: Path, flips) -> None:
    content = bytearray(blob({"__metadata__": {"k": "v"}, "w": entry(shape=[2, 1]),
                              "b": entry("U8", [4], [8, 12])}, b"\0" * 12))
    for pos, bit in flips:
        content[pos % len(content)] ^= 1 << bit
    path = tmp_path / "flip.safetensors"
    path.write_bytes(bytes(content))
    try:
        with SafetensorsFile(path) as f:
            assert sum(t.nbytes for t in f.tensors) == f.file_size - f.data_offset
            assert all(t.nbytes == math.prod(t.shape) * (4 if t.dtype == "F32" else 1)
                       or t.dtype not in ("F32", "U8") for t in f.tensors)
    except FormatError:
        pass


def test_memory_stays_within_a_small_multiple_of_the_file(tmp_path: Path) -> None:
    import tracemalloc

    n = 3000
    header = {f"t{i}": entry("U8", [1], [i, i + 1]) for i in range(n)}
    content = blob(header, b"\0" * n)
    path = tmp_path / "many.safetensors"
    path.write_bytes(content)
    tracemalloc.start()
    try:
        SafetensorsFile(path).close()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * len(content) + 2**16, (peak, len(content))
