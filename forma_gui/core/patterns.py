"""Pre-tokenizer patterns: the regexes that cut text into pre-tokens before BPE.

Patterns are compiled with the `regex` module, which has the ``\\p{L}`` classes and the
possessive quantifiers tiktoken's patterns use; its ``\\s`` is Unicode White_Space, as in
Rust's regex (tiktoken) and Oniguruma (HF tokenizers).

`get_pattern(name_or_regex)` accepts a name from PATTERNS (or ALIASES) or any raw regex.
`compile_pattern(regex)` compiles with caching (llama.cpp pre-tokenizer tables use it).
`split_pieces(pattern, text)` cuts text the way HF's ``Split(behavior="Isolated")`` does.

Space chunking (`chunk_at_spaces`): for the patterns in SPACE_SAFE, a space that follows a
non-space character always starts a new pre-token (no alternative can run from a non-space
character across a following space, the patterns match every character, and none looks
behind). The text can therefore be cut there first, and the chunks pre-tokenized and cached
independently with exactly the same result. tests/core/test_patterns.py checks this.
"""
from __future__ import annotations

import functools
import re

import regex

# tiktoken's own pattern strings (tiktoken_ext/openai_public.py): equivalent to the originals
# but with possessive quantifiers, which the `regex` module runs faster.
_GPT2 = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_CL100K = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"""
           r"""[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
_O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
# The forms stored in HuggingFace tokenizer.json files (Split pre-tokenizer) and GPT-2's
# original release (HF's ByteLevel(use_regex=True) uses this one).
_GPT2_ORIGINAL = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"""
           r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
          r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

#: pattern name -> regex source
PATTERNS: dict[str, str] = {
    "gpt2": _GPT2,        # r50k_base, p50k_base, GPT-2
    "cl100k": _CL100K,
    "o200k": _O200K,
    "llama3": _LLAMA3,
    "qwen2": _QWEN2,
}

#: other spellings of the names above (tiktoken encoding names, HF model families)
ALIASES: dict[str, str] = {
    "r50k": "gpt2", "r50k_base": "gpt2", "p50k": "gpt2", "p50k_base": "gpt2",
    "p50k_edit": "gpt2", "cl100k_base": "cl100k", "o200k_base": "o200k",
    "llama-bpe": "llama3", "qwen": "qwen2",
}

# llama.cpp's own spellings of the llama3 and qwen2 regexes (llama-vocab.cpp, as
# core.llama_pre translates them; GGUF files of Llama 3, DBRX, Smaug and Qwen2 use them): the
# contractions as '[sS]... classes instead of (?i:'s...). They differ only on the non-ASCII
# letters that `regex`'s (?i) folds into s or k (U+017F, U+212A), so everything proved for
# the originals holds for them, and on ASCII text they match alike.
_I_CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_CPP_CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3_CPP = _CPP_CONTRACTIONS + _LLAMA3.removeprefix(_I_CONTRACTIONS)
_QWEN2_CPP = _CPP_CONTRACTIONS + _QWEN2.removeprefix(_I_CONTRACTIONS)
#: pattern name -> llama.cpp's spelling of it (core.llama_pre's translation of the GGUF regex)
CPP_PATTERNS: dict[str, str] = {"llama3": _LLAMA3_CPP, "qwen2": _QWEN2_CPP}

# llama.cpp's two-stage pre-tokenizer "\p{N}, then GPT-2's regex" (smollm, starcoder, command-r,
# ...; core.llama_pre.ONE_REGEX) as ONE regex whose matches on the whole text are its words:
# every digit is a word of its own, and GPT-2's regex only ever runs on the digit-free text
# between digits, where ` ?\p{N}+` never matches and a digit is where that text ends. So: the
# digit first, GPT-2's alternatives with \p{N} dropped (every class already excludes it or
# cannot meet one), and `(?!\S)` (at the end of the text, or before whitespace) widened to
# "before whitespace, a digit or the end". tests/core/test_llama_pre.py checks it against `split`.
DIGITS_GPT2 = r"""\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"""

#: regex sources for which cutting at "non-space char, then space" is provably exact
SPACE_SAFE: set[str] = {_GPT2, _CL100K, _O200K, _LLAMA3, _QWEN2, _GPT2_ORIGINAL, _LLAMA3_CPP,
                        _QWEN2_CPP, DIGITS_GPT2}

#: the GPT-2 regex HF's ByteLevel pre-tokenizer applies when use_regex is true
HF_BYTELEVEL_REGEX = _GPT2_ORIGINAL

# The same patterns for ASCII-only text, for Python's `re`, which runs them about three times
# faster than `regex` runs the originals. In ASCII, \p{L} is [A-Za-z], \p{N} is [0-9] and
# `regex`'s \s is [\t\n\x0b\x0c\r ] (not `re`'s \s, which adds \x1c-\x1f: spelled out).
# tests/core/test_patterns.py checks all three classes and the patterns on random ASCII text.
_S, _NS = r"[\t\n\x0b\x0c\r ]", r"[^\t\n\x0b\x0c\r ]"
_PUNCT = r"[^\t\n\x0b\x0c\r A-Za-z0-9]"  # [^\s\p{L}\p{N}]
_TAIL = f"{_S}++$|{_S}+(?!{_NS})|{_S}"
#: regex source -> an equivalent `re` source for ASCII-only text
ASCII_PATTERNS: dict[str, str] = {
    _GPT2: rf"""'(?:[sdmt]|ll|ve|re)| ?[A-Za-z]++| ?[0-9]++| ?{_PUNCT}++|{_TAIL}""",
    _CL100K: (rf"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{{1,3}}+| ?{_PUNCT}++[\r\n]*+"""
              rf"""|{_S}++$|{_S}*[\r\n]|{_S}+(?!{_NS})|{_S}"""),
    _GPT2_ORIGINAL: (rf"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?{_PUNCT}+"""
                     rf"""|{_S}+(?!{_NS})|{_S}+"""),
    _LLAMA3: (rf"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{{1,3}}| ?{_PUNCT}+[\r\n]*"""
              rf"""|{_S}*[\r\n]+|{_S}+(?!{_NS})|{_S}+"""),
    _QWEN2: (rf"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?{_PUNCT}+[\r\n]*"""
             rf"""|{_S}*[\r\n]+|{_S}+(?!{_NS})|{_S}+"""),
}
ASCII_PATTERNS[_LLAMA3_CPP] = ASCII_PATTERNS[_LLAMA3]  # (?i) and [sS] agree on ASCII
ASCII_PATTERNS[_QWEN2_CPP] = ASCII_PATTERNS[_QWEN2]

# Wider twins, for text whose characters all lie in WIDE_BLOCKS (ASCII plus the scripts of
# most non-English text: Latin, Greek, Cyrillic, CJK, kana, Hangul, their punctuation): `re`
# runs them about twice as fast as `regex` runs the originals. Their classes are not written
# out by hand but read from `regex` itself over those characters (`wide_classes`), so each
# twin agrees with the installed `regex` on every character it can meet; the case-insensitive
# contractions are spelled as the characters `regex`'s (?i) takes for each letter.
# tests/core/test_patterns.py checks the classes on every covered character and the twins on
# random text.
#: (first, last) code points of the blocks the wide twins cover, besides ASCII
WIDE_BLOCKS = ((0x0080, 0x024F), (0x0370, 0x052F), (0x2000, 0x206F), (0x3000, 0x30FF),
               (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFE00, 0xFFEF))


def _contractions(c, suffixes: str) -> str:
    """`(?i:'s|'t|...)` spelled with explicit classes: each letter -> what regex's (?i) takes."""
    return "|".join("'" + "".join(f"[{c.fold(ch)}]" for ch in suffix) for suffix in suffixes.split())


def _llama3_twin(c, contractions: str, digits: str) -> str:
    """The wide twin of the llama3 family (qwen2: one digit at a time, `digits` "")."""
    return (rf"""(?:{contractions})|[^\r\n{c.L}{c.N}]?[{c.L}]+"""
            rf"""|[{c.N}]{digits}| ?[^{c.W}{c.L}{c.N}]+[\r\n]*|[{c.W}]*[\r\n]+"""
            rf"""|[{c.W}]+(?![^{c.W}])|[{c.W}]+""")


#: regex source -> a function of the classes (`wide_classes`) giving its wide `re` twin
_WIDE_TWINS = {
    _GPT2: lambda c: (rf"""'(?:[sdmt]|ll|ve|re)| ?[{c.L}]++| ?[{c.N}]++| ?[^{c.W}{c.L}{c.N}]++"""
                      rf"""|[{c.W}]++$|[{c.W}]+(?![^{c.W}])|[{c.W}]"""),
    _CL100K: lambda c: (rf"""(?:{_contractions(c, "s d m t ll ve re")})|[^\r\n{c.L}{c.N}]?+[{c.L}]++"""
                        rf"""|[{c.N}]{{1,3}}+| ?[^{c.W}{c.L}{c.N}]++[\r\n]*+|[{c.W}]++$|[{c.W}]*[\r\n]"""
                        rf"""|[{c.W}]+(?![^{c.W}])|[{c.W}]"""),
    _GPT2_ORIGINAL: lambda c: (rf"""'s|'t|'re|'ve|'m|'ll|'d| ?[{c.L}]+| ?[{c.N}]+| ?[^{c.W}{c.L}{c.N}]+"""
                               rf"""|[{c.W}]+(?![^{c.W}])|[{c.W}]+"""),
    _LLAMA3: lambda c: _llama3_twin(c, _contractions(c, "s t re ve m ll d"), "{1,3}"),
    _QWEN2: lambda c: _llama3_twin(c, _contractions(c, "s t re ve m ll d"), ""),
    _LLAMA3_CPP: lambda c: _llama3_twin(c, _CPP_CONTRACTIONS[3:-1], "{1,3}"),
    _QWEN2_CPP: lambda c: _llama3_twin(c, _CPP_CONTRACTIONS[3:-1], ""),
}


class WideClasses:
    r"""`regex`'s \p{L}, \p{N}, \s and (?i) letters over the covered characters, as `re` class contents."""

    def __init__(self) -> None:
        codes = [*range(128), *(c for first, last in WIDE_BLOCKS for c in range(first, last + 1))]
        self.chars = "".join(map(chr, codes))
        self.covered = _class_body(codes)
        self.L, self.N, self.W = (_class_body(map(ord, regex.findall(p, self.chars)))
                                  for p in (r"\p{L}", r"\p{N}", r"\s"))

    def fold(self, letter: str) -> str:
        """The covered characters `regex` matches for `letter` under (?i)."""
        return _class_body(map(ord, regex.findall(f"(?i){letter}", self.chars)))


def _class_body(codes) -> str:
    r"""Code points as the inside of a character class: runs as \uXXXX-\uYYYY ranges.

    >>> print(_class_body([97, 98, 99, 120]))
    \u0061-\u0063\u0078
    """
    out: list[str] = []
    for code in sorted(set(codes)):
        if out and code == out[-1][1] + 1:
            out[-1][1] = code
        else:
            out.append([code, code])
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in out)


@functools.lru_cache(maxsize=1)
def wide_classes() -> WideClasses:
    """The covered characters' classes (read from `regex` once, ~10 ms)."""
    return WideClasses()


@functools.lru_cache(maxsize=16)
def wide_pattern(source: str) -> tuple[re.Pattern, re.Pattern] | None:
    """(a `re` pattern that pre-tokenizes text of covered characters as `source` does, a pattern
    that finds any other character), or None.

    >>> twin, other = wide_pattern(PATTERNS["cl100k"])
    >>> twin.findall("Привет, 世界 I'M"), other.search("ok ☃")
    (['Привет', ',', ' 世界', ' I', "'M"], <re.Match object; span=(3, 4), match='☃'>)
    """
    make = _WIDE_TWINS.get(source)
    if make is None:
        return None
    classes = wide_classes()
    return re.compile(make(classes)), re.compile(f"[^{classes.covered}]")


# The cut happens where a space follows a character for which str.isspace() is false. That
# is a superset of `regex`'s \s (it adds U+001C..U+001F), so it only ever cuts less often.
_SPACE_CUT = re.compile(r"(?<=\S)(?= )")  # the reference; chunk_at_spaces finds the chunks instead
# A chunk: any first character, then non-spaces, and runs of spaces only where whitespace
# precedes them (`re`'s \s is str.isspace(), as the cut needs). Possessive: no backtracking.
_CHUNK = re.compile(r"(?s).[^ ]*+(?:(?<=\s) ++[^ ]*+)*+")


def resolve_name(name_or_regex: str) -> str:
    """The regex source for a pattern name, or the argument itself if it is not a name."""
    key = ALIASES.get(name_or_regex, name_or_regex)
    return PATTERNS.get(key, name_or_regex)


def pattern_name(source: str) -> str | None:
    """The name of a known regex source, or None for a custom one."""
    for name, known in PATTERNS.items():
        if known == source:
            return name
    return "gpt2" if source == _GPT2_ORIGINAL else None


@functools.lru_cache(maxsize=64)
def compile_pattern(source: str) -> regex.Pattern:
    """Compile a pre-tokenizer regex (cached); ValueError if it does not compile."""
    try:
        return regex.compile(source)
    except regex.error as e:
        raise ValueError(f"invalid pre-tokenizer regex {source!r}: {e}") from None


def get_pattern(name_or_regex: str) -> regex.Pattern:
    """A compiled pre-tokenizer pattern by name (`gpt2`, `cl100k`, ...) or raw regex.

    >>> get_pattern("gpt2").findall("Hello world's")
    ['Hello', ' world', "'s"]
    """
    return compile_pattern(resolve_name(name_or_regex))


@functools.lru_cache(maxsize=16)
def ascii_pattern(source: str) -> re.Pattern | None:
    """A `re` pattern that pre-tokenizes ASCII-only text as `source` does, or None.

    >>> ascii_pattern(PATTERNS["gpt2"]).findall("I'll  go")
    ['I', "'ll", ' ', ' go']
    """
    ascii_source = ASCII_PATTERNS.get(source)
    return None if ascii_source is None else re.compile(ascii_source)


def is_space_safe(pattern: regex.Pattern | str) -> bool:
    """Whether `chunk_at_spaces` is exact for this pattern."""
    source = pattern if isinstance(pattern, str) else pattern.pattern
    return source in SPACE_SAFE


def chunk_at_spaces(text: str) -> list[str]:
    """Cut text before every space that follows a non-space char (see module docstring).

    Equal to ``re.split(r"(?<=\\S)(?= )", text)``, done as one `re` findall of the chunks
    themselves (~25% faster than the str.replace/split passes it replaced, and than the split).

    >>> chunk_at_spaces("a  b c\\n d")
    ['a', '  b', ' c\\n d']
    """
    return _CHUNK.findall(text) if text else [""]


def split_pieces(pattern: regex.Pattern, text: str) -> list[tuple[int, int]]:
    """Character spans of the pre-tokens: the matches, and any text between them kept as its own piece.

    Keeping the gaps is HF's ``Split(behavior="Isolated")``; the named patterns match every
    character, so for them this equals tiktoken's ``findall``.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    for m in pattern.finditer(text):
        start, end = m.span()
        if start > pos:
            spans.append((pos, start))
        if end > start:
            spans.append((start, end))
        pos = end
    if pos < len(text):
        spans.append((pos, len(text)))
    return spans
