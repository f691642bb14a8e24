"""The word-cached llama.cpp SPM session (LlamaSPMTokenizer) against its whole-fragment
reference path, the `sentencepiece` library and llama.cpp's own vectors.

The oracle for random text is `sentencepiece` running the same vocabulary as a BPE model
(pieces, scores and types of the GGUF; identity normalization, no whitespace removal, byte
fallback): on text without "<" that is llama.cpp's SPM session (llama.cpp also merges into
control and byte token texts such as "<s>" and "<0x0A>", which sentencepiece never does).
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.bench.tokenizer_load import LLAMA_ATTR_TO_PIECE_TYPE
from forma_gui.core.llama_tokenizers import LlamaSPMTokenizer
from forma_gui.core.llama_vocab import LlamaTokenizer, LlamaVocab
from forma_gui.formats.gguf_tokenizer import load_gguf_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.formats.test_gguf_tokenizer import read_vectors

SPACE = "\u2581"
#: characters the llama vocabulary lacks (byte fallback) or has, spaces, newlines, specials
ALPHABET = (list("abcdefghijklmnopqrstuvwxyz ABCXYZ  \t\n\r.,!?'\"-0123456789")
            + list("é\u0301ñßþ∑€日本語中文한국어Привет😀👍🏽\u200b\ufeff\x00\x7f\xa0\u3000▁")
            + ["𝔘", "\U000e0001", "ꙮ", "the", "ing", " the", "   ", "\n\n", "<s>", "</s>", "<unk>",
               "<0x0A>", "<"])


@pytest.fixture(scope="module")
def llama():
    return load_gguf_tokenizer(data_file("gguf-vocab", "ggml-vocab-llama-spm.gguf"))


def reference(tok: LlamaSPMTokenizer) -> LlamaSPMTokenizer:
    """The same vocabulary on the whole-fragment path only."""
    ref = LlamaSPMTokenizer(tok.vocab)
    ref._words = lambda: None  # the vocabulary check, answered "cannot cut"
    return ref


@pytest.fixture(scope="module")
def llama_ref(llama):
    return reference(llama)


@pytest.fixture(scope="module")
def llama_lib(llama, tmp_path_factory):
    """`sentencepiece` with the llama vocabulary as a BPE model (the benchmark's peer)."""
    from forma_gui.bench.tokenizer_load import _llama_spm_as_model

    assert set(llama.vocab.attrs) <= set(LLAMA_ATTR_TO_PIECE_TYPE)  # every attribute maps
    return _llama_spm_as_model(llama, tmp_path_factory.mktemp("llama"))


def _texts(alphabet: list[str], max_size: int = 40):
    return st.lists(st.sampled_from(alphabet), max_size=max_size).map("".join)


def test_llama_vocabulary_is_cut_into_words(llama):
    assert llama._words() is not None


def test_vectors_on_both_paths(llama, llama_ref):
    for text, expected in read_vectors("llama-spm"):
        assert llama.encode(text) == expected == llama_ref.encode(text), text
        assert llama._spans(text, False, False) == llama_ref._spans(text, False, False), text


@given(_texts(ALPHABET) | st.text(st.characters(exclude_categories=("Cs",))), st.booleans())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_words_equal_the_whole_fragment(llama, llama_ref, text, special):
    """Ids, spans and segments, with and without special tokens parsed (BOS too)."""
    assert llama._spans(text, special, special) == llama_ref._spans(text, special, special)
    ids = llama.tokenize(text, parse_special=special)
    assert ids == llama_ref.tokenize(text, parse_special=special)
    assert llama.segment(text, special=special) == llama_ref.segment(text, special=special)


@given(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="<")))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_words_equal_sentencepiece(llama, llama_lib, text):
    assert llama.encode(text) == llama_lib.encode(text)


@given(_texts([c for c in ALPHABET if "<" not in c], 60))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_words_equal_sentencepiece_on_spaces_and_byte_fallback(llama, llama_lib, text):
    assert llama.encode(text) == llama_lib.encode(text)


def test_botchan_equals_sentencepiece_and_the_reference(llama, llama_ref, llama_lib):
    text = data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")
    assert llama.encode(text) == llama_lib.encode(text)
    part = text[:6000]
    assert llama._spans(part, False, False) == llama_ref._spans(part, False, False)


def test_a_full_word_cache_is_cleared_and_refilled(llama):
    tok = LlamaSPMTokenizer(llama.vocab)
    tok.WORD_CACHE_LIMIT = 5
    text = "one two three four five six seven eight nine ten one two"
    assert tok.encode(text) == llama.encode(text)
    assert 0 < len(tok._word_cache) <= 5
    assert tok.encode(text) == llama.encode(text)


# ---- small vocabularies: ties, a token across a word start, odd scores ---------------------

def _vocab(texts: list[str], scores: list[float]) -> LlamaSPMTokenizer:
    """A vocabulary with <unk>, the given normal tokens and the 256 byte tokens."""
    tokens = ["<unk>"] + texts + [f"<0x{b:02X}>" for b in range(256)]
    attrs = [1] + [4] * len(texts) + [32] * 256
    vocab = LlamaVocab(tokens, attrs, [0.0] + scores + [0.0] * 256, specials={"unk": 0},
                       flags={"add_space_prefix": True})
    return LlamaSPMTokenizer(vocab)


SMALL = ["a", "b", SPACE, "ab", "ba", "aa", SPACE + "a", SPACE + "b", SPACE + SPACE, "aba",
         SPACE + "ab", "bab", SPACE + SPACE + "a", "bb", "abb"]


@given(st.lists(st.sampled_from([0.0, -0.0, -1.0, -2.0, -1.5]), min_size=len(SMALL),
                max_size=len(SMALL)),
       _texts(["a", "b", " ", "  ", "c", "é"], 30))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_ties_and_zero_signs_equal_the_whole_fragment(scores, text):
    """Many equal scores: the leftmost pair must win in a word as in the whole fragment."""
    tok = _vocab(SMALL, scores)
    assert tok._words() is not None
    assert tok._spans(text, False, False) == reference(tok)._spans(text, False, False)


def test_a_token_across_a_word_start_keeps_the_whole_fragment():
    """"a▁b" joins two words: the fast path must not cut there (it is not used at all)."""
    texts = ["a", "b", SPACE, SPACE + "a", "a" + SPACE, "a" + SPACE + "b"]
    tok = _vocab(texts, [0, 0, 0, -1, 5, 6])
    assert tok._words() is None
    ids = tok.encode("a b a b")
    assert tok.id_of("a" + SPACE + "b") in ids
    assert ids == reference(tok).encode("a b a b")
    # what cutting into words would have given: no "a▁b"
    assert tok.id_of("a" + SPACE + "b") not in tok.encode("a") + tok.encode(" b")


@pytest.mark.parametrize("odd", [math.nan, -math.inf])
def test_scores_that_are_not_numbers_keep_the_whole_fragment(odd):
    tok = _vocab(["a", "b", "ab", "ba"], [0, 0, odd, -1])
    assert tok._words() is None
    assert tok.encode("abab ba") == reference(tok).encode("abab ba")


def test_long_words_use_the_heap():
    tok = _vocab(SMALL, [-float(i % 4) for i in range(len(SMALL))])
    text = "ab" * 200 + " " + "ba" * 150 + "  " + "a" * 99
    assert tok._spans(text, False, False) == reference(tok)._spans(text, False, False)


# ---- segment_columns: segment() as numpy columns, without Token objects --------------------

def assert_columns_equal_segment(tok, text: str, special: bool) -> None:
    """Ids, starts, ends, partial and special flags, token by token."""
    ids, starts, ends, flags = tok.segment_columns(text, special=special)
    want = tok.segment(text, special=special)
    assert ids.tolist() == [t.id for t in want]
    assert starts.tolist() == [t.start for t in want]
    assert ends.tolist() == [t.end for t in want]
    assert flags.tolist() == [t.partial | t.special << 1 for t in want]


def _no_generic_columns(monkeypatch):
    """Make the per-token fallback (`LlamaTokenizer._fragment_columns`) fail if it is used."""
    def fail(*_args):
        raise AssertionError("the fallback path was taken")

    monkeypatch.setattr(LlamaTokenizer, "_fragment_columns", fail)


@given(_texts(ALPHABET + ["  x", "\n ", " 😀 ", "👍🏽\n"], 60)
       | st.text(st.characters(exclude_categories=("Cs",))), st.booleans())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_columns_equal_segment(llama, llama_ref, text, special):
    assert_columns_equal_segment(llama, text, special)
    assert_columns_equal_segment(llama_ref, text, special)  # the per-token fallback


@given(_texts(ALPHABET + [" <s> ", "</s>\n", "<unk>"], 40), st.booleans())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_columns_equal_segment_after_special_tokens_with_the_space_prefix(llama, text, special):
    """Every fragment after a special token gets its own ▁ (clamped to a zero-width start)."""
    assert llama.vocab.flags.get("add_space_prefix")
    assert_columns_equal_segment(llama, "<s>" + text + "</s>" + text, special)


def test_columns_take_the_word_path_for_ordinary_text(llama, monkeypatch):
    text = data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")[:20000]
    text += " naïve 東京 😀👍🏽\n\n  leading spaces\t<0x0A> <s> ▁x"
    want = llama.segment(text, special=True)
    _no_generic_columns(monkeypatch)
    ids, starts, ends, flags = llama.segment_columns(text, special=True)
    assert ids.tolist() == [t.id for t in want]
    assert (starts.tolist(), ends.tolist()) == ([t.start for t in want], [t.end for t in want])
    assert flags.tolist() == [t.partial | t.special << 1 for t in want]
    assert any(t.partial for t in want) and any(t.special for t in want)


def test_columns_of_the_empty_text(llama):
    assert [c.tolist() for c in llama.segment_columns("", special=True)] == [[], [], [], []]


@given(_texts(["a", "b", " ", "  ", "c", "é", "😀", "<unk>"], 30), st.booleans())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_columns_of_small_vocabularies(text, special):
    """Without ▁ (the prefix falls back to three byte tokens clamped to zero width), and
    without byte tokens or unk (characters no token covers: the per-token fallback)."""
    no_space = _vocab([t for t in SMALL if SPACE not in t], [-1.0] * 9)
    assert_columns_equal_segment(no_space, text, special)
    bare = LlamaSPMTokenizer(LlamaVocab(["a", "b", SPACE, "ab", SPACE + "a"], [4] * 5,
                                        [0, 0, 0, -1, -1], specials={},
                                        flags={"add_space_prefix": True}))
    assert_columns_equal_segment(bare, text, special)
