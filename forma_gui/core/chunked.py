"""Encode a huge text slice by slice, so that no single call holds the GIL for long.

A worker thread that makes one long C-level call (a regex pass over 10 MB, joining five million
byte strings, a numpy pass over them) holds Python's global lock the whole time, and the GUI
thread, which needs the lock for every Python slot, freezes as long. `encode_steps` is a
generator that encodes one slice of about `SLICE_CHARS` characters per step and yields between
steps, so a worker can report progress and stop when a newer edit supersedes the text; it
returns the `IncrementalEncoder` that `IncrementalEncoder(tokenizer, text, special=...)` would
build, with the same ids, spans and flags (tests/core/test_chunked.py checks it).

Why the slices add up to the one-shot encode (byte-level BPE, one pre-tokenizer from
incremental.VERIFIED, which `supports_edits` guarantees):

* ``encode(t)`` is the concatenated `encode_pretoken` of the pre-tokens of ``prepare(t)``
  (bytelevel's contract). A *clean* text, one without lone surrogates and normalized under
  each of the tokenizer's forms, is left alone by `prepare` except for the prefix space.
* Slices end at a cut of `incremental.CUT`: a place that is a pre-token boundary whatever the
  text around it, and before which the pre-tokens depend only on the text up to one character
  past it. So a slice ``text[a:b]`` is pre-tokenized as ``text[a:b + 1]`` with its last
  pre-token (the character at b, alone) dropped, exactly as the incremental encoder does.
* Where the tokenizer normalizes, every slice ends before an ASCII character, which no
  normalization form ever combines with what precedes it: ``normalize(x + y)`` is
  ``normalize(x) + normalize(y)`` when y starts with one, so slices that are each normalized
  make a normalized text.
* With special=True the added tokens (no lstrip/rstrip/single_word/normalized flags, again
  guaranteed by `supports_edits`) are matched leftmost-longest in windows that overlap by the
  longest token, which finds the matches a single scan would; the ordinary text between them
  is encoded as above, each segment on its own as `Tokenizer.encode` does.

Where slicing is not provably right (a text that is not clean, token bytes that are not the
text's bytes, a tokenizer without edit support) the whole text is encoded in one call.
"""
from __future__ import annotations

import unicodedata
from array import array
from typing import TYPE_CHECKING, Generator, Iterator, NamedTuple

import regex

from forma_gui.core.incremental import (CUT, IncrementalEncoder, _count_barriers, _identity_spans,
                                       supports_edits)
from forma_gui.core.slices import sliced_concat
from forma_gui.core.special import split_added

if TYPE_CHECKING:  # pragma: no cover
    from forma_gui.core.tokenizer import Tokenizer

#: characters encoded per step: a few ms for byte-level BPE on one core, and no C call in it
#: holds the GIL for long (at 64k, 10-15 ms calls made the window's turns wait as long)
SLICE_CHARS = 1 << 14
#: a cut before an ASCII character, for tokenizers that normalize
CUT_BEFORE_ASCII = regex.compile(f"(?:{CUT.pattern})(?=[\\x00-\\x7f])")
_NOT_ASCII = regex.compile("[^\\x00-\\x7f]")
#: first window (characters) searched for a cut; doubled until one is found
CUT_WINDOW = 256

Steps = Generator[tuple[int, int], None, IncrementalEncoder]


class Columns(NamedTuple):
    """Token columns in the IncrementalEncoder's layout, growing slice by slice."""

    ids: array
    starts: array
    ends: array
    flags: bytearray


class NotSliceable(Exception):
    """The text cannot be sliced exactly (not clean, or bytes do not line up): encode it whole."""


def encode_steps(tokenizer: "Tokenizer", text: str, *, special: bool = False,
                 slice_chars: int = SLICE_CHARS) -> Steps:
    """Yield (characters done, total) after each slice; return the text's IncrementalEncoder.

    >>> encoder = run(encode_steps(tokenizer, huge_text))  # doctest: +SKIP
    >>> list(encoder.ids) == tokenizer.encode(huge_text)  # doctest: +SKIP
    True
    """
    if len(text) <= slice_chars or not supports_edits(tokenizer, special):
        return IncrementalEncoder(tokenizer, text, special=special)
    slicer = _Slicer(tokenizer, text, special, slice_chars)
    try:
        yield from slicer.run()
    except NotSliceable:
        return IncrementalEncoder(tokenizer, text, special=special)
    encoder = IncrementalEncoder(tokenizer, "", special=special)
    encoder.adopt(text, *slicer.columns, slicer.nbytes, matches=slicer.matches)
    return encoder


def encode_in_slices(tokenizer: "Tokenizer", text: str, *, special: bool = False,
                     slice_chars: int = SLICE_CHARS) -> IncrementalEncoder:
    """`encode_steps` run to the end (for callers that need no progress)."""
    return run(encode_steps(tokenizer, text, special=special, slice_chars=slice_chars))


def run(steps: Steps) -> IncrementalEncoder:
    """Drive a generator of steps to its return value."""
    try:
        while True:
            next(steps)
    except StopIteration as stop:
        return stop.value


class _Slicer:
    """The state of one sliced encode: where it is, and the columns so far."""

    def __init__(self, tokenizer: "Tokenizer", text: str, special: bool, slice_chars: int) -> None:
        self.tokenizer, self.text, self.size = tokenizer, text, slice_chars
        self.forms = tuple(getattr(tokenizer, "_forms", ()))
        self.cut = CUT_BEFORE_ASCII if self.forms else CUT
        self.offset = int(bool(getattr(tokenizer, "add_prefix_space", False)) and not text.startswith(" "))
        self.special_ids = frozenset(tokenizer.special_ids)
        self.columns = Columns(array("i"), array("i"), array("i"), bytearray())
        self._parts: tuple[list, ...] = ([], [], [], [])  # each column's slices, joined at the end
        self.nbytes = 0
        self.matches: list[tuple[int, int]] = []
        self.added = tokenizer.matched_added(special)
        self.special = bool(self.added)  # (added tokens to cut out first)

    def run(self) -> Generator[tuple[int, int], None, None]:
        """Encode the whole text; spans are worked out (and progress yielded) per region of
        about `size` characters, however small the segments between added tokens are."""
        total, region, ids = len(self.text), 0, []
        for end, piece_ids in self._pieces():
            ids += piece_ids
            if end - region >= self.size or end == total:
                self._append(region, end, ids)
                region, ids = end, []
                yield end, total
        # (joined once, not grown slice by slice: see sliced_concat)
        self.columns = Columns(*(sliced_concat(parts, empty) for parts, empty in zip(self._parts, self.columns)))

    def _pieces(self) -> Iterator[tuple[int, list[int]]]:
        """(end, ids) of consecutive pieces of the text: slices of ordinary text, added tokens."""
        for start, end, token_id in self._segments():
            if token_id is None:
                yield from self._ordinary(start, end)
            else:
                self.matches.append((start, end))
                yield end, [token_id]

    def _segments(self) -> Iterator[tuple[int, int, int | None]]:
        """(start, end, None) for ordinary text and (start, end, id) for each added-token match."""
        if not self.special:
            yield 0, len(self.text), None
            return
        pos = 0
        for start, end, token_id in _added_matches(self.tokenizer, self.text, self.size, self.added):
            self._check_seam(start)
            self._check_seam(end)
            if start > pos:
                yield pos, start, None
            yield start, end, token_id
            pos = end
        if pos < len(self.text):
            yield pos, len(self.text), None

    def _check_seam(self, p: int) -> None:
        """Where the text normalizes, a seam between segments must come before ASCII too."""
        if self.forms and 0 < p < len(self.text) and not self.text[p].isascii():
            raise NotSliceable()

    def _ordinary(self, lo: int, hi: int) -> Iterator[tuple[int, list[int]]]:
        """(end, ids) of the slices of ordinary text[lo:hi]; hi ends the segment, so the last
        slice is encoded without lookahead."""
        a = lo
        while a < hi:
            b = _next_cut(self.cut, self.text, a + self.size, hi) if a + self.size < hi else None
            end = hi if b is None else b
            yield end, self._slice_ids(a, end, context=b is not None)
            a = end

    def _slice_ids(self, a: int, b: int, context: bool) -> list[int]:
        """The ids of text[a:b]; with `context`, b is a cut and text[b] is only lookahead."""
        text, tokenizer = self.text, self.tokenizer
        prefix = " " * self.offset if a == 0 else ""
        x = text[a:b + context]
        if tokenizer.prepare(x) == prefix + x:  # prepare changes nothing: the fast whole encode
            ids = tokenizer.encode(x)
            if context:
                del ids[len(ids) - len(tokenizer.encode_pretoken(text[b])):]
            return ids
        # inside an add_prefix_space text, or a slice that is not clean (the region check
        # then gives up): pre-tokenize it as it stands
        x = prefix + x
        spans = tokenizer.pre_tokenize(x)
        return [i for s, e in spans[:len(spans) - context] for i in tokenizer.encode_pretoken(x[s:e])]

    def _check_clean(self, piece: str) -> None:
        """Raise NotSliceable unless `piece` has no lone surrogate, no character the tokenizer's
        `count_undefined` counts (IncrementalEncoder re-encodes such a text whole) and is normalized."""
        if piece.isascii():
            return
        if _count_barriers(piece, getattr(self.tokenizer, "count_undefined", None)) or \
                not all(unicodedata.is_normalized(f, piece) for f in self.forms):
            raise NotSliceable()

    def _append(self, a: int, b: int, ids: list[int]) -> None:
        """Append the tokens `ids` of text[a:b] (after the prefix space if a is 0), with spans."""
        piece = self.text[a:b]
        self._check_clean(piece)
        offset = self.offset if a == 0 else 0
        data = self.tokenizer.decode_bytes(ids)
        if data != (" " * offset + piece).encode("utf-8"):
            raise NotSliceable()  # a byte without a token: only the whole-text alignment is exact
        packed = array("i", ids)
        starts, ends, flags = _identity_spans(self.tokenizer, data, packed, offset, self.special_ids)
        for parts, part in zip(self._parts, (packed, _shifted(starts, a), _shifted(ends, a), flags)):
            parts.append(part)
        self.nbytes += len(data)


def _shifted(column: array, base: int) -> array:
    """column + base, at C speed."""
    if not base or not len(column):
        return column
    import numpy as np

    return array("i", (np.frombuffer(column, dtype=np.int32) + base).tobytes())


def _next_cut(pattern: regex.Pattern, text: str, lo: int, hi: int) -> int | None:
    """The first cut q with lo < q < hi (windows doubling from lo), or None.

    A cut needs both neighbours in the window, so it is found strictly inside it. The regex
    releases the GIL (concurrent=True): a long stretch without a cut is searched without
    stalling other threads.
    """
    width = CUT_WINDOW
    while True:
        b = min(hi, lo + width)
        m = pattern.search(text[lo:b], concurrent=True)
        if m is not None:
            return lo + m.start()
        if b == hi:
            return None
        width *= 2


def _added_matches(tokenizer: "Tokenizer", text: str, window: int, tokens: tuple):
    """(start, end, id) of each added-token match, as one leftmost-longest scan finds them.

    Each window is scanned `longest` characters past its end, so every match starting in it
    is seen whole; matches starting past the end are left to the next window, which starts
    at the window's end or after the last match, whichever is later.
    """
    longest = max((len(t.content) for t in tokens), default=0)
    pos, n = 0, len(text)
    while pos < n:
        end = min(n, pos + window)
        at, resume = pos, end
        for piece, token in split_added(tokenizer, text[pos:end + longest], tokens):
            if at >= end:
                break
            if token is not None:
                yield at, at + len(piece), token.id
                resume = max(resume, at + len(piece))
            at += len(piece)
        pos = resume
