"""Rank-based BPE merging over the bytes of one pre-token.

At every step the adjacent pair with the lowest merge rank is merged; when the lowest rank
occurs at several positions (``"eee"`` with the merge ``e e``) the leftmost one wins. This is
tiktoken's and HF tokenizers' rule.

Two ways to say which pairs merge:

* tiktoken ranks (`dict[bytes, int]`): a pair merges if the concatenated bytes have a rank;
  that rank is both the merge priority and the id of the result.
* vocab.json + merges: the pair ``(left, right)`` must be listed; its rank is the line index in
  the merges list, the result's id comes from the vocabulary. Different splits of the same
  bytes can have different ranks, so these merges are keyed by the pair of ids, not by bytes.

`bpe_reference` is the slow, readable definition. `merge_ranked` and `merge_pairs` are the fast
paths (a C-level ``min``/``index`` over a list of pair ranks, updated in place after each
merge, as tiktoken's Rust core does); `merge_ranked_long`/`merge_pairs_long` switch to a heap
for long pieces, where the list scans would be quadratic. The tests hold all of them equal.
"""
from __future__ import annotations

import heapq
from itertools import repeat
from dataclasses import dataclass
from typing import Callable, Mapping

#: larger than any rank (or packed rank) that can occur
NO_RANK = 1 << 62
#: bytes -> the one-byte bytes object, without allocating
SINGLE_BYTES = [bytes([b]) for b in range(256)]
#: pieces at least this long use the heap variants
LONG_PIECE = 192

PairRank = Callable[[bytes, bytes], "int | None"]


@dataclass(frozen=True, slots=True)
class Step:
    """One merge of `bpe_reference`: `left + right` at symbol `position`, with the list after it."""

    left: bytes
    right: bytes
    rank: int
    position: int
    symbols: tuple[bytes, ...]

    @property
    def result(self) -> bytes:
        return self.left + self.right


# ---- the reference ---------------------------------------------------------------------

def bpe_steps(piece: bytes, pair_rank: PairRank) -> list[Step]:
    """Every merge BPE performs on `piece`, in order (the slow, readable definition).

    >>> ranks = {b"aa": 0, b"ab": 1, b"aaab": 2}
    >>> [s.result for s in bpe_steps(b"aaab", lambda l, r: ranks.get(l + r))]
    [b'aa', b'ab', b'aaab']
    """
    symbols = [piece[i:i + 1] for i in range(len(piece))]
    steps: list[Step] = []
    while len(symbols) > 1:
        best: tuple[int, int] | None = None
        for i in range(len(symbols) - 1):
            rank = pair_rank(symbols[i], symbols[i + 1])
            if rank is not None and (best is None or rank < best[0]):  # strict: leftmost wins
                best = (rank, i)
        if best is None:
            break
        rank, i = best
        left, right = symbols[i], symbols[i + 1]
        symbols[i:i + 2] = [left + right]
        steps.append(Step(left, right, rank, i, tuple(symbols)))
    return steps


def bpe_reference(piece: bytes, pair_rank: PairRank) -> list[bytes]:
    """The symbols BPE leaves of `piece` (slow reference).

    >>> bpe_reference(b"eee", lambda l, r: 0 if l + r == b"ee" else None)
    [b'ee', b'e']
    """
    if not piece:
        return []
    steps = bpe_steps(piece, pair_rank)
    return list(steps[-1].symbols) if steps else [piece[i:i + 1] for i in range(len(piece))]


def ranked_pair_rank(ranks: Mapping[bytes, int]) -> PairRank:
    """The pair-rank function of a tiktoken rank table: the rank of the concatenation."""
    get = ranks.get
    return lambda left, right: get(left + right)


def listed_pair_rank(merges: Mapping[tuple[bytes, bytes], int]) -> PairRank:
    """The pair-rank function of an explicit merges list: the rank of the listed pair."""
    get = merges.get
    return lambda left, right: get((left, right))


# ---- fast path: tiktoken ranks ------------------------------------------------------------

def merge_ranked(piece: bytes, ranks: Mapping[bytes, int]) -> list[bytes]:
    """BPE with tiktoken ranks -> the symbols (byte strings) left at the end.

    >>> merge_ranked(b"eee", {b"e": 0, b"ee": 1})
    [b'ee', b'e']
    """
    if len(piece) >= LONG_PIECE:
        return merge_ranked_long(piece, ranks)
    get = ranks.get
    symbols = list(map(SINGLE_BYTES.__getitem__, piece))
    pair = list(map(get, map(bytes.__add__, symbols, symbols[1:]), repeat(NO_RANK)))
    pair.append(NO_RANK)  # sentinel: pair[i] exists for the last symbol too
    n = len(symbols)
    while n > 1:
        best = min(pair)
        if best == NO_RANK:
            break
        i = pair.index(best)  # leftmost occurrence of the lowest rank
        merged = symbols[i] + symbols[i + 1]
        symbols[i] = merged
        del symbols[i + 1]
        del pair[i]
        n -= 1
        # refresh the pairs of the merged symbol with its neighbours
        if i < n - 1:
            pair[i] = get(merged + symbols[i + 1], NO_RANK)
        if i:
            pair[i - 1] = get(symbols[i - 1] + merged, NO_RANK)
    return symbols


def merge_ranked_long(piece: bytes, ranks: Mapping[bytes, int]) -> list[bytes]:
    """`merge_ranked` in O(n log n): a heap of candidate pairs over a linked list of symbols."""
    get = ranks.get

    def rank_of(start: int, mid: int, end: int) -> int:
        return get(piece[start:end], NO_RANK)

    bounds = _heap_merge(len(piece), rank_of, None)
    return [piece[s:e] for s, e in zip(bounds, bounds[1:])]


# ---- fast path: explicit merges in id space -------------------------------------------------

def merge_pairs(symbols: list[int], merges: Mapping[int, int], shift: int) -> list[int]:
    """BPE over token ids with listed merges; `symbols` (one id per byte) is merged in place.

    `merges` maps ``left << shift | right`` to ``rank << shift | merged_id``, so the lowest
    packed value is the lowest rank and the merged id is its low bits.

    >>> merge_pairs([5, 5, 5], {5 << 4 | 5: 0 << 4 | 9}, 4)  # e=5, ee=9
    [9, 5]
    """
    if len(symbols) >= LONG_PIECE:
        return merge_pairs_long(symbols, merges, shift)
    get = merges.get
    mask = (1 << shift) - 1
    pair = [get(a << shift | b, NO_RANK) for a, b in zip(symbols, symbols[1:])]
    pair.append(NO_RANK)
    n = len(symbols)
    while n > 1:
        best = min(pair)
        if best == NO_RANK:
            break
        i = pair.index(best)
        merged = symbols[i] = best & mask
        del symbols[i + 1]
        del pair[i]
        n -= 1
        if i < n - 1:
            pair[i] = get(merged << shift | symbols[i + 1], NO_RANK)
        if i:
            pair[i - 1] = get(symbols[i - 1] << shift | merged, NO_RANK)
    return symbols


def merge_pairs_long(symbols: list[int], merges: Mapping[int, int], shift: int) -> list[int]:
    """`merge_pairs` in O(n log n) for long pieces."""
    get = merges.get
    mask = (1 << shift) - 1
    ids = list(symbols)  # ids[start] is the id of the symbol that starts at byte `start`

    def rank_of(start: int, mid: int, end: int) -> int:
        return get(ids[start] << shift | ids[mid], NO_RANK)

    def merged(start: int, packed: int) -> None:
        ids[start] = packed & mask

    starts = _heap_merge(len(ids), rank_of, merged)
    return [ids[s] for s in starts[:-1]]


def _heap_merge(n: int, rank_of: Callable[[int, int, int], int],
                merged: Callable[[int, int], None] | None) -> list[int]:
    """Lowest-rank-then-leftmost merging of n unit symbols; returns symbol boundaries.

    Symbols are byte ranges in a linked list (`nxt[start]` is the end of the symbol starting
    at `start`). Heap entries are (rank, left start, mid, end); an entry is stale unless both
    symbols still have exactly those bounds. Ties pop in start order, so the leftmost wins.
    """
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    alive = [True] * n
    heap = [(r, i, i + 1, i + 2) for i in range(n - 1) if (r := rank_of(i, i + 1, i + 2)) != NO_RANK]
    heapq.heapify(heap)
    while heap:
        rank, start, mid, end = heapq.heappop(heap)
        if not alive[start] or nxt[start] != mid or not alive[mid] or nxt[mid] != end:
            continue
        alive[mid] = False
        nxt[start] = end
        if end < n:
            prv[end] = start
        if merged is not None:
            merged(start, rank)
        if start > 0:
            left = prv[start]
            if (r := rank_of(left, start, end)) != NO_RANK:
                heapq.heappush(heap, (r, left, start, end))
        if end < n:
            if (r := rank_of(start, end, nxt[end])) != NO_RANK:
                heapq.heappush(heap, (r, start, end, nxt[end]))
    bounds = [0]
    while bounds[-1] < n:
        bounds.append(nxt[bounds[-1]])
    return bounds
