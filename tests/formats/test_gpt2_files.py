"""GPT-2 vocab.json + merges.txt: ids equal HF tokenizers' BPE with a ByteLevel pre-tokenizer."""
from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings

from forma_gui.errors import FormatError
from forma_gui.formats.gpt2_files import load_gpt2
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.corpus import CORPUS, TEXT


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer(data_file("gpt2", "encoder.json"))


@pytest.fixture(scope="module")
def hf_gpt2():
    from tokenizers import Tokenizer, models, pre_tokenizers

    model = models.BPE.from_file(str(data_file("gpt2", "encoder.json")), str(data_file("gpt2", "vocab.bpe")))
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tok


def test_corpus_equals_hf(gpt2, hf_gpt2):
    for text in CORPUS:
        assert gpt2.encode(text) == hf_gpt2.encode(text, add_special_tokens=False).ids, text


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=TEXT)
def test_random_text_equals_hf(gpt2, hf_gpt2, text):
    assert gpt2.encode(text) == hf_gpt2.encode(text, add_special_tokens=False).ids


def test_same_ids_as_tiktoken_gpt2(gpt2):
    # r50k_base is GPT-2's vocabulary as a rank file: the two loaders must agree everywhere.
    import tiktoken
    import tiktoken.load
    from tiktoken_ext.openai_public import r50k_pat_str

    ranks = tiktoken.load.load_tiktoken_bpe(str(data_file("tiktoken", "r50k_base.tiktoken")))
    ref = tiktoken.Encoding("r50k", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={})
    text = "\n".join(CORPUS)
    assert gpt2.encode(text) == ref.encode_ordinary(text)


def test_vocabulary_members(gpt2):
    assert gpt2.vocab_size == 50257
    assert gpt2.piece(995) == "Ġworld" and gpt2.id_of("Ġworld") == 995
    assert gpt2.token_bytes(995) == b" world"
    assert gpt2.token_type(50256) == "control" and gpt2.token_type(995) == "normal"
    assert gpt2.token_score(995) is not None and gpt2.token_score(0) is None
    assert gpt2.encode("<|endoftext|>", special=True) == [50256]
    assert gpt2.encode("<|endoftext|>") != [50256]


def test_either_file_finds_the_other(tmp_path):
    for name in ("vocab.bpe", "encoder.json"):
        shutil.copy(data_file("gpt2", name), tmp_path / name)
    a = load_gpt2(tmp_path / "vocab.bpe")
    b = load_tokenizer(tmp_path)
    assert a.encode("Hello world") == b.encode("Hello world") == [15496, 995]


def test_missing_partner(tmp_path):
    shutil.copy(data_file("gpt2", "encoder.json"), tmp_path / "vocab.json")
    with pytest.raises(FormatError, match="merges.txt or vocab.bpe"):
        load_gpt2(tmp_path / "vocab.json")


def _pair(tmp_path, vocab, merges: str):
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), "utf-8")
    (tmp_path / "merges.txt").write_text(merges, "utf-8")
    return tmp_path / "vocab.json"


def test_merge_with_unknown_piece_names_the_line(tmp_path):
    path = _pair(tmp_path, {"a": 0, "b": 1, "ab": 2}, "#version: 0.2\na b\n\nb a\n")
    with pytest.raises(FormatError) as info:
        load_gpt2(path)
    assert info.value.line == 4 and "'ba'" in str(info.value)
    assert info.value.path.endswith("merges.txt")


def test_malformed_merge_line(tmp_path):
    path = _pair(tmp_path, {"a": 0, "b": 1, "ab": 2}, "a b c\n")
    with pytest.raises(FormatError, match="two pieces") as info:
        load_gpt2(path)
    assert info.value.line == 1


@pytest.mark.parametrize("body, match, at", [
    ("[1, 2]", "JSON object", 0),
    ('{"a": 0,\n "b": "x"}', "integer id", 15),
    ('{"a": 0', "invalid JSON", 7),
    ('{"a": 0, "b": 0}', "used by both", None),
    ('{"a": 0,\n "b\\udc80": 1}', r"piece 'b\\udc80': a lone UTF-16 surrogate", 21),  # HF refuses it too
])
def test_bad_json(tmp_path, body, match, at):
    """Each names the byte offset of the value at fault (counted here by hand)."""
    (tmp_path / "vocab.json").write_text(body, "utf-8")
    (tmp_path / "merges.txt").write_text("", "utf-8")
    with pytest.raises(FormatError, match=match) as info:
        load_gpt2(tmp_path / "vocab.json")
    assert info.value.offset == at


def test_small_vocabulary_known_answer(tmp_path):
    # Hand-made: merges "a a" then "aa a"; "aaaa" -> aa aa ; "aaa" -> aaa.
    path = _pair(tmp_path, {"a": 0, "aa": 1, "aaa": 2, "Ġ": 3}, "a a\naa a\n")
    tok = load_gpt2(path)
    assert tok.encode("aaaa") == [1, 1]
    assert tok.encode("aaa") == [2]
    assert [s.result for s in tok.merge_steps("aaa")] == ["aa", "aaa"]


def _byte_vocab() -> dict[str, int]:
    from forma_gui.core.byte_map import BYTE_TO_UNICODE

    return {BYTE_TO_UNICODE[b]: b for b in range(256)}


def test_an_empty_piece_in_the_vocabulary_is_never_produced(tmp_path):
    """HF loads a vocab.json holding "" and never emits it; it must not break our tables."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = _byte_vocab() | {"he": 256, "ll": 257, "": 258}
    path = _pair(tmp_path, vocab, "#version: 0.2\nh e\nl l\n")
    ref = Tokenizer(models.BPE.from_file(str(path), str(tmp_path / "merges.txt")))
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok = load_gpt2(path)
    for text in ("hello", "hell he", "", "ééll"):
        assert tok.encode(text) == ref.encode(text, add_special_tokens=False).ids
    assert tok.decode([258, 256]) == "he"


def test_a_byte_order_mark_before_merges_is_skipped(tmp_path):
    vocab = _byte_vocab() | {"he": 256}
    path = _pair(tmp_path, vocab, "\ufeff#version: 0.2\nh e\n")
    assert load_gpt2(path).encode("hehe") == [256, 256]
