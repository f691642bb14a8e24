"""llama.cpp's pre-tokenizer table: every name resolves, unknown ones are refused, and the
translations to the `regex` module cut exactly as llama.cpp does (known answers from
unicode.cpp's hand-written cuts and comments, and equivalence properties)."""
from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core import patterns as pats
from forma_gui.core.llama_pre import (CUSTOM, LLAMA_PRE_NAMES, LLAMA_PRE_REGEXES, ONE_REGEX,
                                      UnknownPreTokenizer, as_llama_classes, llama_pre_tokenizer,
                                      translate)
from tests.conftest import MAX_EXAMPLES


def _words(name: str, text: str) -> list[str]:
    return [text[s:e] for s, e in llama_pre_tokenizer(name).split(text)]


def test_every_name_resolves_and_compiles():
    assert len(LLAMA_PRE_NAMES) >= 90
    for name, (kind, _) in LLAMA_PRE_NAMES.items():
        pre = llama_pre_tokenizer(name)
        assert pre.type == kind and len(pre.patterns) == len(LLAMA_PRE_REGEXES[kind])
    for name in ("gpt-2", "llama-bpe", "llama3", "qwen2", "smollm", "deepseek-llm",
                 "deepseek-coder", "deepseek-v3", "falcon", "mpt", "starcoder", "refact",
                 "command-r", "stablelm2", "olmo", "dbrx", "jais", "poro-chat", "chatglm-bpe",
                 "viking", "tekken", "smaug-bpe", "bloom", "gpt3-finnish", "exaone",
                 "chameleon", "minerva-7b", "gpt-4o", "superbpe", "trillion", "bailingmoe",
                 "seed-coder", "kimi-k2", "hunyuan"):
        assert name in LLAMA_PRE_NAMES, name


def test_unknown_name_is_refused_and_missing_is_default():
    with pytest.raises(UnknownPreTokenizer, match="no-such-pre"):
        llama_pre_tokenizer("no-such-pre")
    assert llama_pre_tokenizer(None).type == llama_pre_tokenizer("").type == "DEFAULT"


def test_flags_follow_llama_cpp():
    assert llama_pre_tokenizer("llama-bpe").flags["ignore_merges"] is True
    assert llama_pre_tokenizer("gpt-2").flags["clean_spaces"] is True
    assert llama_pre_tokenizer("qwen2").flags["clean_spaces"] is False
    assert llama_pre_tokenizer("chatglm-bpe").flags["no_bos"] is True


def test_translations():
    assert translate(r"\s+$") == (r"\s+\Z", True)
    assert translate(r"(?=(\d{3})+(?!\d))") == (r"(?=([0-9]{3})+(?![0-9]))", True)
    assert translate(r"[\p{Lu}\p{Ll}]+\p{N}")[0] == r"[\p{L}\p{L}]+\p{N}"
    assert translate(LLAMA_PRE_REGEXES["GPT2"][0]) == (pats.HF_BYTELEVEL_REGEX, False)


def test_multi_regex_cuts():
    assert _words("smollm", "ab 123x") == ["ab", " ", "1", "2", "3", "x"]
    assert _words("falcon", "a, b 1234") == ["a", ",", " b", " ", "123", "4"]
    assert _words("deepseek-coder", "x=1\ny") == ["x", "=", "1", "\n", "y"]


def test_hand_written_cuts():
    # unicode.cpp custom_afmoe (tiny_aya's digits too): 1234567 -> 1, 234, 567; the
    # non-digits before a run are glued to its first group
    assert _words("afmoe", "1234567") == ["1", "234", "567"]
    digits = regex.compile(translate(LLAMA_PRE_REGEXES["TINY_AYA"][0])[0])
    assert [("ab12345cd"[s:e]) for s, e in pats.split_pieces(digits, "ab12345cd")] == [
        "ab12", "345", "cd"]
    assert _words("tiny_aya", "ab12345cd") == ["ab", "12", "345", "cd"]
    assert _words("kimi-k2", "中文abc's 123") == ["中文", "abc's", " ", "123"]
    assert _words("laguna", "a\n\nb") == ["a", "\n\n", "b"]


def test_wide_regexes_see_non_ascii_spaces_as_vertical_tab():
    # deepseek-llm's punctuation and Han classes contain U+3000, but std::wregex sees it as
    # U+000B; with the real character both would keep "、\u3000。" whole
    assert _words("deepseek-llm", "、\u3000。") == ["、", "\u3000", "。"]
    assert _words("superbpe", "1234567 89") == ["1", "234", "567", " ", "89"]


@given(st.text())
@settings(max_examples=MAX_EXAMPLES)
def test_gpt2_custom_cut_equals_gpt2_regex(text):
    """llama.cpp's gpt2 regex lacks GPT-2's final "|\\s+"; the gaps it leaves are the same."""
    ours = pats.split_pieces(regex.compile(LLAMA_PRE_REGEXES["GPT2"][0]), text)
    assert ours == pats.split_pieces(regex.compile(CUSTOM[LLAMA_PRE_REGEXES["GPT2"][0]]), text)


@given(st.text(st.characters(blacklist_categories=("Cs",))))
@settings(max_examples=MAX_EXAMPLES)
def test_space_chunking_is_exact_for_llama3_and_qwen2(text):
    for kind in ("LLAMA3", "QWEN2"):
        pattern = regex.compile(LLAMA_PRE_REGEXES[kind][0])
        whole = [text[s:e] for s, e in pats.split_pieces(pattern, text)]
        chunked = [piece for chunk in pats.chunk_at_spaces(text)
                   for piece in pattern.findall(chunk)]
        assert chunked == whole


@pytest.mark.parametrize("name", ["llama-bpe", "dbrx", "smaug-bpe", "qwen2"])
def test_llama_cpp_spellings_get_the_fast_pattern_paths(name):
    """The byte-level encoder's fast paths are keyed by regex source: llama.cpp's spellings of
    llama3/qwen2 must be among them (patterns.py tests their twins like the others')."""
    source = llama_pre_tokenizer(name).patterns[0].pattern
    assert source in (pats._LLAMA3_CPP, pats._QWEN2_CPP)
    assert pats.is_space_safe(source) and pats.ascii_pattern(source) is not None
    assert pats.wide_pattern(source) is not None


# ---- one regex for a stage list (ONE_REGEX) ---------------------------------------------------

#: what llama.cpp's digit stage and GPT-2's regex care about: digits of several scripts (and
#: other \p{N}: superscripts, Roman numerals, fractions), letters of several scripts, marks,
#: every kind of whitespace, apostrophes and contractions, punctuation, symbols, emoji
_STAGE_PIECES = list("aZé漢Яя\u0301\u200d😀1٣²Ⅻ½.,-/_(!$+ \t\n\r\x0b\x0c\x85\xa0\u2003\u3000'sStdlmvre") + [
    "'ll", "'re", "'S", "don't", "  ", "\n\n", "   \n ", "123", " 1", "  1", "\t1", "' 1", "'1",
    "x1y", "1'", "'s1", "\u3000\u30001", "a \n1", "\u1c89", "\U00013460"]  # (in no class for llama.cpp)
_STAGE_TEXT = (st.lists(st.sampled_from(_STAGE_PIECES), max_size=40).map("".join)
               | st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))

#: the pre-tokenizer names whose regex list is digits, then GPT-2's regex
_DIGITS_THEN_GPT2 = sorted(name for name, (kind, _) in LLAMA_PRE_NAMES.items()
                           if LLAMA_PRE_REGEXES[kind] == (r"\p{N}", LLAMA_PRE_REGEXES["GPT2"][0]))


def test_one_regex_names():
    """Exactly the names with identical stages get a one-regex form; one-stage lists their only
    stage unless it runs on the wide-space rewrite; every other list none."""
    assert {"smollm", "starcoder", "command-r", "refact", "codeshell", "exaone", "minerva-7b",
            "mellum2"} <= set(_DIGITS_THEN_GPT2)
    for name, (kind, _) in LLAMA_PRE_NAMES.items():
        pre = llama_pre_tokenizer(name)
        if name in _DIGITS_THEN_GPT2:
            assert pre.one_pattern.pattern == pats.DIGITS_GPT2, name
        elif len(pre.patterns) == 1:
            assert pre.one_pattern is (None if pre.wide[0] else pre.patterns[0]), name
        else:
            assert pre.one_pattern is None, name
    assert list(ONE_REGEX) == [(r"\p{N}", LLAMA_PRE_REGEXES["GPT2"][0])]


@given(text=_STAGE_TEXT)
@settings(max_examples=MAX_EXAMPLES)
def test_digits_then_gpt2_equals_one_regex(text):
    """The one regex's matches on the whole text are the two stages' words (split), and they
    cover every character (its classes read as llama.cpp's tables give them: the code points
    Unicode 16.0 added are in none; where the text holds one the callers split in stages)."""
    words = llama_pre_tokenizer("smollm").split(text)
    spans = [m.span() for m in regex.finditer(pats.DIGITS_GPT2, as_llama_classes(text))]
    assert spans == words
    assert "".join(text[s:e] for s, e in spans) == text


def test_digits_then_gpt2_examples():
    """Known answers from the two stages by hand: a digit ends GPT-2's text, so the spaces
    before it are one word and never its prefix."""
    one = regex.compile(pats.DIGITS_GPT2)
    assert one.findall("ab 123x") == ["ab", " ", "1", "2", "3", "x"]
    assert one.findall("a  1 b") == ["a", "  ", "1", " b"]
    assert one.findall("x's 7's\n\n9") == ["x", "'s", " ", "7", "'s", "\n\n", "9"]
    assert one.findall("a   b") == ["a", "  ", " b"]
