"""Fuzz the entry points with every real file of the test data, whatever it is.

load_tokenizer and open_weights sniff the content, so any file may reach any reader: the
licences, the README, checksums, llama.cpp's test inputs and outputs, a text corpus,
tokenizer_config.json, and the model and vocabulary files themselves. Each seed is the
first `HEAD` bytes of a real file written under its own name, mutated; files larger than
that end up truncated, which the readers must report like any other damage.
"""
from __future__ import annotations

import functools
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from forma_gui import load_tokenizer, open_weights
from tests.conftest import data_file
from tests.fuzz.harness import (TIKTOKEN_MEMORY_FLOOR, TOKENIZER_MEMORY_MULTIPLE, apply_ops,
                                byte_ops, check_tokenizer, fresh_path, fuzz_settings,
                                note_example, run_reader)

HEAD = 16 * 1024


@functools.lru_cache(maxsize=1)
def real_files() -> list[Path]:
    root = data_file()
    return sorted(p for p in root.rglob("*") if p.is_file())


@functools.lru_cache(maxsize=None)
def head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(HEAD)


def test_there_are_real_files() -> None:
    names = {p.name for p in real_files()}
    assert {"README.md", "SHA256SUMS", "tokenizer_config.json", "botchan.txt"} <= names


@fuzz_settings(0.5)
@given(data=st.data())
def test_any_real_file_mutated(tmp_path: Path, data: st.DataObject) -> None:
    source = data.draw(st.sampled_from(real_files()))
    blob = head(source)
    blob = apply_ops(blob, data.draw(st.none() | byte_ops(len(blob))) or ())
    path = fresh_path(tmp_path, source.name)
    path.write_bytes(blob)
    note_example("any file")
    run_reader(lambda: load_tokenizer(path), [path], memory_multiple=TOKENIZER_MEMORY_MULTIPLE,
               memory_floor=TIKTOKEN_MEMORY_FLOOR, check=check_tokenizer)  # o200k_base.tiktoken
    run_reader(lambda: open_weights(path), [path], memory_multiple=TOKENIZER_MEMORY_MULTIPLE)
