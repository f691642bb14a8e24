"""A unigram walk's chains from one score reset to the next, kept for the edits after.

`IncrementalEncoder._walk` carries a unigram `.model`'s float32 path scores on after an edit
until they meet the old ones, which happens only where both are reset at the same place
(core.incremental). After the new scores are reset inside a word, everything up to their next
reset depends on that word's end score alone (`UnigramEncoder.resegment`: the values after a
reset are the same for every start that resets at the same step) and on the tokens from the
word after it: the chain is a function of (that token, that score). The new scores are reset
at one of a few places near each old reset, so chains repeat, most of all while a user types
at one place: on the bench's 1 MB document 25% of the chains of 1000 random edits were
replayed, 59% when the edits came 20 at a time within a few characters (README).

A chain is kept as its first token, its last (the token after the next reset, where it hands
on), the score at its start (by its bits: +0 and -0 start different chains), the path scores
it leaves before its tokens (the score column `before`, dense: the values between word
starts are never read), the score it hands on, and what the walk counted on it. A splice of
the tokens drops the chains whose tokens it touches and moves the later ones with it.
"""
from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from typing import NamedTuple

import numpy as np

#: the most path scores kept, over all chains (float32: 16 MB); past it the oldest go
MAX_VALUES = 1 << 22
#: the longest chain kept (tokens)
MAX_CHAIN = 1 << 16
_BITS = struct.Struct("<d")


class Chain(NamedTuple):
    """What a walk did from a reset to the next (tokens first..last)."""

    values: np.ndarray   # float32 path scores before tokens first+1 .. last-1
    end_score: float     # the path score before token `last`
    resegmented: int     # words segmented again on the way (`_word_again`)
    window: int          # the walk's window after it


def _bits(score: float) -> int:
    return struct.unpack("<q", _BITS.pack(score))[0]


class ChainMemo:
    """Chains by (first token, start score), kept current through splices.

    >>> memo = ChainMemo()
    >>> memo.put(10, 14, -3.5, Chain(np.zeros(3, np.float32), -2.0, 1, 512))
    >>> memo.get(10, -3.5).end_score, memo.get(10, 3.5), memo.get(11, -3.5)
    (-2.0, None, None)
    >>> memo.splice(2, 4, 5)   # tokens 2..3 become 5 tokens: the chain moves 3 later
    >>> memo.span(13, -3.5)
    (13, 17)
    >>> memo.splice(16, 16, 1)  # a token inserted inside the chain: it is gone
    >>> memo.get(13, -3.5) is None
    True
    """

    def __init__(self, max_values: int = MAX_VALUES) -> None:
        self.max_values = max_values
        self.hits = self.misses = 0
        self.clear()

    def __len__(self) -> int:
        return len(self._first)

    def clear(self) -> None:
        """Forget every chain (the tokens were encoded anew)."""
        # per chain, ordered by first token: its first and last token (int64 arrays: bisected
        # as they are, moved by a splice through a numpy view), the start score's bits, its
        # number of scores, when it was kept (the oldest go first past the limit), the chain
        self._first, self._last = array("q"), array("q")
        self._bits: list[int] = []
        self._size: list[int] = []
        self._stamp: list[int] = []
        self._chains: list[Chain] = []
        self._values = self._stamps = 0
        self._longest = 0  # tokens: no chain kept is longer (a splice looks this far back)

    def get(self, first: int, start: float) -> Chain | None:
        """The chain from token `first` with path score `start` before it, if kept."""
        i = self._find(first, start)
        if i is None:
            self.misses += 1
            return None
        self.hits += 1
        return self._chains[i]

    def span(self, first: int, start: float) -> tuple[int, int] | None:
        """(first, last) of the chain kept from `first` with `start`, or None."""
        i = self._find(first, start)
        return None if i is None else (self._first[i], self._last[i])

    def put(self, first: int, last: int, start: float, chain: Chain) -> None:
        """Keep the chain over tokens first..last (its scores before first+1..last-1)."""
        size = len(chain.values)
        if last - first > MAX_CHAIN or size != max(0, last - first - 1):
            return
        if self._values + size > self.max_values:
            self._drop_oldest(self._values + size - self.max_values)
        i = bisect_right(self._first, first)
        for column, value in zip(self._columns(), (first, last, _bits(start), size, self._stamps, chain)):
            column.insert(i, value)
        self._values += size
        self._stamps += 1
        self._longest = max(self._longest, last - first)

    def splice(self, i0: int, j0: int, added: int) -> None:
        """Tokens i0..j0 were replaced by `added` tokens: drop the chains that touch them (or
        end just before them), move the ones after them."""
        firsts, lasts = self._first, self._last
        lo = bisect_left(firsts, i0 - 1 - self._longest)
        hi = bisect_right(firsts, j0)  # (chains lo..hi start early enough to touch them)
        gone = [i for i in range(lo, hi) if lasts[i] >= i0 - 1]
        for i in reversed(gone):
            self._values -= self._size[i]
            for column in self._columns():
                del column[i]
        hi -= len(gone)
        delta = added - (j0 - i0)
        if delta and hi < len(firsts):
            for column in (firsts, lasts):
                view = np.frombuffer(column, dtype=np.int64)
                view[hi:] += delta
                del view  # (an array cannot change its size while a view of it exists)

    # ---- inside ---------------------------------------------------------------------------
    def _columns(self) -> tuple:
        return self._first, self._last, self._bits, self._size, self._stamp, self._chains

    def _find(self, first: int, start: float) -> int | None:
        firsts, bits = self._first, _bits(start)
        i = bisect_left(firsts, first)
        while i < len(firsts) and firsts[i] == first:
            if self._bits[i] == bits:
                return i
            i += 1
        return None

    def _drop_oldest(self, values: int) -> None:
        """Drop the oldest chains holding at least `values` scores (and a quarter more)."""
        goal, dropped, gone = values + self.max_values // 4, 0, set()
        for _, i in sorted(zip(self._stamp, range(len(self._stamp)))):
            if dropped >= goal:
                break
            dropped += self._size[i]
            gone.add(i)
        keep = [i for i in range(len(self._first)) if i not in gone]
        for column in self._columns():
            column[:] = type(column)("q", [column[i] for i in keep]) if isinstance(column, array) \
                else [column[i] for i in keep]
        self._values -= dropped
