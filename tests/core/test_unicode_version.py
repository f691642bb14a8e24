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
