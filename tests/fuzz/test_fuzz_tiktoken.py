"""Fuzz the tiktoken rank-file reader, through load_tokenizer (sniffing included).

Seeds: the four rank files of the test data (r50k, p50k, cl100k, o200k), cut to their first
`KEEP` lines and written under their own names (the name picks the pre-tokenizer pattern).
Mutations: lines replaced by hostile ones (extreme or repeated ranks, bad base64, empty
tokens, extra fields), then byte edits on top.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forma_gui import load_tokenizer
from tests.conftest import data_file
from tests.fuzz.harness import (EXTREME_INTS, TIKTOKEN_MEMORY_FLOOR, TOKENIZER_MEMORY_MULTIPLE,
                                apply_ops, byte_ops, check_tokenizer, fresh_path, fuzz_settings,
                                note_example, run_reader)

KEEP = 400
NAMES = ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"]


@functools.lru_cache(maxsize=None)
def seed(name: str) -> list[bytes]:
    with open(data_file("tiktoken", f"{name}.tiktoken"), "rb") as f:
        return [f.readline().rstrip(b"\n") for _ in range(KEEP)]


def write_seed(folder: Path, name: str) -> Path:
    path = folder / f"{name}.tiktoken"
    path.write_bytes(b"\n".join(seed(name)) + b"\n")
    return path


@pytest.fixture(scope="module", autouse=True)
def warm_patterns(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Compile each encoding's pattern once, outside the timed calls."""
    folder = tmp_path_factory.mktemp("warm")
    for name in NAMES:
        load_tokenizer(write_seed(folder, name))


@st.composite
def hostile_line(draw: st.DrawFn, lines: list[bytes]) -> bytes:
    token = draw(st.sampled_from(lines)).split(b" ")[0]
    rank = draw(st.sampled_from(EXTREME_INTS) | st.integers(0, KEEP * 3) |
                st.sampled_from([-1]))
    return draw(st.sampled_from([
        token + b" " + str(rank).encode(),       # extreme, negative or repeated rank
        b"=" + token + b" 5", token + b"= 7", b"!!!! 3", b" 9", b"QQ==",  # bad base64 / fields
        token + b" 1 2", token + b"\t" + str(rank).encode(), b"", b"\r",
        token + b" \xd9\xa3",                    # a non-ASCII digit
        token + b" " + b"1" * 5000,              # over Python's int conversion limit
    ]))


@fuzz_settings()
@given(name=st.sampled_from(NAMES), data=st.data())
def test_line_and_byte_edits(tmp_path: Path, name: str, data: st.DataObject) -> None:
    lines = list(seed(name))
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(lines) - 1))
        lines[at] = data.draw(hostile_line(lines))
    blob = b"\n".join(lines) + b"\n"
    blob = apply_ops(blob, data.draw(st.none() | byte_ops(len(blob), max_ops=3)) or ())
    path = fresh_path(tmp_path, f"{name}.tiktoken")
    path.write_bytes(blob)
    note_example("tiktoken")
    run_reader(lambda: load_tokenizer(path), [path], memory_multiple=TOKENIZER_MEMORY_MULTIPLE,
               memory_floor=TIKTOKEN_MEMORY_FLOOR, check=check_tokenizer)


@pytest.mark.parametrize("name", NAMES)
def test_seeds_load(tmp_path: Path, name: str) -> None:
    check_tokenizer(load_tokenizer(write_seed(tmp_path, name)))


# -- regressions: minimal inputs for the bugs the fuzz found -------------------------------------

@pytest.mark.parametrize("rank, words", [
    (b"1" * 5000, "5000 digits"),             # leaked ValueError (int conversion limit)
    (str(2**32).encode(), "must stay below"),  # allocated a 2^32-entry table: MemoryError
])
def test_extreme_rank(tmp_path: Path, rank: bytes, words: str) -> None:
    path = tmp_path / "r50k_base.tiktoken"
    path.write_bytes(b"IQ== 0\nIg== " + rank + b"\nIw== 2\n")
    err = run_reader(lambda: load_tokenizer(path), [path], expect_error=True,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE)
    assert words in err.message and err.line == 2


@pytest.mark.parametrize("token", [b"=", b"====", b"Q=Q="])
def test_fast_path_accepts_no_more_than_the_line_path(tmp_path: Path, token: bytes) -> None:
    """An empty or mis-padded base64 token passed the fast path (an empty token at rank 0),
    while the line-by-line path refused it: the file's validity depended on its layout."""
    path = tmp_path / "r50k_base.tiktoken"
    path.write_bytes(token + b" 0\nIQ== 1\n")
    err = run_reader(lambda: load_tokenizer(path), [path], expect_error=True,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE)
    assert err.line == 1
