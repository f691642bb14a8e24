"""Incremental re-encoding for llama.cpp's WordPiece (GGUF ``bert`` vocabularies,
`WordPieceTokenizer`): after every edit the ids equal a from-scratch `encode` and the tokens equal
`segment` (both checked against llama.cpp's own test vectors in tests/core/test_wordpiece.py);
ordinary edits re-encode only a few words, and a vocabulary without [UNK] keeps re-encoding in
full."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings, strategies as st

from forma_gui.core import incremental as inc
from forma_gui.core.llama_vocab import ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN, LlamaVocab
from forma_gui.core.wordpiece import (DROPPED, SINGLE, SPACE_KIND, WORD, WordPieceTokenizer, char_kind,
                                      preprocess)
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.core.incremental_checks import EDIT_SETTINGS
from tests.core.incremental_checks import check as _check
from tests.core.incremental_checks import random_edits as _edits
from tests.core.incremental_checks import records as _records

SPACE = "\u2581"
#: whitespace of every kind preprocess knows (ASCII, NBSP, ideographic, EN QUAD whose NFD is
#: EN SPACE, NEL, line/paragraph separators), punctuation (ASCII, Unicode, ASCII symbols),
#: non-ASCII symbols (word characters), accents precomposed and combining, a lone mark,
#: uppercase (İ lowercases to two characters), characters preprocess drops (controls, NUL,
#: U+FFFD, format, private use, a lone surrogate), CJK and Hangul, emoji (a ZWJ sequence),
#: digits, words, a long word cut into many pieces, words that become [UNK] (an unknown
#: character inside, long or short), ▁ and ## literally,
#: and the special texts with pieces of them
PIECES = [" ", "  ", "\n", "\t", "\r\n", "\u00a0", "\u3000", "\u2000", "\u2003", "\x85", "\u2028", "\u202f",
          ",", ".", "!", "'", "(", ")", "[", "]", "$", "+", "¿", "—", "«", "€", "©", "°",
          "é", "e\u0301", "\u0301", "Ä", "ñ", "ß", "HELLO", "İ", "İstanbul", "ẞ", "Σσ", "Ǆ",
          "\x00", "\x07", "\x1f", "\x7f", "\u200b", "\u200d", "\ufeff", "\ufffd", "\ue000", "\ud83d",
          "中", "文", "東京", "한국어", "😀", "👩\u200d💻", "1", "42", "2024", "3.14",
          "the", "hello", "world", "running", "unbelievable", "don't", "ꙮꙮ", "hello😀world",
          "xqzjvkwpxqzjvkwpxqzjvkwpxqzjvkwpxqzjvkwp",
          "supercalifragilisticꙮexpialidocious", SPACE, "##", "##ing",
          "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "CLS", "SEP]", "[MA", "[[SEP]]"]
DOC = st.lists(st.sampled_from(PIECES), max_size=30).map("".join) | st.text(max_size=20)
INSERT = st.lists(st.sampled_from(PIECES), max_size=3).map("".join) | st.text(max_size=2)


@functools.cache
def _bge() -> WordPieceTokenizer:
    return load_tokenizer(data_file("gguf-vocab", "ggml-vocab-bert-bge.gguf"))


@pytest.fixture(scope="module")
def bge():
    return _bge()








# ---- the cut rule ------------------------------------------------------------------------------

def _kind_by_preprocess(ch: str, strip_accents: bool) -> str:
    """char_kind as `preprocess` shows it between two letters."""
    words = [w for w, _ in preprocess("a" + ch + "b", lowercase=False, strip_accents=strip_accents)]
    return {1: DROPPED if words == ["ab"] else WORD, 2: SPACE_KIND, 3: SINGLE}[len(words)]


@pytest.mark.parametrize("strip_accents", [True, False])
def test_char_kind_is_what_preprocess_does(strip_accents):
    """Every BMP code point (lone surrogates included) and every 97th astral one."""
    for cp in [*range(0x10000), *range(0x10000, 0x110000, 97)]:
        ch = chr(cp)
        assert char_kind(ch, strip_accents=strip_accents) == _kind_by_preprocess(ch, strip_accents), hex(cp)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=DOC)
def test_a_cut_splits_a_fragment_into_parts_tokenized_alone(bge, text):
    """At every place the rule allows, the fragment's raw spans are those of the two parts,
    and the last token before it ends there."""
    is_cut = bge.edit_cuts()
    whole = bge.fragment_spans(text, 0, len(text))
    for r in range(1, len(text)):
        if is_cut(text[r - 1:r + 1]):
            head = bge.fragment_spans(text, 0, r)
            assert head and head[-1][2] == r
            assert head + bge.fragment_spans(text, r, len(text)) == whole


# ---- which vocabularies qualify ----------------------------------------------------------------

@pytest.mark.parametrize("special", [False, True])
def test_bge_edits_are_local_but_never_sliced(bge, special):
    """core.chunked is for ByteLevelBPETokenizer only: it knows nothing of llama.cpp's partition."""
    assert inc.local_edits(bge, special) and not inc.supports_edits(bge, special)
    assert inc.IncrementalEncoder(bge, "x", special=special).incremental


def _small(unk: bool, flags: dict | None = None) -> WordPieceTokenizer:
    tokens = ["[UNK]", "[CLS]", f"{SPACE}a", f"{SPACE}b", "a", "b", f"{SPACE}ab", ",", f"{SPACE}é", "\u0301",
              f"{SPACE}A", "B"]
    attrs = [ATTR_UNKNOWN, ATTR_CONTROL] + [ATTR_NORMAL] * (len(tokens) - 2)
    specials = {"unk": 0, "bos": 1} if unk else {"bos": 1}
    return WordPieceTokenizer(LlamaVocab(tokens, attrs, None, specials=specials, flags=flags or {}))


SMALL_PIECES = ["a", "b", "A", "B", "ab", " ", "\u3000", ",", "é", "e\u0301", "\u0301", "\x00", "c", "[CLS]", "İ"]


@EDIT_SETTINGS
@given(lowercase=st.booleans(), strip_accents=st.booleans(), data=st.data(), special=st.booleans(),
       text=st.lists(st.sampled_from(SMALL_PIECES), max_size=20).map("".join))
def test_random_edits_without_lowercasing_or_accent_stripping(lowercase, strip_accents, data, special, text):
    """The flags change what preprocess keeps (marks are word characters without accent
    stripping, so "e\u0301" matches "▁é" only then): the cut rule follows strip_accents."""
    tok = _small(True, {"lowercase": lowercase, "strip_accents": strip_accents})
    enc = inc.IncrementalEncoder(tok, text, special=special)
    assert enc.incremental
    _check(enc, tok, text)
    _edits(enc, tok, text, data, st.lists(st.sampled_from(SMALL_PIECES), max_size=3).map("".join))
    assert enc.full_encodes == 0


def test_a_vocabulary_without_unk_re_encodes_in_full():
    """A word no entry starts gives no token at all: the tokens before a cut need not end there."""
    tok = _small(unk=False)
    text = "ab, c ab"
    enc = inc.IncrementalEncoder(tok, text)
    assert not enc.incremental and "no unknown token" in enc.reason
    enc.apply_edit(5, 0, "c")
    assert enc.full_encodes == 1
    _check(enc, tok, "ab, cc ab")


def test_a_small_vocabulary_with_unk_stays_local():
    tok = _small(unk=True)
    text = "ab, c ab"
    enc = inc.IncrementalEncoder(tok, text, special=True)
    for start, removed, inserted in [(5, 0, "c"), (0, 0, "[CLS]"), (4, 3, " "), (0, 0, "ba "), (2, 0, "\x00")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, tok, text)
    assert enc.full_encodes == 0 and tok.unk_id in enc.ids


# ---- incremental == from scratch ---------------------------------------------------------------

@EDIT_SETTINGS
@given(text=DOC, data=st.data(), special=st.booleans())
def test_random_edits_equal_a_fresh_encode(bge, text, data, special):
    enc = inc.IncrementalEncoder(bge, text, special=special)
    _check(enc, bge, text)
    _edits(enc, bge, text, data, INSERT)
    assert enc.full_encodes == 0  # dropped characters, [UNK] and lone surrogates included


@pytest.mark.parametrize("special", [False, True])
def test_fragments_join_and_split(bge, special):
    """Deleting a special token joins two fragments; typing one splits a fragment; edits at 0,
    at the end, emptying the text, whitespace only, dropped characters only."""
    text = "Hello[SEP] world[CLS]again"
    enc = inc.IncrementalEncoder(bge, text, special=special)
    for start, removed, inserted in [(5, 5, ""), (0, 0, " "), (6, 0, "[CLS]"), (0, 1, ""),
                                     (len("Hello[CLS] world[CLS]again"), 0, " x"), (3, 0, "[SEP]"),
                                     (0, 0, "[MASK]"), (0, 6, ""), (0, len("Hel[SEP]lo[CLS] world[CLS]again x"), ""),
                                     (0, 0, "  "), (1, 0, "\x00\u0301"), (0, 0, "[UNK]"), (5, 0, "\u3000"),
                                     (0, 5, ""), (0, 0, "a"), (0, 1, "")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, bge, text)
    assert enc.full_encodes == 0


# ---- edits are local ---------------------------------------------------------------------------

LINE = ("The quick brown fox can't jump 1234 times; Привет, мир! 東京は日本の首都です。 😀 "
        "İstanbul Café\u00a0naïve\u3000x\x00y [CLS]x[SEP]\n")


@pytest.mark.parametrize("special", [False, True])
def test_typing_in_a_large_document_stays_local(bge, special):
    text = LINE * 400
    enc = inc.IncrementalEncoder(bge, text, special=special)
    middle = len(text) // 2
    for start, removed, inserted in [(middle, 0, "x"), (middle, 1, ""), (10, 0, " "), (0, 0, "Z"),
                                     (0, 1, ""), (len(text) - 1, 1, "!"), (len(text), 0, " end"),
                                     (LINE.index("東") + 3, 0, "京"), (LINE.index("[CLS]") + 1, 1, ""),
                                     (LINE.index("[CLS]") + 1, 0, "C"), (777, 3, "[SEP]"),
                                     (LINE.index("x\x00y") + 1, 1, ""), (LINE.index("Caf") + 3, 1, "e\u0301")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        assert enc.last_splice.removed < 12 and enc.last_splice.added < 12
    assert enc.full_encodes == 0
    assert list(enc.ids) == bge.encode(text, special=special) and enc.text == text
    assert _records(enc.tokens()[-40:]) == _records(bge.segment(text, special=special)[-40:])
