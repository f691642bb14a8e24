"""Fuzz the tokenizer.json reader, through load_tokenizer (sniffing included).

Seed: the Qwen3 tokenizer.json of the test data with every section kept, the vocabulary cut
to its first `KEEP` ids, the merges whose parts and result survive, and the added tokens
renumbered to follow the vocabulary (so the ids stay dense); plus the same with merges
spelled as "left right" strings (the older layout). Mutations are structural (any field
replaced by an extreme value or a wrong JSON type, deleted or repeated, raw hostile JSON
text spliced in) and byte-level on top.
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


@functools.lru_cache(maxsize=None)
def seed(merges_as_strings: bool = False) -> dict:
    obj = json.loads(data_file("hf", "qwen3", "tokenizer.json").read_bytes())
    model = obj["model"]
    vocab = {p: i for p, i in model["vocab"].items() if i < KEEP}
    merges = [m for m in model["merges"]
              if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab][:KEEP]
    model["vocab"] = vocab
    model["merges"] = [" ".join(m) for m in merges] if merges_as_strings else merges
    for n, token in enumerate(obj["added_tokens"]):
        token["id"] = KEEP + n
    return obj


@functools.lru_cache(maxsize=None)
def paths(merges_as_strings: bool) -> list[tuple]:
    return json_paths(seed(merges_as_strings))


@pytest.fixture(scope="module", autouse=True)
def warm_patterns(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Compile the seed's patterns once, outside the timed calls."""
    path = tmp_path_factory.mktemp("warm") / "tokenizer.json"
    path.write_text(json.dumps(seed()), encoding="utf-8")
    check_tokenizer(load_tokenizer(path))


def run(path: Path) -> None:
    note_example("tokenizer.json")
    run_reader(lambda: load_tokenizer(path), [path], memory_multiple=TOKENIZER_MEMORY_MULTIPLE,
               check=check_tokenizer)


@fuzz_settings(0.7)
@given(strings=st.booleans(), data=st.data())
def test_json_edits(tmp_path: Path, strings: bool, data: st.DataObject) -> None:
    """Fields replaced by extreme values and wrong types, deleted, repeated; raw JSON."""
    blob = apply_json_ops(seed(strings), data.draw(json_ops(paths(strings), max_ops=4)))
    ops = data.draw(st.none() | byte_ops(len(blob), max_ops=2))
    path = fresh_path(tmp_path, "tokenizer.json")
    path.write_bytes(apply_ops(blob, ops or ()))
    run(path)


@fuzz_settings(0.3)
@given(data=st.data())
def test_byte_edits(tmp_path: Path, data: st.DataObject) -> None:
    """Truncation anywhere, bit flips, overwrites with invalid UTF-8, copied records."""
    blob = json.dumps(seed(False), ensure_ascii=False).encode()
    path = fresh_path(tmp_path, "tokenizer.json")
    path.write_bytes(apply_ops(blob, data.draw(byte_ops(len(blob)))))
    run(path)


@pytest.mark.parametrize("strings", [False, True])
def test_seed_loads(tmp_path: Path, strings: bool) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(seed(strings)), encoding="utf-8")
    tok = load_tokenizer(path)
    check_tokenizer(tok)
    assert tok.vocab_size == KEEP + len(seed(strings)["added_tokens"])


# -- pathological inputs ----------------------------------------------------------------------

def write(tmp_path: Path, obj: dict) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


@pytest.mark.timeout(120)
def test_a_million_merges_naming_missing_tokens(tmp_path: Path) -> None:
    """10^6 merges, none of whose parts is in the vocabulary: refused at the first one."""
    obj = json.loads(json.dumps(seed()))
    obj["model"]["merges"] = [[f"x{i}", f"y{i}"] for i in range(10**6)]
    path = write(tmp_path, obj)  # 24 MB
    err = run_reader(lambda: load_tokenizer(path), [path], expect_error=True,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE, cpu_limit=40)
    assert "merges[0]" in err.message and "'x0'" in err.message


def edited(**changes: object) -> dict:
    """The seed with dotted keys replaced: edited(**{"model.unk_token": [1]})."""
    obj = json.loads(json.dumps(seed()))
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        target = obj
        for key in parents:
            target = target[key] if isinstance(target, dict) else target[int(key)]
        target[last if isinstance(target, dict) else int(last)] = value
    return obj


#: fields of a wrong JSON type that leaked TypeError or AttributeError
WRONG_TYPES = {
    "vocab id a string": ({"model.vocab": {"a": "0"}}, "model.vocab['a']"),
    "vocab id a float": ({"model.vocab": {"a": 0.0}}, "model.vocab['a']"),
    "vocab id a list": ({"model.vocab": {"a": [0]}}, "model.vocab['a']"),
    "merge a list of lists": ({"model.merges": [[["a"], "b"]]}, "model.merges[0]"),
    "merge a number": ({"model.merges": ["a b", 7]}, "model.merges[1]"),
    "added_tokens true": ({"added_tokens": True}, "'added_tokens'"),
    "unk_token a list": ({"model.unk_token": ["<unk>"]}, "unk_token"),
    "Split pattern a string": ({"pre_tokenizer.pretokenizers.0.pattern": "x"}, "Split pattern"),
    "normalizer type a list": ({"normalizer.type": ["NFC"]}, "normalizer"),
}


@pytest.mark.parametrize("name", WRONG_TYPES)
def test_fields_of_a_wrong_json_type(tmp_path: Path, name: str) -> None:
    changes, words = WRONG_TYPES[name]
    path = write(tmp_path, edited(**changes))
    err = run_reader(lambda: load_tokenizer(path), [path], expect_error=True,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE)
    assert words in err.message


@pytest.mark.parametrize("changes", [{"model.vocab": {"a": 2**63}},
                                     {"added_tokens.0.id": 2**40}], ids=["vocab", "added"])
def test_huge_id(tmp_path: Path, changes: dict) -> None:
    """A huge id made the reader allocate a table that long (MemoryError/OverflowError)."""
    path = write(tmp_path, edited(**changes))
    err = run_reader(lambda: load_tokenizer(path), [path], expect_error=True,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE)
    assert "must stay below" in err.message
