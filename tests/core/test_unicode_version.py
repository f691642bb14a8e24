"""The pre-tokenizer classes follow the references' Unicode version.

`regex` supplies ``\\p{L}``, ``\\p{N}``, ``\\p{M}``; tiktoken (Rust's regex crate) and HF
tokenizers (Oniguruma) classify code points by Unicode 16.0. regex moved to 17.0 in
2025.10.22, and then the ~4,800 code points 17.0 assigned (letters, digits and marks among
them) split differently next to letters, digits or an apostrophe. pyproject pins regex to
its Unicode 16.0 releases; these tests fail when either side moves.
"""
from __future__ import annotations

import random

import pytest
import regex

from forma_gui.formats.loader import load_tokenizer
from tests.conftest import data_file

#: the code points Unicode 17.0 assigned (unassigned in 16.0), as ranges: inputs only, the
#: expected ids come from the references
NEW_IN_17 = [
    (0x088F, 0x088F), (0x0C5C, 0x0C5C), (0x0CDC, 0x0CDC), (0x1ACF, 0x1ADD), (0x1AE0, 0x1AEB),
    (0x20C1, 0x20C1), (0x2B96, 0x2B96), (0xA7CE, 0xA7CF), (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4),
    (0xA7F1, 0xA7F1), (0xFBC3, 0xFBD2), (0xFD90, 0xFD91), (0xFDC8, 0xFDCE), (0x10940, 0x10959),
    (0x10EC5, 0x10EC7), (0x10ED0, 0x10ED8), (0x10EFA, 0x10EFB), (0x11B60, 0x11B67),
    (0x11DB0, 0x11DDB), (0x11DE0, 0x11DE9), (0x16EA0, 0x16EB8), (0x16EBB, 0x16ED3),
    (0x16FF2, 0x16FF6), (0x187F8, 0x187FF), (0x18D09, 0x18D1E), (0x18D80, 0x18DF2),
    (0x1CCFA, 0x1CCFC), (0x1CEBA, 0x1CED0), (0x1CEE0, 0x1CEF0), (0x1E6C0, 0x1E6DE),
    (0x1E6E0, 0x1E6F5), (0x1E6FE, 0x1E6FF), (0x1F6D8, 0x1F6D8), (0x1F777, 0x1F77A),
    (0x1F8D0, 0x1F8D8), (0x1FA54, 0x1FA57), (0x1FA8A, 0x1FA8A), (0x1FA8E, 0x1FA8E),
    (0x1FAC8, 0x1FAC8), (0x1FACD, 0x1FACD), (0x1FAEA, 0x1FAEA), (0x1FAEF, 0x1FAEF),
    (0x1FBFA, 0x1FBFA), (0x2B73A, 0x2B73F), (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479),
]
#: U+0295 LATIN LETTER PHARYNGEAL VOICED FRICATIVE: Ll in 16.0, Lo in 17.0
CHANGED_IN_17 = [0x0295]
#: where a character's class decides a pre-token boundary
CONTEXTS = ["a{c}", "{c}a", " {c}", "{c}'s", "1{c}", "{c}1", "{c}.", ".{c}", "{c}{c} x", "é{c}", "\n{c}"]


def _sample(k: int) -> list[int]:
    """Every range's ends and a random draw from the rest (the last range alone holds 4,298)."""
    points = sorted({c for lo, hi in NEW_IN_17 for c in (lo, hi)} | set(CHANGED_IN_17))
    rest = [c for lo, hi in NEW_IN_17 for c in range(lo + 1, hi)]
    return points + random.Random(17).sample(rest, k)


def test_regex_has_the_unicode_16_tables():
    assert regex.match(r"\p{L}", "\u1c89")       # CYRILLIC CAPITAL LETTER TJE, new in 16.0
    assert not regex.match(r"\p{L}", "\ua7ce")   # new in 17.0: unassigned in 16.0
    assert regex.match(r"\p{Cn}", chr(0x323B0))  # CJK Extension J (17.0)
    assert regex.match(r"\p{Ll}", "\u0295")


@pytest.mark.parametrize("name", ["r50k_base", "cl100k_base", "o200k_base"])
def test_code_points_new_in_unicode_17_split_as_tiktoken_splits_them(name):
    from forma_gui.bench.encode import _tiktoken

    path = data_file("tiktoken", f"{name}.tiktoken")
    ours, ref = load_tokenizer(path), _tiktoken(name, path)
    texts = [t.format(c=chr(c)) for c in _sample(400) for t in CONTEXTS]
    assert [ours.encode(t) for t in texts] == [ref.encode(t) for t in texts]


def test_code_points_new_in_unicode_17_split_as_hf_tokenizers_splits_them():
    from tokenizers import Tokenizer

    path = data_file("hf", "qwen3", "tokenizer.json")
    ours, ref = load_tokenizer(path), Tokenizer.from_file(str(path))
    texts = [t.format(c=chr(c)) for c in _sample(400) for t in CONTEXTS]
    assert [ours.encode(t) for t in texts] == [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]


# ---- llama.cpp: its own tables, Unicode 15.1 -------------------------------------------------
#: read from llama.cpp's src/unicode-data.cpp (unicode_ranges_flags, flag 0x0001: undefined):
#: code points 16.0 assigned that it leaves undefined, beside U+0378, unassigned everywhere
LLAMA_UNDEFINED_SEEN = [0x0378, 0x0897, 0x1B4E, 0x1B4F, 0x1B7F, 0x1C89]


def test_the_undefined_ranges_are_the_code_points_unicode_16_assigned_that_llama_cpp_lacks():
    from forma_gui.core.llama_pre import UNDEFINED_IN_LLAMA

    points = [c for lo, hi in UNDEFINED_IN_LLAMA for c in range(lo, hi + 1)]
    assert len(points) == 5185  # Unicode 16.0 assigned 5,185 code points
    assert not any(regex.match(r"\p{Cn}", chr(c)) for c in points)  # all assigned in regex's 16.0
    assert set(LLAMA_UNDEFINED_SEEN[1:]) <= set(points)


def _llama_words(name: str, text: str) -> list[str]:
    from forma_gui.core.llama_pre import llama_pre_tokenizer

    return [text[s:e] for s, e in llama_pre_tokenizer(name).split(text)]


def test_llama_cpp_classes_a_code_point_new_in_16_as_no_letter_digit_or_space():
    # known answers (llama.cpp: U+1C89 and U+10D40 are in no class, as U+0378)
    tje, garay = "\u1c89", "\U00010d40"
    assert _llama_words("llama-bpe", f"a{tje}b") == ["a", f"{tje}b"]
    assert _llama_words("llama-bpe", f" {tje}.") == [f" {tje}."]
    assert _llama_words("llama-bpe", f"x {garay}y") == ["x", f" {garay}", "y"]
    assert _llama_words("gpt-2", f"a{tje}b") == ["a", f"{tje}", "b"]
    assert _llama_words("smollm", f"1{tje}2") == ["1", tje, "2"]  # (two stages)
    # a stage without categories (std::wregex on code points) sees the code point itself
    assert _llama_words("deepseek-llm", f"a{tje}\n") == ["a", tje, "\n"]


def _hf_llama_bpe_ids(texts: list[str]) -> list[list[int]]:
    """The llama-bpe GGUF's ids by HF tokenizers: words cut by Llama 3's regex on the text
    with llama.cpp's undefined code points read as U+0378 (its tables class them alike:
    LLAMA_UNDEFINED_SEEN), each word's bytes encoded by HF's BPE over the GGUF's vocabulary."""
    from tokenizers import Regex, pre_tokenizers

    from forma_gui.bench.tokenizer_load import _hf_bpe
    from forma_gui.core import patterns
    from forma_gui.core.llama_pre import UNDEFINED_IN_LLAMA  # (checked above)

    path = data_file("gguf-vocab", "ggml-vocab-llama-bpe.gguf")
    model = _hf_bpe(path, ignore_merges=True).model
    split = pre_tokenizers.Split(Regex(patterns.PATTERNS["llama3"]), behavior="isolated")
    to_bytes = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    undefined = {c for lo, hi in UNDEFINED_IN_LLAMA for c in range(lo, hi + 1)}
    out = []
    for text in texts:
        seen = "".join("\u0378" if ord(ch) in undefined else ch for ch in text)
        ids = []
        for _, (s, e) in split.pre_tokenize_str(seen):
            (mapped, _), = to_bytes.pre_tokenize_str(text[s:e])
            ids += [t.id for t in model.tokenize(mapped)]
        out.append(ids)
    return out


def test_code_points_new_in_unicode_16_split_as_llama_cpp_splits_them():
    from forma_gui.core.llama_pre import UNDEFINED_IN_LLAMA

    ours = load_tokenizer(data_file("gguf-vocab", "ggml-vocab-llama-bpe.gguf"))
    ends = sorted({c for lo, hi in UNDEFINED_IN_LLAMA for c in (lo, hi)})
    rest = [c for lo, hi in UNDEFINED_IN_LLAMA for c in range(lo + 1, hi)]
    texts = [t.format(c=chr(c)) for c in ends + random.Random(16).sample(rest, 200) for t in CONTEXTS]
    assert [ours.encode(t) for t in texts] == _hf_llama_bpe_ids(texts)
