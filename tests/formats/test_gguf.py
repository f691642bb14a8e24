"""GGUF reader: agrees with gguf-py's GGUFReader; every hostile header is a clean FormatError."""
from __future__ import annotations

import functools
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forma_gui.errors import FormatError
from forma_gui.formats.gguf import GGUFFile, _Reader
from tests.conftest import MAX_EXAMPLES, data_file

gguf = pytest.importorskip("gguf")

# GGUFReader needs ~10 s each for the two largest vocab files, so they get lighter checks
REAL_FILES = [
    ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    *[("gguf-vocab", f"ggml-vocab-{name}.gguf") for name in ("gpt-2", "llama-spm", "bert-bge")],
]
LARGE_VOCAB_FILES = ["llama-bpe", "qwen2"]

# -- a tiny GGUF builder for hostile headers (gguf-py refuses to write them) ----------------

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


def gstr(s: bytes | str, order: str = "<") -> bytes:
    data = s.encode() if isinstance(s, str) else s
    return struct.pack(order + "Q", len(data)) + data


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + payload


def tinfo(name: str, dims: tuple[int, ...], type_id: int, offset: int) -> bytes:
    return (gstr(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
            + struct.pack("<IQ", type_id, offset))


def build(kvs: list[bytes] = (), infos: list[bytes] = (), data: bytes = b"", *,
          version: int = 3, n_tensors: int | None = None, n_kv: int | None = None,
          alignment: int = 32) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % alignment)
    return head + data


def small_file() -> bytes:
    """Two F32 tensors and one of each kind of metadata value."""
    kvs = [
        kv("a.u8", U8, b"\x07"), kv("a.str", STR, gstr("héllo")),
        kv("a.bool", BOOL, b"\x01"), kv("a.f64", F64, struct.pack("<d", 0.1)),
        kv("a.arr", ARR, struct.pack("<IQ", I32, 3) + struct.pack("<3i", -1, 0, 2)),
        kv("a.strs", ARR, struct.pack("<IQ", STR, 2) + gstr("x") + gstr(b"\xff")),
        kv("a.nested", ARR, struct.pack("<IQ", ARR, 1) + struct.pack("<IQ", U16, 2)
           + struct.pack("<2H", 1, 2)),
    ]
    infos = [tinfo("w", (4, 2), 0, 0), tinfo("b", (4,), 0, 32)]
    data = np.arange(8, dtype="<f4").tobytes() + np.ones(4, "<f4").tobytes()
    return build(kvs, infos, data)


def write(tmp_path: Path, blob: bytes, name: str = "t.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(blob)
    return path


def open_bad(path: Path) -> FormatError:
    with pytest.raises(FormatError) as info:
        GGUFFile(path)
    err = info.value
    assert err.path == str(path)
    return err


# -- real files, against gguf-py --------------------------------------------------------------

def reader_value(field) -> object:
    """A GGUFReader field's value, strings decoded the way GGUFFile documents."""
    from gguf import GGUFValueType as T

    if field.types[0] == T.ARRAY and field.types[-1] == T.STRING:
        return [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
    if field.types[0] == T.STRING:
        return bytes(field.parts[-1]).decode("utf-8", "surrogateescape")
    return field.contents()


@pytest.mark.parametrize("parts", REAL_FILES, ids=lambda p: p[1])
def test_real_files_match_gguf_reader(parts: tuple[str, str]) -> None:
    path = data_file(*parts)
    ref = gguf.GGUFReader(path)
    with GGUFFile(path) as g:
        keys = [k for k in ref.fields if not k.startswith("GGUF.")]
        assert list(g.metadata) == keys
        for key in keys:
            field, ours = ref.fields[key], g.metadata[key]
            assert g.metadata_types[key].split("[")[0] == field.types[0].name
            if isinstance(ours, np.ndarray):
                ours = ours.tolist()
            assert ours == reader_value(field), key
        assert g.version == int(ref.fields["GGUF.version"].parts[0][0])
        assert len(g.tensors) == len(ref.tensors)
        for t, r in zip(g.tensors, ref.tensors):
            assert (t.name, t.shape, t.dtype, t.offset, t.nbytes, t.n_elements) == (
                r.name, tuple(reversed(r.shape.tolist())), r.tensor_type.name,
                r.data_offset, r.n_bytes, r.n_elements)
        if g.tensors:
            assert g.data_offset == ref.data_offset


@pytest.mark.parametrize("name", LARGE_VOCAB_FILES)
def test_large_vocab_files(name: str) -> None:
    """Every id llama.cpp produced exists, and merges are 'left right' pairs."""
    path = data_file("gguf-vocab", f"ggml-vocab-{name}.gguf")
    ids = [int(i) for i in Path(f"{path}.out").read_text().split()]
    with GGUFFile(path) as g:
        tokens, merges = g.metadata["tokenizer.ggml.tokens"], g.metadata["tokenizer.ggml.merges"]
        types = g.metadata["tokenizer.ggml.token_type"]
        assert g.metadata["tokenizer.ggml.model"] == "gpt2"
        assert len(types) == len(tokens) > max(ids)
        assert all(m.count(" ") == 1 for m in merges)
        assert g.metadata_types["tokenizer.ggml.merges"] == "ARRAY[STRING]"


def test_smollm2_known_facts() -> None:
    """From the data README: 272 tensors, Q4_1 x210, Q8_0 x1, F32 x61, 49152 tokens."""
    with GGUFFile(data_file("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")) as g:
        dtypes = [t.dtype for t in g.tensors]
        assert (len(dtypes), dtypes.count("Q4_1"), dtypes.count("Q8_0"), dtypes.count("F32")) \
            == (272, 210, 1, 61)
        assert len(g.metadata["tokenizer.ggml.tokens"]) == 49152
        assert len(g.metadata["tokenizer.ggml.merges"]) == 48900
        assert g.metadata["tokenizer.ggml.model"] == "gpt2"
        assert g.metadata["tokenizer.ggml.pre"] == "smollm"
        assert g.metadata_types["tokenizer.ggml.token_type"] == "ARRAY[INT32]"
        assert g.metadata["tokenizer.ggml.token_type"].dtype == np.int32


def test_metadata_only(tmp_path: Path) -> None:
    path = data_file("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
    with GGUFFile(path, read_tensors=False) as g:
        assert g.tensors == [] and g.data_offset is None
        assert len(g.metadata) == 33


# -- files written by gguf.GGUFWriter ---------------------------------------------------------

def writer_file(path: Path, endianess=None) -> dict:
    """Write every metadata type and several tensor types; return what was written."""
    from gguf import GGMLQuantizationType as Q, GGUFEndian, GGUFWriter

    w = GGUFWriter(path, "test", endianess=endianess or GGUFEndian.LITTLE)
    values = {
        "t.u8": (w.add_uint8, 255), "t.i8": (w.add_int8, -128),
        "t.u16": (w.add_uint16, 65535), "t.i16": (w.add_int16, -32768),
        "t.u32": (w.add_uint32, 2**32 - 1), "t.i32": (w.add_int32, -2**31),
        "t.u64": (w.add_uint64, 2**64 - 1), "t.i64": (w.add_int64, -2**63),
        "t.f32": (w.add_float32, 0.1), "t.f64": (w.add_float64, 0.1),
        "t.bool": (w.add_bool, True), "t.str": (w.add_string, "naïve ▁ 🙂"),
        "t.arr_i32": (w.add_array, [1, -2, 3]), "t.arr_f32": (w.add_array, [0.5, -1.25]),
        "t.arr_bool": (w.add_array, [True, False]), "t.arr_str": (w.add_array, ["a", "", "ü"]),
        "t.arr_arr": (w.add_array, [[1, 2], [3], [4, 5, 6]]),
        "t.arr_arr_str": (w.add_array, [["x", "y"], ["z"]]),
    }
    for key, (add, value) in values.items():
        add(key, value)
    w.add_custom_alignment(64)
    rng = np.random.default_rng(0)
    tensors = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((4, 8)).astype(np.float16),
        "f64": rng.standard_normal((2,)),
        "i8": np.arange(-4, 4, dtype=np.int8).reshape(2, 4),
        "i16": np.arange(6, dtype=np.int16), "i32": np.arange(6, dtype=np.int32),
        "i64": np.arange(2 * 3 * 4, dtype=np.int64).reshape(2, 3, 4),
    }
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    q4k = rng.integers(0, 256, (2, 144 * 2), dtype=np.uint8)  # 2 rows of 512 Q4_K elements
    w.add_tensor("q4k", q4k, raw_dtype=Q.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"values": {k: v for k, (_, v) in values.items()}, "tensors": tensors}


@pytest.mark.parametrize("big", [False, True], ids=["little", "big"])
def test_writer_file_every_type(tmp_path: Path, big: bool) -> None:
    from gguf import GGUFEndian

    path = tmp_path / "w.gguf"
    written = writer_file(path, GGUFEndian.BIG if big else GGUFEndian.LITTLE)
    with GGUFFile(path) as g:
        assert g.byte_order == (">" if big else "<")
        assert g.alignment == 64 and g.data_offset % 64 == 0
        for key, value in written["values"].items():
            ours = g.metadata[key]
            if isinstance(value, float):
                assert ours == (float(np.float32(value)) if key == "t.f32" else value)
            elif key == "t.arr_arr":
                assert [a.tolist() for a in ours] == value
            elif isinstance(ours, np.ndarray):
                assert ours.tolist() == value and ours.dtype.isnative
            else:
                assert ours == value, key
        assert g.metadata_types["t.arr_arr"] == "ARRAY[ARRAY]"
        assert g.metadata_types["t.u64"] == "UINT64"
        by_name = {t.name: t for t in g.tensors}
        for name, arr in written["tensors"].items():
            t = by_name[name]
            assert t.shape == arr.shape and t.nbytes == arr.nbytes
            stored = g.data[t.offset:t.end].view(arr.dtype.newbyteorder(g.byte_order))
            np.testing.assert_array_equal(stored.reshape(arr.shape), arr)
        assert by_name["q4k"].shape == (2, 512) and by_name["q4k"].dtype == "Q4_K"
        ref = gguf.GGUFReader(path)
        assert g.data_offset == ref.data_offset
        assert [t.offset for t in g.tensors] == [t.data_offset for t in ref.tensors]


def test_invalid_utf8_is_kept_exactly(tmp_path: Path) -> None:
    raw = [b"\xe2\x82", b"ok", b"\xff\xfe", b"\xc3\xa9"]
    blob = build([kv("tokens", ARR, struct.pack("<IQ", STR, 4) + b"".join(map(gstr, raw))),
                  kv(b"k\xff".decode("latin-1"), STR, gstr(b"\x80"))])
    with GGUFFile(write(tmp_path, blob)) as g:
        tokens = g.metadata["tokens"]
        assert [t.encode("utf-8", "surrogateescape") for t in tokens] == raw
        assert tokens[3] == "é"


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=30))
def test_fast_string_array_equals_reference(items: list[bytes]) -> None:
    blob = b"".join(gstr(s) for s in items)
    fast = _Reader(blob, "x", "<")
    slow = _Reader(blob, "x", "<")
    assert fast.string_array(len(items)) == slow.string_array_reference(len(items))
    assert fast.pos == slow.pos == len(blob)
    again = _Reader(blob, "x", "<").string_array(len(items))
    assert [s.encode("utf-8", "surrogateescape") for s in again] == items  # nothing lost


# -- hostile headers ------------------------------------------------------------------------

def test_truncation_at_every_offset(tmp_path: Path) -> None:
    blob = small_file()
    with GGUFFile(write(tmp_path, blob, "full.gguf")) as g:  # the untruncated file is fine
        assert [t.name for t in g.tensors] == ["w", "b"]
        assert g.metadata["a.strs"] == ["x", "\udcff"]
    for cut in range(len(blob)):
        path = write(tmp_path, blob[:cut])
        err = open_bad(path)
        assert err.offset is not None and 0 <= err.offset <= cut, (cut, err)


HUGE = 2**63


@pytest.mark.parametrize("blob, offset, words", [
    (build(n_tensors=HUGE), 8, "tensor count"),
    (build(n_kv=HUGE), 16, "key/value count"),
    (build(n_kv=2**64 - 1), 16, "count"),
    (build([struct.pack("<Q", HUGE) + b"k"]), 24, "length"),
    (build([kv("k", STR, struct.pack("<Q", HUGE))]), 37, "length"),
    (build([kv("k", ARR, struct.pack("<IQ", U8, HUGE))]), 41, "UINT8 array count"),
    (build([kv("k", ARR, struct.pack("<IQ", STR, HUGE))]), 41, "string array count"),
    (build([kv("k", ARR, struct.pack("<IQ", ARR, HUGE))]), 41, "array of arrays count"),
    (build([kv("k", ARR, struct.pack("<IQ", STR, 1) + struct.pack("<Q", HUGE))]), 49,
     "length"),
    (build([kv("k", 13, b"\0" * 8)]), 33, "unknown GGUF value type 13"),
    (build([kv("k", BOOL, b"\x02")]), 37, "BOOL"),
    (build([kv("k", U8, b"\1"), kv("k", U8, b"\2")]), 38, "duplicate metadata key"),
    (build(version=1), 4, "version 1"),
    (build(version=4), 4, "version 4"),
    (b"GGML" + b"\0" * 60, 0, "magic"),
    (b"", 0, "magic"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_hostile_header(tmp_path: Path, blob: bytes, offset: int, words: str) -> None:
    err = open_bad(write(tmp_path, blob))
    assert err.offset == offset, err
    assert words in str(err)


@pytest.mark.parametrize("alignment, vtype, words", [
    (0, U32, "power of two"), (48, U32, "power of two"), (32, U64, "UINT32"),
])
def test_bad_alignment(tmp_path: Path, alignment: int, vtype: int, words: str) -> None:
    payload = struct.pack("<Q" if vtype == U64 else "<I", alignment)
    err = open_bad(write(tmp_path, build([kv("general.alignment", vtype, payload)])))
    assert err.offset == 24 and words in str(err)


def f32_tensor_file(*infos: bytes, data: bytes = b"\0" * 64) -> bytes:
    return build([], list(infos), data)


@pytest.mark.parametrize("blob, words", [
    (f32_tensor_file(tinfo("w", (16,), 0, 32)), "past the end"),           # 64 bytes at 32 of 64
    (f32_tensor_file(tinfo("w", (4,), 0, HUGE)), "past the end"),
    (f32_tensor_file(tinfo("w", (4,), 0, 4)), "not a multiple of the alignment"),
    (f32_tensor_file(tinfo("w", (8,), 0, 0), tinfo("v", (4,), 0, 0)), "overlaps"),
    (f32_tensor_file(tinfo("w", (4,), 0, 0), tinfo("w", (4,), 0, 32)), "duplicate tensor"),
    (f32_tensor_file(tinfo("w", (4,), 99, 0)), "unknown GGML type id 99"),
    (f32_tensor_file(tinfo("w", (2**31, 2**28), 0, 0)), "past the end"),
    (f32_tensor_file(tinfo("w", (2**31, 2**31), 0, 0)), "overflow"),      # 2^65 bytes as float64
    (f32_tensor_file(tinfo("w", (2**62, 2**62), 0, 0)), "overflow"),
    (f32_tensor_file(tinfo("w", (HUGE,), 0, 0)), "overflow"),
    (f32_tensor_file(tinfo("w", (2**62, 0), 0, 0)), "overflow"),          # no elements, but numpy
    (f32_tensor_file(tinfo("w", (0, 2**62), 0, 0)), "overflow"),          # refuses such an array
    (f32_tensor_file(tinfo("w", (1, 1, 1, 1, 1), 0, 0)), "5 dimensions"),
    (f32_tensor_file(tinfo("w", (16,), 2, 0)), "block size 32"),           # Q4_0 row of 16
])
def test_bad_tensor_infos(tmp_path: Path, blob: bytes, words: str) -> None:
    err = open_bad(write(tmp_path, blob))
    assert words in str(err) and err.offset is not None and err.offset >= 24


def test_a_megabyte_name_gives_a_short_message(tmp_path: Path) -> None:
    """Names from the file are cut in messages: a hostile key must not make a huge error."""
    err = open_bad(write(tmp_path, build([kv("k" * (1 << 20), 99, b"")])))
    assert len(str(err)) < 1000 and f"({1 << 20} characters)" in str(err)
    assert err.offset == 24 + 8 + (1 << 20)   # at the value type after the key


def test_huge_n_dims(tmp_path: Path) -> None:
    info = gstr("w") + struct.pack("<I", 2**32 - 1)
    err = open_bad(write(tmp_path, build([], [info])))
    assert "dimensions" in str(err) and err.offset == 24 + 8 + 1


def test_deeply_nested_arrays(tmp_path: Path) -> None:
    payload = struct.pack("<IQ", ARR, 1) * 200 + struct.pack("<IQ", U8, 0)
    err = open_bad(write(tmp_path, build([kv("k", ARR, payload)])))
    assert "nested deeper" in str(err)


@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=1,
                      max_size=4),
       cut=st.integers(0, 10**6))
def test_bit_flips_give_format_error_or_a_result(tmp_path: Path, flips, cut) -> None:
    blob = bytearray(small_file())
    for pos, bit in flips:
        blob[pos % len(blob)] ^= 1 << bit
    blob = bytes(blob[:max(cut % (len(blob) + 1), 1)] if cut % 3 == 0 else blob)
    try:
        GGUFFile(write(tmp_path, blob)).close()
    except FormatError:
        pass


#: worst-case memory per input byte: a 12-byte empty array still becomes a numpy object
MEMORY_MULTIPLE = 32
N_ITEMS = 3000
DENSE_HEADERS = {
    "arrays of empty arrays": build([kv("k", ARR, struct.pack("<IQ", ARR, N_ITEMS)
                                        + struct.pack("<IQ", U8, 0) * N_ITEMS)]),
    "arrays of one-byte arrays": build([kv("k", ARR, struct.pack("<IQ", ARR, N_ITEMS)
                                           + struct.pack("<IQB", U8, 1, 7) * N_ITEMS)]),
    "arrays of empty string arrays": build([kv("k", ARR, struct.pack("<IQ", ARR, N_ITEMS)
                                               + struct.pack("<IQ", STR, 0) * N_ITEMS)]),
    "empty strings": build([kv("k", ARR, struct.pack("<IQ", STR, N_ITEMS)
                               + struct.pack("<Q", 0) * N_ITEMS)]),
    "many keys": build([kv(f"{i:x}", U8, b"\1") for i in range(N_ITEMS)]),
    "many tensors": build([], [tinfo(f"{i:x}", (8,), 0, 32 * i) for i in range(N_ITEMS)],
                          b"\0" * 32 * N_ITEMS),
}


@pytest.mark.parametrize("name", DENSE_HEADERS)
def test_memory_stays_within_a_small_multiple_of_the_file(tmp_path: Path, name: str) -> None:
    blob = DENSE_HEADERS[name]
    path = write(tmp_path, blob)
    tracemalloc.start()
    try:
        GGUFFile(path).close()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_MULTIPLE * len(blob) + 2**16, (peak, len(blob))


@functools.lru_cache(maxsize=1)
def real_seed() -> bytes:
    return data_file("gguf-vocab", "ggml-vocab-bert-bge.gguf").read_bytes()


@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 7)), min_size=1,
                      max_size=3),
       cut=st.none() | st.integers(0, 2**20))
def test_real_file_mutations(tmp_path: Path, flips, cut) -> None:
    """Seeds from a real file: bit flips anywhere in its header, optionally truncated."""
    blob = bytearray(real_seed())
    for pos, bit in flips:
        blob[pos % len(blob)] ^= 1 << bit
    if cut is not None:
        blob = blob[:cut % len(blob)]
    try:
        with GGUFFile(write(tmp_path, bytes(blob))) as g:
            assert len(g.metadata) <= 20
    except FormatError as e:
        assert e.offset is not None and e.path == str(tmp_path / "t.gguf")


# -- big files: opening never reads tensor data ------------------------------------------

def test_sparse_gigabyte_file_opens_in_little_memory(tmp_path: Path) -> None:
    n_tensors, rows, cols = 64, 4096, 4096  # 64 F16 tensors of 32 MiB: 2 GiB of holes
    nbytes = rows * cols * 2
    infos = [tinfo(f"blk.{i}.w", (cols, rows), 1, i * nbytes) for i in range(n_tensors)]
    head = build([kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, 1000)
                     + b"".join(gstr(f"tok{i}") for i in range(1000)))], infos)
    path = tmp_path / "sparse.gguf"
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + n_tensors * nbytes)
    size = path.stat().st_size
    assert size >= 2**30
    tracemalloc.start()
    try:
        with GGUFFile(path) as g:
            listed = [(t.name, t.shape, t.nbytes) for t in g.tensors]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(listed) == n_tensors and listed[-1][1] == (rows, cols)
    assert peak < 2 * 2**20, peak  # far below the 2 GiB file


def test_shrunk_file_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, small_file())
    with GGUFFile(path) as g:
        g.check_size()
        with open(path, "r+b") as f:
            f.truncate(40)
        with pytest.raises(FormatError, match="shrank"):
            g.check_size()


def test_close_keeps_views_valid(tmp_path: Path) -> None:
    g = GGUFFile(write(tmp_path, small_file()))
    t = g.tensor("w")
    view = g.data[t.offset:t.end].view("<f4")
    g.close()
    assert view.tolist() == list(range(8))
    with pytest.raises(FormatError, match="closed"):
        g.data
