"""Fuzz the GGUF reader (GGUFFile, open_weights and, once it exists, the GGUF tokenizer).

Seeds: every GGUF in the test data, re-serialised by a walker written here (independent of
the reader under test) with each metadata array cut to its first `KEEP` items (merges: the
ones whose parts and result survive) and the tensor infos unchanged. The tensor data is a
sparse tail of the original length, so the 98 MB model costs a ~20 KB write per example.
"""
from __future__ import annotations

import functools
import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forma_gui import open_weights
from forma_gui.formats.gguf import GGUFFile
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import data_file
from tests.fuzz.harness import (TOKENIZER_MEMORY_MULTIPLE, Field, apply_ops, byte_ops,
                                check_tokenizer, fresh_path, fuzz_settings, note_example,
                                run_reader)

SEED_FILES = [("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"),
              *[("gguf-vocab", f"ggml-vocab-{n}.gguf")
                for n in ("gpt-2", "llama-bpe", "qwen2", "llama-spm", "bert-bge")]]
KEEP = 320  # tokens kept: covers the 256 byte tokens (gpt2) and <0x00>..<0xFF> (llama)
#: a header of n bytes becomes at most ~n Python objects (empty numpy arrays cost ~10x
#: their 12-byte encoding, strings ~6x); the metadata is copied out of the map
MEMORY_MULTIPLE = 32
HAS_GGUF_TOKENIZER = importlib.util.find_spec("forma_gui.formats.gguf_tokenizer") is not None

SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


class _Walker:
    """Copies a GGUF header item by item, shortening arrays, noting numeric fields."""

    def __init__(self, data: memoryview) -> None:
        self.data, self.pos = data, 0
        self.out = bytearray()
        self.fields: list[Field] = []
        self.kept_tokens: set[bytes] = set()

    def take(self, n: int, field: bool = False) -> bytes:
        chunk = bytes(self.data[self.pos:self.pos + n])
        if field:
            self.fields.append(Field(len(self.out), n))
        self.out += chunk
        self.pos += n
        return chunk

    def u32(self, field: bool = True) -> int:
        return struct.unpack("<I", self.take(4, field))[0]

    def u64(self, field: bool = True) -> int:
        return struct.unpack("<Q", self.take(8, field))[0]

    def skip_string(self) -> bytes:
        (n,) = struct.unpack_from("<Q", self.data, self.pos)
        s = bytes(self.data[self.pos + 8:self.pos + 8 + n])
        self.pos += 8 + n
        return s

    def string(self) -> bytes:
        n = self.u64()
        return self.take(n)

    def value(self, vtype: int, key: bytes) -> int | None:
        if vtype == STRING:
            self.string()
        elif vtype == ARRAY:
            self.array(key)
        else:
            raw = self.take(SCALAR_SIZES[vtype], field=SCALAR_SIZES[vtype] in (4, 8))
            if key == b"general.alignment":
                return struct.unpack("<I", raw)[0]
        return None

    def array(self, key: bytes) -> None:
        etype = self.u32()
        (count,) = struct.unpack_from("<Q", self.data, self.pos)
        self.pos += 8
        if etype == STRING:
            items = [self.skip_string() for _ in range(count)]
            items = self.choose(key, items)
            self.fields.append(Field(len(self.out), 8))
            self.out += struct.pack("<Q", len(items))
            for s in items:
                self.fields.append(Field(len(self.out), 8))
                self.out += struct.pack("<Q", len(s)) + s
        elif etype == ARRAY:
            self.fields.append(Field(len(self.out), 8))
            self.out += struct.pack("<Q", count)
            for _ in range(count):
                self.array(key)
        else:
            size = SCALAR_SIZES[etype]
            kept = min(count, KEEP)
            self.fields.append(Field(len(self.out), 8))
            self.out += struct.pack("<Q", kept)
            self.out += self.data[self.pos:self.pos + kept * size]
            self.pos += count * size

    def choose(self, key: bytes, items: list[bytes]) -> list[bytes]:
        if key == b"tokenizer.ggml.tokens":
            items = items[:KEEP]
            self.kept_tokens = set(items)
            return items
        if key == b"tokenizer.ggml.merges":
            ok = self.kept_tokens
            return [m for m in items if _merge_kept(m, ok)][:KEEP]
        return items[:KEEP]

    def tensor_info(self) -> None:
        self.string()
        n_dims = self.u32()
        for _ in range(n_dims):
            self.u64()
        self.u32()
        self.u64()


def _merge_kept(merge: bytes, tokens: set[bytes]) -> bool:
    parts = merge.split(b" ")
    return len(parts) == 2 and parts[0] in tokens and parts[1] in tokens \
        and parts[0] + parts[1] in tokens


@functools.lru_cache(maxsize=None)
def shrunk_seed(folder: str, name: str) -> tuple[bytes, tuple[Field, ...], int]:
    """(header bytes, numeric fields, length of the tensor data section) of a real GGUF."""
    path = data_file(folder, name)
    with open(path, "rb") as f:
        data = memoryview(f.read())
    w = _Walker(data)
    w.take(4)
    w.u32()
    n_tensors, n_kv = w.u64(), w.u64()
    alignment = 32
    for _ in range(n_kv):
        key = w.string()
        vtype = w.u32()
        alignment = w.value(vtype, key) or alignment
    for _ in range(n_tensors):
        w.tensor_info()
    data_len = max(0, len(data) - (-(-w.pos // alignment) * alignment))
    w.out += b"\0" * (-len(w.out) % alignment)
    return bytes(w.out), tuple(w.fields), data_len


#: written after the header, before the sparse rest: a count that runs into the data section
#: meets lengths of 2^64 - 1 at once rather than megabytes of zeros (cheap empty strings)
GUARD = b"\xff" * 4096


def write_example(tmp_path: Path, header: bytes, data_len: int, sparse_tail: bool) -> Path:
    path = fresh_path(tmp_path, "m.gguf")
    with open(path, "wb") as f:
        f.write(header)
        if sparse_tail:
            f.write(GUARD[:data_len])
            f.truncate(len(header) + data_len)  # a hole: no page is written or read
    return path


# -- what a correct result looks like --------------------------------------------------------

def check_gguf(g: GGUFFile) -> None:
    """Tensors lie inside the file, aligned, without overlaps; metadata keys are unique."""
    spans = sorted((t.offset, t.end) for t in g.tensors)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end or start == end
    for t in g.tensors:
        assert g.data_offset <= t.offset <= t.end <= g.file_size
        assert (t.offset - g.data_offset) % g.alignment == 0
    assert len(g.metadata) == len(g.metadata_types) == len(g.metadata_offsets)


def check_weights(w) -> None:
    """Every tensor's raw view has its byte size; the smallest one dequantizes."""
    for t in w.tensors:
        assert w.raw(t.name).nbytes == t.nbytes
    small = [t for t in w.tensors if 0 < t.n_elements <= 4096]
    if small:
        t = min(small, key=lambda t: t.n_elements)
        try:
            x = w.dequantize(t.name)
        except NotImplementedError:
            return
        assert x.shape == t.shape and x.dtype == np.float32


@pytest.fixture(scope="module", autouse=True)
def warm_patterns(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Compile each seed tokenizer's patterns once, outside the timed calls."""
    if HAS_GGUF_TOKENIZER:
        for seed in SEED_FILES:
            header, _, data_len = shrunk_seed(*seed)
            path = write_example(tmp_path_factory.mktemp("warm"), header, data_len, True)
            check_tokenizer(load_tokenizer(path))


def run_all(path: Path, size: int) -> None:
    files = [path]
    note_example("gguf")
    run_reader(lambda: GGUFFile(path), files, memory_multiple=MEMORY_MULTIPLE,
               input_bytes=size, check=check_gguf)
    run_reader(lambda: GGUFFile(path, read_tensors=False), files,
               memory_multiple=MEMORY_MULTIPLE, input_bytes=size)
    run_reader(lambda: open_weights(path), files, memory_multiple=MEMORY_MULTIPLE,
               input_bytes=size, check=check_weights)
    if HAS_GGUF_TOKENIZER:
        run_reader(lambda: load_tokenizer(path), files,
                   memory_multiple=TOKENIZER_MEMORY_MULTIPLE,
                   input_bytes=size, check=check_tokenizer)


# -- the fuzz tests ----------------------------------------------------------------------------

@st.composite
def mutations(draw: st.DrawFn) -> tuple[tuple[str, str], list[tuple], bool]:
    """(seed, mutation ops, whether the sparse data section follows the header)."""
    seed = draw(st.sampled_from(SEED_FILES))
    header, fields, _ = shrunk_seed(*seed)
    return seed, draw(byte_ops(len(header), fields)), draw(st.booleans())


@fuzz_settings()
@given(example=mutations())
def test_mutated_real_headers(tmp_path: Path, example) -> None:
    seed, ops, sparse_tail = example
    header, _, data_len = shrunk_seed(*seed)
    header = apply_ops(header, ops)
    path = write_example(tmp_path, header, data_len, sparse_tail)
    run_all(path, path.stat().st_size)


@pytest.mark.parametrize("seed", SEED_FILES, ids=lambda s: s[1])
def test_unmutated_seeds_load(tmp_path: Path, seed: tuple[str, str]) -> None:
    """The shrunk seeds are valid files: the fuzz starts from working inputs."""
    header, _, data_len = shrunk_seed(*seed)
    path = write_example(tmp_path, header, data_len, True)
    with GGUFFile(path) as g:
        check_gguf(g)
    with open_weights(path) as w:
        check_weights(w)



# -- regressions: minimal inputs for the bugs the fuzz found -------------------------------------

def gguf_header(*kvs: bytes, n_tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kvs)) + b"".join(kvs)


def gguf_kv(key: bytes, vtype: int, payload: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + payload


def sparse_file(tmp_path: Path, head: bytes, size: int) -> Path:
    path = tmp_path / "sparse.gguf"
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


@pytest.mark.timeout(60)
def test_huge_count_in_a_huge_file_is_refused_before_allocating(tmp_path: Path) -> None:
    """A 1 GiB file of zeros whose header claims 100M empty strings: the count fits in the
    file, but not in the 64 MiB a header may take. It used to allocate an 800 MB list and
    walk the whole file."""
    head = gguf_header(gguf_kv(b"k", ARRAY, struct.pack("<IQ", STRING, 100_000_000)))
    path = sparse_file(tmp_path, head, 2**30)
    err = run_reader(lambda: GGUFFile(path), [path], memory_multiple=0, input_bytes=len(head),
                     expect_error=True)
    assert err.offset == len(head) - 8 and "64 MiB" in err.message


def gguf_strings(key: bytes, items: list[bytes]) -> bytes:
    payload = struct.pack("<IQ", STRING, len(items))
    payload += b"".join(struct.pack("<Q", len(s)) + s for s in items)
    return gguf_kv(key, ARRAY, payload)


@pytest.mark.timeout(120)
@pytest.mark.skipif(not HAS_GGUF_TOKENIZER, reason="the GGUF tokenizer loader is not there")
def test_a_million_merges_naming_missing_tokens(tmp_path: Path) -> None:
    """A gpt2 vocabulary with 10^6 merges naming tokens it does not have: refused, naming
    the merges key, in time and memory linear in the file."""
    header, _, _ = shrunk_seed("gguf-vocab", "ggml-vocab-gpt-2.gguf")
    with GGUFFile(write_example(tmp_path, header, 0, False)) as g:
        tokens = [t.encode("utf-8", "surrogateescape") for t in g.metadata["tokenizer.ggml.tokens"]]
    blob = gguf_header(gguf_kv(b"tokenizer.ggml.model", STRING, struct.pack("<Q", 4) + b"gpt2"),
                       gguf_strings(b"tokenizer.ggml.tokens", tokens),
                       gguf_strings(b"tokenizer.ggml.merges",
                                    [b"x%d y%d" % (i, i) for i in range(10**6)]))
    path = tmp_path / "merges.gguf"
    path.write_bytes(blob)
    err = run_reader(lambda: load_tokenizer(path), [path], expect_error=True,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE, cpu_limit=30)
    assert "tokenizer.ggml.merges" in err.message and "'x0'" in err.message
