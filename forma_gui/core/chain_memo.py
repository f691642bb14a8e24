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
        return self._n - self._dead

    def clear(self) -> None:
        """Forget every chain (the tokens were encoded anew)."""
        # per slot: first and last token (first -1: dropped), the start score's bits, the
        # number of scores; slots are compacted when half of them are dropped
        self._cols = np.zeros((4, 64), dtype=np.int64)
        self._chains: list[Chain | None] = []
        self._n = self._dead = self._values = 0

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
        return None if i is None else (int(self._cols[0, i]), int(self._cols[1, i]))

    def put(self, first: int, last: int, start: float, chain: Chain) -> None:
        """Keep the chain over tokens first..last (its scores before first+1..last-1)."""
        size = len(chain.values)
        if last - first > MAX_CHAIN or size != max(0, last - first - 1):
            return
        if self._values + size > self.max_values:
            self._drop_oldest(self._values + size - self.max_values)
        if self._n == self._cols.shape[1]:
            self._compact(grow=True)
        self._cols[:, self._n] = (first, last, _bits(start), size)
        self._chains.append(chain)
        self._n += 1
        self._values += size

    def splice(self, i0: int, j0: int, added: int) -> None:
        """Tokens i0..j0 were replaced by `added` tokens: drop the chains that touch them (or
        end just before them), move the ones after them."""
        if self._n == self._dead:
            return
        first, last = self._cols[0, :self._n], self._cols[1, :self._n]
        self._drop(np.flatnonzero((first <= j0) & (last >= i0 - 1) & (first >= 0)))
        delta = added - (j0 - i0)
        if delta:
            first, last = self._cols[0, :self._n], self._cols[1, :self._n]  # (compacted, maybe)
            after = first > j0
            first[after] += delta
            last[after] += delta

    # ---- inside ---------------------------------------------------------------------------
    def _find(self, first: int, start: float) -> int | None:
        bits = _bits(start)
        for i in np.flatnonzero(self._cols[0, :self._n] == first).tolist():
            if self._cols[2, i] == bits:
                return i
        return None

    def _drop(self, slots: np.ndarray) -> None:
        """Drop the chains in these live slots."""
        if len(slots):
            self._values -= int(self._cols[3, slots].sum())
            self._cols[0, slots] = -1
            for i in slots.tolist():
                self._chains[i] = None
            self._dead += len(slots)
            if 2 * self._dead > self._n:
                self._compact()

    def _compact(self, grow: bool = False) -> None:
        """Slots without the dropped chains (with room for as many again when growing)."""
        live = np.flatnonzero(self._cols[0, :self._n] >= 0)
        cols = np.zeros((4, max(64, 2 * len(live) if grow else self._cols.shape[1])), dtype=np.int64)
        cols[:, :len(live)] = self._cols[:, live]
        self._cols = cols
        self._chains = [self._chains[i] for i in live.tolist()]
        self._n, self._dead = len(live), 0

    def _drop_oldest(self, values: int) -> None:
        """Drop the oldest chains holding at least `values` scores (and a quarter more)."""
        live = np.flatnonzero(self._cols[0, :self._n] >= 0)
        held = np.cumsum(self._cols[3, live])
        self._drop(live[:int(np.searchsorted(held, values + self.max_values // 4)) + 1])
