"""LlamaVocab.partition (llama.cpp's tokenizer_st_partition): the one-scan filter of the special
texts present changes nothing, whatever the texts' overlaps and prefixes."""
from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core import llama_vocab
from forma_gui.core.llama_vocab import (ATTR_CONTROL, ATTR_LSTRIP, ATTR_NORMAL, ATTR_RSTRIP,
                                        ATTR_USER_DEFINED, LlamaVocab, _trie_regex)
from tests.conftest import MAX_EXAMPLES

#: a small alphabet, so that special texts overlap, nest and prefix one another
TEXT = st.text("ab<>| ", max_size=40)
SPECIAL = st.text("ab<>|", min_size=1, max_size=5)
KIND = st.sampled_from([ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_CONTROL | ATTR_LSTRIP,
                        ATTR_USER_DEFINED | ATTR_RSTRIP])


def _vocab(specials: list[tuple[str, int]]) -> LlamaVocab:
    tokens = ["a", "b"] + [text for text, _ in specials]
    attrs = [ATTR_NORMAL, ATTR_NORMAL] + [attr for _, attr in specials]
    return LlamaVocab(tokens, attrs, None, specials={}, flags={})


def _unfiltered(vocab: LlamaVocab, text: str, parse_special: bool):
    """partition as it was: every special text tested against the text on its own."""
    vocab._present_specials = lambda text: set(vocab._special_cache or ())
    try:
        return vocab.partition(text, parse_special)
    finally:
        del vocab._present_specials


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(st.tuples(SPECIAL, KIND), min_size=1, max_size=8), TEXT, st.booleans())
def test_filtered_partition_equals_the_unfiltered_one(specials, text, parse_special):
    vocab = _vocab(specials)
    assert vocab.partition(text, parse_special) == _unfiltered(vocab, text, parse_special)


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(SPECIAL, min_size=1, max_size=8), TEXT)
def test_present_specials_are_the_texts_that_occur(texts, text):
    vocab = _vocab([(t, ATTR_CONTROL) for t in texts])
    expected = {i for i, t in enumerate(vocab.tokens) if i >= 2 and t in text}
    assert vocab._present_specials(text) == expected


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(SPECIAL, min_size=1, max_size=8), TEXT)
def test_trie_regex_matches_the_longest_text_at_each_position(texts, text):
    rx = re.compile(_trie_regex(texts))
    for at in range(len(text)):
        found = rx.match(text, at)
        longest = max((t for t in texts if text.startswith(t, at)), key=len, default=None)
        assert (found.group() if found else None) == longest


def test_a_special_text_too_long_for_a_regex_is_still_cut(monkeypatch):
    """Hostile files: texts past the regex limits are tested one by one, as before."""
    monkeypatch.setattr(llama_vocab, "MAX_SPECIAL_CHARS", 3)
    vocab = _vocab([("<ab>", ATTR_CONTROL), ("|", ATTR_USER_DEFINED)])
    assert vocab._special_finder() is None
    assert vocab.partition("x<ab>y|", True) == [(None, 0, 1), (2, 1, 5), (None, 5, 6), (3, 6, 7)]
