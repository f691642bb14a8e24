"""Fuzz the GPT-2 vocab.json + merges.txt reader, through load_tokenizer.

Seeds: GPT-2's encoder.json + vocab.bpe and Qwen3's vocab.json + merges.txt from the test
data, cut to the first `KEEP` ids and the merges whose parts and result survive. Each
example mutates the JSON (structurally or byte by byte) or the merges text (lines swapped
for hostile ones, byte edits), and opens either file of the pair.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forma_gui import load_tokenizer
from tests.conftest import data_file
from tests.fuzz.harness import (TOKENIZER_MEMORY_MULTIPLE, apply_json_ops, apply_ops, byte_ops,
                                check_tokenizer, fresh_path, fuzz_settings, json_ops,
                                json_paths, note_example, run_reader)

KEEP = 320
SEEDS = {"gpt2": ("encoder.json", "vocab.bpe"), "qwen3": ("vocab.json", "merges.txt")}
FOLDERS = {"gpt2": ("gpt2",), "qwen3": ("hf", "qwen3")}

#: merges lines no real file has
HOSTILE_LINES = ["", " ", "a", "a b c", "Ġ  t", "\ufeffĠ t", "#version: 0.2", "x\0 y",
                 "zz qq", "a\u2028b c", "Ġt Ġt", "\r", "a\tb"]


@functools.lru_cache(maxsize=None)
def seed(name: str) -> tuple[dict, list[str]]:
    json_name, merges_name = SEEDS[name]
    folder = data_file(*FOLDERS[name], json_name).parent
    vocab = json.loads((folder / json_name).read_bytes())
    vocab = {p: i for p, i in vocab.items() if i < KEEP}
    lines = (folder / merges_name).read_text(encoding="utf-8").split("\n")
    kept = [lines[0]] + [m for m in lines[1:] if _kept(m, vocab)][:KEEP]
    return vocab, kept


def _kept(merge: str, vocab: dict) -> bool:
    parts = merge.split(" ")
    return len(parts) == 2 and parts[0] in vocab and parts[1] in vocab and "".join(parts) in vocab


@functools.lru_cache(maxsize=None)
def paths(name: str) -> list[tuple]:
    return json_paths(seed(name)[0])


def write_pair(tmp_path: Path, name: str, vocab: bytes, merges: bytes) -> tuple[Path, Path]:
    json_name, merges_name = SEEDS[name]
    folder = fresh_path(tmp_path, "pair")
    folder.mkdir()
    (folder / json_name).write_bytes(vocab)
    (folder / merges_name).write_bytes(merges)
    return folder / json_name, folder / merges_name


@pytest.fixture(scope="module", autouse=True)
def warm_patterns(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Compile the GPT-2 pattern once, outside the timed calls."""
    vocab, merges = seed("gpt2")
    files = write_pair(tmp_path_factory.mktemp("warm"), "gpt2", json.dumps(vocab).encode(),
                       "\n".join(merges).encode())
    check_tokenizer(load_tokenizer(files[0]))


def run(files: tuple[Path, Path], which: int) -> None:
    note_example("vocab.json+merges.txt")
    run_reader(lambda: load_tokenizer(files[which]), list(files),
               memory_multiple=TOKENIZER_MEMORY_MULTIPLE, check=check_tokenizer)


@fuzz_settings(0.5)
@given(name=st.sampled_from(sorted(SEEDS)), which=st.integers(0, 1), data=st.data())
def test_vocab_edits(tmp_path: Path, name: str, which: int, data: st.DataObject) -> None:
    """vocab.json: extreme ids, wrong types, duplicate keys, raw JSON; then byte edits."""
    vocab, merges = seed(name)
    blob = apply_json_ops(vocab, data.draw(json_ops(paths(name))))
    blob = apply_ops(blob, data.draw(st.none() | byte_ops(len(blob), max_ops=2)) or ())
    run(write_pair(tmp_path, name, blob, "\n".join(merges).encode()), which)


@st.composite
def line_edits(draw: st.DrawFn, n_lines: int) -> list[tuple[int, str]]:
    """(line index, new text) pairs; the text may be a hostile line or another merge."""
    line = st.integers(0, n_lines)
    text = st.sampled_from(HOSTILE_LINES) | st.text(max_size=8)
    return draw(st.lists(st.tuples(line, text), min_size=1, max_size=3))


@fuzz_settings(0.5)
@given(name=st.sampled_from(sorted(SEEDS)), which=st.integers(0, 1), data=st.data())
def test_merges_edits(tmp_path: Path, name: str, which: int, data: st.DataObject) -> None:
    """merges.txt: lines replaced by hostile ones, then byte edits (bad UTF-8, truncation)."""
    vocab, merges = seed(name)
    lines = list(merges)
    for at, text in data.draw(line_edits(len(lines))):
        lines[at % len(lines)] = text
    blob = "\n".join(lines).encode("utf-8", "surrogatepass")
    blob = apply_ops(blob, data.draw(st.none() | byte_ops(len(blob), max_ops=2)) or ())
    run(write_pair(tmp_path, name, json.dumps(vocab).encode(), blob), which)


@pytest.mark.parametrize("name", SEEDS)
def test_seeds_load(tmp_path: Path, name: str) -> None:
    vocab, merges = seed(name)
    files = write_pair(tmp_path, name, json.dumps(vocab).encode(), "\n".join(merges).encode())
    for path in files:
        tok = load_tokenizer(path)
        check_tokenizer(tok)
        assert tok.vocab_size == KEEP


# -- regressions: minimal inputs for the bugs the fuzz found -------------------------------------

def test_huge_id(tmp_path: Path) -> None:
    """An id of 2^40 made the reader allocate a 2^40-entry table (MemoryError/OverflowError)."""
    files = write_pair(tmp_path, "gpt2", b'{"a": 0, "b": 1099511627776}', b"#version: 0.2\n")
    err = run_reader(lambda: load_tokenizer(files[0]), list(files), expect_error=True,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE)
    assert err.path == str(files[0]) and "1099511627776" in err.message


@pytest.mark.timeout(120)
def test_a_million_merges_naming_missing_tokens(tmp_path: Path) -> None:
    """10^6 merge lines, none of whose parts is in the vocabulary: refused at the first one,
    naming its line, in time and memory linear in the file."""
    vocab, _ = seed("gpt2")
    merges = "#version: 0.2\n" + "".join(f"x{i} y{i}\n" for i in range(10**6))
    files = write_pair(tmp_path, "gpt2", json.dumps(vocab).encode(), merges.encode())
    err = run_reader(lambda: load_tokenizer(files[1]), list(files), expect_error=True,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE, cpu_limit=30)
    assert err.path == str(files[1]) and err.line == 2 and "'x0'" in err.message
