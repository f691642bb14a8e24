"""Incremental re-encoding for llama.cpp's SentencePiece BPE (GGUF ``llama`` vocabularies,
`LlamaSPMTokenizer`): after every edit the ids equal a from-scratch `encode` and the tokens equal
`segment` (both checked against llama.cpp's own test vectors in tests/core/test_llama_spm.py);
ordinary edits re-encode only a few words, and a vocabulary whose words can interact keeps
re-encoding in full."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given, strategies as st

from forma_gui.core import incremental as inc
from forma_gui.core.llama_tokenizers import LlamaSPMTokenizer
from forma_gui.core.llama_vocab import (ATTR_BYTE, ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN,
                                        ATTR_USER_DEFINED, LlamaVocab)
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import data_file
from tests.core.incremental_checks import EDIT_SETTINGS
from tests.core.incremental_checks import check as _check
from tests.core.incremental_checks import random_edits as _edits
from tests.core.incremental_checks import records as _records

SPACE = "\u2581"
#: spaces and runs of them, other whitespace, digits, Latin/Cyrillic/CJK words (the llama
#: vocabulary has few CJK pairs: cuts inside CJK runs), characters no token covers (byte
#: fallback: emoji, a lone surrogate, NUL), a literal ▁, the special texts and pieces of them
PIECES = [" ", "  ", "   ", "\n", "\n\n", "\t", " \t ", "1", "42", "2024", "a", "e", "the", "Hello",
          "world", "don't", "é", "Привет", "мир", "東", "京", "東京は日本の首都です", "。", "，",
          "😀", "👩\u200d💻", "\ud83d", "\x00", "ꙮ", SPACE, SPACE + "x", "<s>", "</s>", "<unk>", "<",
          "s>", "/s", "unk>", "<0x0A>"]
DOC = st.lists(st.sampled_from(PIECES), max_size=30).map("".join) | st.text(max_size=20)
INSERT = st.lists(st.sampled_from(PIECES), max_size=3).map("".join) | st.text(max_size=2)


@functools.cache
def _llama() -> LlamaSPMTokenizer:
    return load_tokenizer(data_file("gguf-vocab", "ggml-vocab-llama-spm.gguf"))


@pytest.fixture(scope="module")
def llama():
    return _llama()


def _small(texts: list[str], scores: list[float], attrs: list[int] | None = None) -> LlamaSPMTokenizer:
    """A vocabulary with <unk>, <s>, the given tokens (NORMAL unless `attrs` says) and the 256
    byte tokens, add_space_prefix on (as Llama 2's)."""
    tokens = ["<unk>", "<s>"] + texts + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [ATTR_UNKNOWN, ATTR_CONTROL] + (attrs or [ATTR_NORMAL] * len(texts)) + [ATTR_BYTE] * 256
    vocab = LlamaVocab(tokens, kinds, [0.0, 0.0] + scores + [0.0] * 256,
                       specials={"unk": 0, "bos": 1}, flags={"add_space_prefix": True})
    return LlamaSPMTokenizer(vocab)


#: many pairs that merge (ties included), a user-defined token that a merge can also spell
#: after a fragment's prefix (flagged special only where the partition cut it out)
SMALL = ["a", "b", "c", SPACE, "ab", "ba", "aa", "bc", SPACE + "a", SPACE + "b", SPACE + SPACE, "aba",
         SPACE + "ab", "bab", SPACE + SPACE + "a", "bb", "abb", "cd", SPACE + "cd"]
SMALL_PIECES = ["a", "b", "c", "d", "ab", "cd", " ", "  ", SPACE, SPACE + "cd", "<s>", "é", "\n"]








# ---- which vocabularies qualify ----------------------------------------------------------------

@pytest.mark.parametrize("special", [False, True])
def test_llama_spm_edits_are_local_but_never_sliced(llama, special):
    """core.chunked is for ByteLevelBPETokenizer only: it knows nothing of llama.cpp's partition."""
    assert inc.local_edits(llama, special) and not inc.supports_edits(llama, special)
    assert inc.IncrementalEncoder(llama, "x", special=special).incremental


def test_joinable_pairs_are_the_pairs_of_the_token_texts(llama):
    """Every two adjacent characters of every token text, and besides them only pairs with the
    NUL that joins the texts for the vectorized pass (which hide cuts, never make one)."""
    expected = {text[k:k + 2] for text in llama.vocab.tokens for k in range(len(text) - 1)}
    pairs = llama.joinable_pairs()
    assert expected <= pairs and all("\0" in p for p in pairs - expected)
    astral = _small(["a\U0010fffd", "\U0010fffd" + SPACE], [-1.0, -1.0])
    assert {"a\U0010fffd", "\U0010fffd" + SPACE} <= astral.joinable_pairs()


def test_a_word_start_is_never_joinable(llama):
    """The cuts include every word start: no token holds ▁ after another character."""
    pairs = llama.joinable_pairs()
    assert SPACE + SPACE in pairs and "th" in pairs
    assert not any(p[1] == SPACE and p[0] not in (SPACE, "\0") for p in pairs)


def test_interacting_words_keep_re_encoding_in_full_with_a_reason():
    """A token with ▁ after another character can merge across a word start: no word cuts."""
    tok = _small(SMALL + ["a" + SPACE + "b"], [-1.0] * len(SMALL) + [5.0])
    assert tok._words() is None
    enc = inc.IncrementalEncoder(tok, "ab")
    assert not enc.incremental and "\u2581 after another character" in enc.reason
    assert not inc.local_edits(tok) and not inc.local_edits(tok, True)
    enc.apply_edit(2, 0, "a b")
    assert enc.full_encodes == 1
    _check(enc, tok, "aba b")
    assert tok.id_of("a" + SPACE + "b") in enc.ids  # merged across the word start


def test_a_vocabulary_that_drops_bytes_re_encodes_in_full():
    """No byte tokens and no unk: llama.cpp drops what no token covers, the spans take the gap in."""
    vocab = LlamaVocab(["a", "b", SPACE, "ab", SPACE + "a"], [ATTR_NORMAL] * 5, [0, 0, 0, -1, -1],
                       specials={}, flags={"add_space_prefix": True})
    tok = LlamaSPMTokenizer(vocab)
    enc = inc.IncrementalEncoder(tok, "ab é b")
    assert not enc.incremental and "bytes without a token" in enc.reason
    enc.apply_edit(0, 0, "b")
    assert enc.full_encodes == 1
    _check(enc, tok, "bab é b")


# ---- incremental == from scratch ---------------------------------------------------------------

@EDIT_SETTINGS
@given(text=DOC, data=st.data(), special=st.booleans())
def test_random_edits_equal_a_fresh_encode(llama, text, data, special):
    enc = inc.IncrementalEncoder(llama, text, special=special)
    _check(enc, llama, text)
    _edits(enc, llama, text, data, INSERT)
    assert enc.full_encodes == 0  # lone surrogates, NUL and byte fallback included


@EDIT_SETTINGS
@given(scored=st.dictionaries(st.sampled_from(SMALL), st.sampled_from([0.0, -1.0, -2.0, -1.5]), min_size=1),
       user_defined=st.booleans(), text=st.lists(st.sampled_from(SMALL_PIECES), max_size=30).map("".join),
       data=st.data(), special=st.booleans())
def test_random_edits_with_small_vocabularies(scored, user_defined, text, data, special):
    """Some of SMALL's tokens: ties everywhere, runs of joinable pairs, ▁▁ a cut or not, ▁ a
    token or three zero-width byte tokens; "▁cd" user-defined or not, so the partition cuts it
    out of the text (special or not) while a merge after a fragment's prepended ▁ can spell it
    too, then an ordinary token."""
    texts = list(scored)
    attrs = [ATTR_USER_DEFINED if user_defined and t == SPACE + "cd" else ATTR_NORMAL for t in texts]
    tok = _small(texts, list(scored.values()), attrs)
    enc = inc.IncrementalEncoder(tok, text, special=special)
    assert enc.incremental
    _check(enc, tok, text)
    inserts = st.lists(st.sampled_from(SMALL_PIECES), max_size=3).map("".join)
    _edits(enc, tok, text, data, inserts)
    assert enc.full_encodes == 0


@pytest.mark.parametrize("special", [False, True])
def test_fragments_join_and_split(llama, special):
    """Deleting a special token joins two fragments (the second loses its prepended ▁); typing
    one splits a fragment (the text after it gains one); edits at 0, at the end, emptying the
    text and starting again."""
    text = "Hello<s> world</s>again"
    enc = inc.IncrementalEncoder(llama, text, special=special)
    for start, removed, inserted in [(5, 3, ""), (0, 0, " "), (6, 0, "</s>"), (0, 1, ""),
                                     (len("Hello</s> world</s>again"), 0, " x"), (3, 0, "<s>"),
                                     (0, 0, "<s>"), (0, 3, ""), (0, len("Hel<s>lo</s> world</s>again x"), ""),
                                     (0, 0, "  "), (2, 0, "<unk>"), (0, 2, "")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, llama, text)
    assert enc.full_encodes == 0


def test_lone_surrogates_and_byte_fallback_stay_local(llama):
    """Characters no token covers fall back to <0xNN> tokens spanning their one character
    (partial); a lone surrogate is such a character (three bytes)."""
    text = "ab 😀 cd"
    enc = inc.IncrementalEncoder(llama, text)
    for start, removed, inserted in [(3, 0, "\ud83d"), (5, 0, "ꙮ"), (3, 1, ""), (0, 0, "\udc00 ")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, llama, text)
    assert sum(enc.flags[k] & inc.PARTIAL for k in range(len(enc))) >= 4
    assert enc.full_encodes == 0


# ---- edits are local ---------------------------------------------------------------------------

LINE = "The quick brown fox can't jump 1234 times; Привет, мир! 東京は日本の首都です。 😀 <s>x</s>\n"


@pytest.mark.parametrize("special", [False, True])
def test_typing_in_a_large_document_stays_local(llama, special):
    text = LINE * 400
    enc = inc.IncrementalEncoder(llama, text, special=special)
    middle = len(text) // 2
    for start, removed, inserted in [(middle, 0, "x"), (middle, 1, ""), (10, 0, " "), (0, 0, "Z"),
                                     (0, 1, ""), (len(text) - 1, 1, "!"), (len(text), 0, " end"),
                                     (LINE.index("東") + 3, 0, "京"), (LINE.index("<s>") + 1, 1, ""),
                                     (LINE.index("<s>") + 1, 0, "s"), (777, 3, "</s>")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        assert enc.last_splice.removed < 12 and enc.last_splice.added < 12
    assert enc.full_encodes == 0
    assert list(enc.ids) == llama.encode(text, special=special) and enc.text == text
    assert _records(enc.tokens()[-40:]) == _records(llama.segment(text, special=special)[-40:])


def test_a_long_run_without_cuts_is_re_encoded_whole(llama):
    """Runs of joinable pairs longer than the first search window (llama.cpp merges them as one):
    the cuts are found past them, and the run is one region."""
    text = "x " + "ab" * 300 + " y " + "ab" * 300
    enc = inc.IncrementalEncoder(llama, text)
    for start, removed, inserted in [(300, 0, "c"), (len(text) - 200, 1, ""), (2, 0, " ")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, llama, text)
    assert enc.full_encodes == 0
