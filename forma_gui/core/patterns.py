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

#: regex sources for which cutting at "non-space char, then space" is provably exact
SPACE_SAFE: set[str] = {_GPT2, _CL100K, _O200K, _LLAMA3, _QWEN2, _GPT2_ORIGINAL}

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
