"""Split text on added/special tokens before ordinary encoding: the one place this is done.

Semantics are HF tokenizers' (``AddedVocabulary::extract_and_normalize``):

1. Tokens with ``normalized=False`` are matched on the raw text; then tokens with
   ``normalized=True`` are matched on each remaining piece after the tokenizer's normalizer
   (``tokenizer.normalize(text)`` if it has one, else none) has run on that piece.
2. Matching is leftmost-longest and non-overlapping (HF uses an Aho-Corasick automaton in
   LeftmostLongest mode; an alternation of the literals, longest first, is the same thing).
3. ``single_word``: a match touching a word character (``\\w``) on either side is dropped, and
   the scan goes on after it. ``lstrip``/``rstrip``: the match swallows the whitespace
   (``\\s``) before/after it, never reaching back into the previous match.

tiktoken's special tokens carry no flags, so the same function serves
``encode(text, allowed_special="all")``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import regex

from forma_gui.core.tokenizer import AddedToken

if TYPE_CHECKING:  # pragma: no cover
    from forma_gui.core.tokenizer import Tokenizer

Split = list[tuple[str, "AddedToken | None"]]

_WORD_END = regex.compile(r"\w\Z")
_WORD_START = regex.compile(r"\w")
_SPACE_END = regex.compile(r"\s*\Z")
_SPACE_START = regex.compile(r"\s*")


class _Matcher:
    """One compiled alternation per group of added tokens (raw-matched and normalized)."""

    def __init__(self, tokens: tuple[AddedToken, ...], normalize: Callable[[str], str]) -> None:
        self.normalize = normalize
        self.raw = _compile([t for t in tokens if not t.normalized], _identity)
        self.normed = _compile([t for t in tokens if t.normalized], normalize)


def _identity(text: str) -> str:
    return text


def _compile(tokens: list[AddedToken], spell):
    """(pattern, {spelling: token}) matching the tokens longest first; None if there are none."""
    by_text: dict[str, AddedToken] = {}
    for token in tokens:
        text = spell(token.content)
        if text:
            by_text.setdefault(text, token)
    if not by_text:
        return None
    ordered = sorted(by_text, key=len, reverse=True)
    return regex.compile("|".join(map(regex.escape, ordered))), by_text


def split_added(tokenizer: "Tokenizer", text: str, tokens: tuple[AddedToken, ...] | None = None) -> Split:
    """Text -> pieces, each either ordinary text (token None) or one match of an added token
    of `tokens` (default: all the tokenizer's, `matched_added(True)`).

    The pieces concatenate to `text` (normalized-matched pieces are normalized text).

    >>> from forma_gui.core.tokenizer import AddedToken as T
    >>> class Tok: added_tokens = [T("<s>", 1), T("<mask>", 2, lstrip=True)]; _special_splitter = None
    >>> [(s, t and t.id) for s, t in split_added(Tok(), "a <mask><s>b")]
    [('a', None), (' <mask>', 2), ('<s>', 1), ('b', None)]
    """
    matcher = _matcher_for(tokenizer, tuple(tokenizer.added_tokens) if tokens is None else tokens)
    pieces = _find(text, matcher.raw)
    if matcher.normed is None:
        return pieces
    out: Split = []
    for piece, token in pieces:
        out.extend([(piece, token)] if token is not None else _find(matcher.normalize(piece), matcher.normed))
    return out


def _matcher_for(tokenizer: "Tokenizer", key: tuple[AddedToken, ...]) -> _Matcher:
    """The tokenizer's cached matcher for these tokens (one per set: all, or the non-special
    ones), rebuilt if its added tokens changed."""
    cache = getattr(tokenizer, "_special_splitter", None)
    if not isinstance(cache, dict):
        cache = tokenizer._special_splitter = {}
    matcher = cache.get(key)
    if matcher is None:
        if len(cache) >= 4:  # (the added tokens changed since: older sets are not asked for)
            cache.clear()
        matcher = cache[key] = _Matcher(key, getattr(tokenizer, "normalize", None) or _identity)
    return matcher


def _find(text: str, compiled) -> Split:
    """HF's find_matches: leftmost-longest matches with the single_word/lstrip/rstrip rules."""
    if compiled is None or not text:
        return [(text, None)] if text else []
    pattern, by_text = compiled
    out: Split = []
    done = 0  # end of the previous piece
    for m in pattern.finditer(text):
        token = by_text[m.group()]
        start, stop = m.span()
        if token.single_word and not _is_single_word(text, start, stop):
            continue
        if token.lstrip:
            start = _SPACE_END.search(text, done, start).start()
        if token.rstrip:
            stop = _SPACE_START.match(text, stop).end()
        start = max(start, done)
        if start > done:
            out.append((text[done:start], None))
        out.append((text[start:stop], token))
        done = stop
    if done < len(text):
        out.append((text[done:], None))
    return out


def _is_single_word(text: str, start: int, stop: int) -> bool:
    """No word character touches the match on either side."""
    before_ok = start == 0 or not _WORD_END.search(text, 0, start)
    after_ok = stop == len(text) or not _WORD_START.match(text, stop)
    return before_ok and after_ok
