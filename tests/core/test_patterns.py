"""Pre-tokenizer patterns: names, raw regexes, HF Split semantics, and the space cut."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from forma_gui.core import patterns as pats
from tests.conftest import MAX_EXAMPLES


def test_names_and_aliases():
    assert pats.get_pattern("gpt2") is pats.get_pattern("r50k_base") is pats.get_pattern("p50k")
    assert pats.get_pattern("cl100k_base").pattern == pats.PATTERNS["cl100k"]
    assert pats.get_pattern(r"\w+|\W").findall("a b") == ["a", " ", "b"]


def test_patterns_equal_tiktokens_own():
    from tiktoken_ext import openai_public as op

    assert pats.PATTERNS["gpt2"] == op.r50k_pat_str


def test_invalid_regex_is_a_value_error():
    with pytest.raises(ValueError, match="invalid pre-tokenizer regex"):
        pats.get_pattern("(unclosed")


def test_known_splits():
    assert pats.get_pattern("gpt2").findall("I'll  go\n\n  now") == ["I", "'ll", " ", " go", "\n\n ", " now"]
    assert pats.get_pattern("cl100k").findall("12345 abc") == ["123", "45", " abc"]
    assert pats.get_pattern("qwen2").findall("123") == ["1", "2", "3"]


def test_split_pieces_keeps_gaps_like_hf_isolated():
    digits = pats.compile_pattern(r"\d+")
    assert pats.split_pieces(digits, "ab12cd3") == [(0, 2), (2, 4), (4, 6), (6, 7)]


def test_pattern_names_round_trip():
    for name, source in pats.PATTERNS.items():
        assert pats.pattern_name(source) == name
    assert pats.pattern_name(pats.HF_BYTELEVEL_REGEX) == "gpt2"
    assert pats.pattern_name("x") is None


# Text made of the characters that matter at a space: letters, digits, marks, punctuation,
# apostrophes, every kind of whitespace and the \x1c..\x1f separators `re` and `regex` disagree on.
_ALPHABET = st.sampled_from(list("aZé1٣'s.-/ \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2003\u3000漢\u0301😀"))
_TEXT = st.lists(_ALPHABET, max_size=40).map("".join) | st.text(max_size=40)


@pytest.mark.parametrize("source", sorted(pats.SPACE_SAFE))
@settings(max_examples=MAX_EXAMPLES)
@given(text=_TEXT)
def test_space_cut_is_exact_for_safe_patterns(source, text):
    pattern = pats.compile_pattern(source)
    whole = pattern.findall(text)
    chunked = [p for chunk in pats.chunk_at_spaces(text) for p in pattern.findall(chunk)]
    assert chunked == whole
    assert "".join(whole) == text  # the named patterns match every character


def test_re_whitespace_is_str_isspace():
    # chunk_at_spaces relies on `re`'s \s being exactly str.isspace()
    import re

    everything = "".join(map(chr, range(0x110000)))
    assert "".join(re.findall(r"\s", everything)) == "".join(filter(str.isspace, everything))


@settings(max_examples=MAX_EXAMPLES)
@given(text=_TEXT)
def test_space_cut_equals_the_regex_reference(text):
    import re

    assert pats.chunk_at_spaces(text) == re.split(r"(?<=\S)(?= )", text)


def test_space_cut_examples():
    assert pats.chunk_at_spaces("a  b c\n d") == ["a", "  b", " c\n d"]
    assert pats.chunk_at_spaces("") == [""]
    assert pats.chunk_at_spaces(" x") == [" x"]
    assert pats.chunk_at_spaces("  a b\ufffd\uffff c") == ["  a", " b\ufffd\uffff", " c"]


# ASCII text that exercises every alternative: contractions in both cases, letters, digits,
# punctuation, each ASCII whitespace and the \x1c..\x1f separators `re`'s \s would take.
_ASCII = st.sampled_from(list("'sdmtlverSDMTLVEaZ09.-/_ \t\n\r\x0b\x0c\x1c\x1f\x00\x7f"))
_ASCII_TEXT = st.lists(_ASCII, max_size=40).map("".join) | st.text(st.characters(max_codepoint=127), max_size=40)


@pytest.mark.parametrize("source", sorted(pats.ASCII_PATTERNS))
@settings(max_examples=MAX_EXAMPLES)
@given(text=_ASCII_TEXT)
def test_ascii_twin_equals_the_pattern_on_ascii_text(source, text):
    assert pats.ascii_pattern(source).findall(text) == pats.compile_pattern(source).findall(text)


@pytest.mark.parametrize("source", sorted(pats.ASCII_PATTERNS))
def test_ascii_twin_on_every_pair_and_triple_of_ascii_characters(source):
    # every ASCII character next to every other, and every triple of a smaller set
    chars = [chr(c) for c in range(128)]
    pairs = "|".join(a + b for a in chars for b in chars)
    some = "'sStT aA0.\n\r\t\x0b"
    triples = "|".join(a + b + c for a in some for b in some for c in some)
    for text in (pairs, triples, "".join(chars)):
        assert pats.ascii_pattern(source).findall(text) == pats.compile_pattern(source).findall(text)


def test_ascii_classes_are_the_unicode_ones_restricted_to_ascii():
    import regex

    chars = [chr(c) for c in range(128)]
    assert "".join(c for c in chars if regex.match(r"\p{L}", c)) == "".join(c for c in chars if c.isalpha())
    assert "".join(c for c in chars if regex.match(r"\p{N}", c)) == "0123456789"
    assert "".join(c for c in chars if regex.match(r"\s", c)) == "\t\n\x0b\x0c\r "
    assert pats.ascii_pattern("no such pattern") is None


# ---- the wide twins: `re` patterns for text of WIDE_BLOCKS characters ----------------------

_WIDE_SOURCES = sorted(pats._WIDE_TWINS)
_COVERED = [chr(c) for c in range(128)] + [chr(c) for a, b in pats.WIDE_BLOCKS for c in range(a, b + 1)]
# contractions in every case (and the long s and Kelvin-like folds), each kind of space,
# letters and digits of several scripts, CJK punctuation, a byte order mark
_TRICKY = list("'sSſdDmMtTlLvVeErRkK aZ09.,_-\t\n\r\x0b\x0c\x85\xa0\u2000\u2009\u2028\u202f\u3000"
               "ЖжЁё中文。，！ー가ｱ１〇²½\ufeff\u200b")  # all covered (checked below)
_WIDE_TEXT = (st.lists(st.sampled_from(_TRICKY), max_size=40).map("".join)
              | st.lists(st.sampled_from(_COVERED), max_size=30).map("".join))


def test_wide_classes_are_the_regex_ones_on_every_covered_character():
    import re

    import regex

    classes = pats.wide_classes()
    text = "".join(_COVERED)
    for body, pattern in ((classes.L, r"\p{L}"), (classes.N, r"\p{N}"), (classes.W, r"\s")):
        assert re.findall(f"[{body}]", text) == regex.findall(pattern, text)
    for letter in "sdmtlver":
        assert re.findall(f"[{classes.fold(letter)}]", text) == regex.findall(f"(?i){letter}", text)
    twin, other = pats.wide_pattern(pats.PATTERNS["gpt2"])
    assert other.search(text) is None and other.search("".join(_TRICKY)) is None
    assert other.search("\u0250") and other.search("Ⅷ") and other.search("😀")


@pytest.mark.parametrize("source", _WIDE_SOURCES)
@settings(max_examples=MAX_EXAMPLES)
@given(text=_WIDE_TEXT)
def test_wide_twin_equals_the_pattern_on_covered_text(source, text):
    twin, _ = pats.wide_pattern(source)
    assert twin.findall(text) == pats.compile_pattern(source).findall(text)


@pytest.mark.parametrize("source", _WIDE_SOURCES)
def test_wide_twin_on_every_pair_of_tricky_characters(source):
    twin, _ = pats.wide_pattern(source)
    pairs = "|".join(a + b for a in _TRICKY for b in _TRICKY)
    triples = "|".join(a + b + c for a in "'sſ Ж\n\u3000" for b in "'sSſtTlL Ж1\n" for c in "'lLeE sſ\r")
    for text in (pairs, triples, "".join(_COVERED)):
        assert twin.findall(text) == pats.compile_pattern(source).findall(text)
    assert pats.wide_pattern("no such pattern") is None
