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
from typing import Callable, Mapping, Sequence

from forma_gui.core.slices import pause

#: larger than any rank (or packed rank) that can occur
NO_RANK = 1 << 62
#: bytes -> the one-byte bytes object, without allocating
SINGLE_BYTES = [bytes([b]) for b in range(256)]
#: pieces at least this long use the heap variants
LONG_PIECE = 192
#: tokens per numpy pass in `ranked_pairs` (~2 ms each; other threads run in between)
RANKED_SLICE = 1 << 14

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


# ---- fast path: many pieces at once (numpy) -------------------------------------------------
#
# `merge_batch` runs the id-space merge loop over many pieces together. Each round merges, in
# every piece still active, the pair `merge_pairs` would merge next: the lowest packed value,
# leftmost at ties. One round is a handful of array operations, so a batch of 30k pieces with
# 180k merges takes as many rounds as its longest piece has merges (about 80) instead of 180k
# interpreted steps. Symbols are never moved: a merge marks the right symbol dead and links
# around it, so a round touches a few entries per active piece, plus one pass over the slots of
# the active pieces to find each one's lowest pair.

#: packed pair values are below this (rank << shift | merged id); also "no merge"
BATCH_NO = (1 << 52) - 1
#: pieces at most this long go through merge_batch (a position in its piece fits the key's low bits)
BATCH_PIECE = 1 << 10
_POS_BITS = 11                           # BATCH_NO << 11 | position still fits in an int64
_POS_MASK = (1 << _POS_BITS) - 1
_NO_PAIR = BATCH_NO << _POS_BITS         # keys from here up: nothing merges there
_DEAD = _NO_PAIR | _POS_MASK             # the key of a symbol merged into its left neighbour
_HASH_MUL = 0x9E3779B97F4A7C15 - (1 << 64)  # Fibonacci hashing (as int64): the top bits of key * this
#: linear-probing distance from which a PairTable entry is also kept in its sorted overflow list
_FAR = 2


class PairTable:
    """An int64 -> int64 hash table with lookups of whole arrays at once.

    Linear probing at a load factor of at most 1/4. A lookup reads a key's home slot and the
    next one; the few entries that sit further away are also kept sorted and are found by a
    binary search, so no lookup loops over long probe runs (each loop turn over an array costs
    as much as a short lookup).

    >>> import numpy as np
    >>> PairTable(np.array([5, 7]), np.array([50, 70])).get(np.array([7, 6, 5])).tolist()
    [70, 4503599627370495, 50]
    """

    def __init__(self, keys, values) -> None:
        import numpy as np

        keys = np.asarray(keys, dtype=np.int64)
        self.bits = max(int(4 * len(keys)).bit_length(), 4)  # load factor at most 1/4: short probes
        size = 1 << self.bits
        self.keys = np.full(size, -1, dtype=np.int64)
        self.values = np.full(size, BATCH_NO, dtype=np.int64)
        values = np.asarray(values, dtype=np.int64)
        home = self._slots(keys)
        pending, slots = np.arange(len(keys)), home
        owner = np.full(size, -1, dtype=np.int64)  # which pending key claimed a slot
        placed = np.empty(len(keys), dtype=np.int64)
        while len(pending):
            free = self.keys[slots] == -1
            owner[slots[free]] = pending[free]  # of several keys after one free slot, one wins
            chosen = free & (owner[slots] == pending)
            self.keys[slots[chosen]] = keys[pending[chosen]]
            self.values[slots[chosen]] = values[pending[chosen]]
            placed[pending[chosen]] = slots[chosen]
            pending, slots = pending[~chosen], (slots[~chosen] + 1) & (size - 1)
        far = np.flatnonzero((placed - home) & (size - 1) >= _FAR)
        order = np.argsort(keys[far])
        self.far_keys, self.far_values = keys[far][order], values[far][order]

    def _slots(self, keys):
        import numpy as np

        return (keys * np.int64(_HASH_MUL) >> (64 - self.bits)) & ((1 << self.bits) - 1)

    def get(self, keys):
        """The values of `keys` (BATCH_NO where absent); keys must be >= 0."""
        import numpy as np

        keys = np.asarray(keys, dtype=np.int64)
        with np.errstate(over="ignore"):
            slots = self._slots(keys)
        found = self.keys[slots]
        hit = found == keys
        out = np.where(hit, self.values[slots], BATCH_NO)
        rest = np.flatnonzero(~hit & (found != -1))            # home slot taken by another key
        if not len(rest):
            return out
        keys, slots = keys[rest], (slots[rest] + 1) & ((1 << self.bits) - 1)
        found = self.keys[slots]
        hit = found == keys
        out[rest[hit]] = self.values[slots[hit]]
        further = ~hit & (found != -1)                          # the next one too: look in the far list
        if len(self.far_keys) and further.any():
            rest, keys = rest[further], keys[further]
            at = np.minimum(np.searchsorted(self.far_keys, keys), len(self.far_keys) - 1)
            hit = self.far_keys[at] == keys
            out[rest[hit]] = self.far_values[at[hit]]
        return out


def pair_table(merges: Mapping[int, int]) -> PairTable:
    """A PairTable of an id-space merges map (``left << shift | right`` -> ``rank << shift | merged``)."""
    import numpy as np

    keys = np.fromiter(merges.keys(), dtype=np.int64, count=len(merges))
    values = np.fromiter(merges.values(), dtype=np.int64, count=len(merges))
    if len(values) and values.max() >= BATCH_NO:
        raise ValueError("merge ranks too large for merge_batch")
    return PairTable(keys, values)


def merge_batch(symbols, lengths, table: PairTable, shift: int, pairs=None):
    """`merge_pairs` on many pieces at once -> (ids, ids per piece) as numpy arrays.

    `symbols` holds the unit ids of all pieces one after another, `lengths` how many belong to
    each (every length in 1..BATCH_PIECE). The result lists the pieces' ids in the same order.
    `pairs`, if given, is the packed value of each symbol with the next (anything at a piece's
    end), which a caller can take from a dense table of byte pairs faster than `table` looks
    them up.

    >>> import numpy as np
    >>> t = pair_table({5 << 4 | 5: 0 << 4 | 9})  # e=5, ee=9
    >>> [a.tolist() for a in merge_batch(np.array([5, 5, 5, 5, 5, 5, 5]), np.array([3, 4]), t, 4)]
    [[9, 5, 9, 9], [2, 2]]
    """
    import numpy as np

    units = np.asarray(symbols, dtype=np.int64)
    lens = np.asarray(lengths, dtype=np.int64)              # (w,)
    if pairs is None:
        pairs = np.full(len(units), BATCH_NO, dtype=np.int64)
        pairs[:-1] = table.get(units[:-1] << shift | units[1:])
    # Longest pieces first: they merge longest, so the active ones stay a prefix of the slots.
    order = np.argsort(-lens, kind="stable")
    source, sym, key, starts = _batch_slots(units, np.asarray(pairs, dtype=np.int64), lens, order, shift)
    nxt = np.ones(len(sym), dtype=np.int64)                 # (slots,) distance to the next alive slot
    prv = np.ones(len(sym), dtype=np.int64)                 # (slots,) ... and to the previous one
    mask = (1 << shift) - 1
    active, ends = starts, starts + lens[order] + 1         # (a,) sentinel slots, piece ends
    while len(active):
        best = np.minimum.reduceat(key[:ends[-1]], active)  # (a,) lowest pair, leftmost at ties
        finished = best >= _NO_PAIR
        if finished.any():
            go = ~finished
            active, ends, best = active[go], ends[go], best[go]
            if not len(active):
                break
        at = best & _POS_MASK                               # (a,) the left symbol's place in its piece
        p = active + at
        q = p + nxt[p]                                      # the right symbol, merged into p
        r = q + nxt[q]                                      # the one after (maybe the next sentinel)
        merged = (best >> _POS_BITS) & mask
        sym[p] = merged
        key[q] = _DEAD
        nxt[p] = prv[r] = r - p
        back = prv[p]
        left = p - back                                     # the one before (maybe the sentinel)
        new = table.get(np.concatenate((sym[left] << shift | merged, merged << shift | sym[r])))
        key[left] = new[:len(p)] << _POS_BITS | (at - back)
        key[p] = new[len(p):] << _POS_BITS | at
    alive = (key[:-1] != _DEAD) & (sym[:-1] != mask)        # (slots - 1,) symbols left, no sentinels
    counts = np.add.reduceat(alive, starts) if len(lens) else np.zeros(0, dtype=np.int64)
    inverse = np.empty(len(lens), dtype=np.int64)
    inverse[order] = np.arange(len(lens))
    index, counts = run_index(counts, inverse)             # back into the input order
    return sym[:-1][alive][index], counts


def _batch_slots(units, pairs, lens, order, shift: int):
    """merge_batch's working layout of the pieces in `order`: each piece's symbols follow a
    sentinel slot (id `mask`, in no pair), and one more sentinel ends the last piece.

    Returns (the unit index of each symbol slot in order, symbol per slot, key per slot:
    pair value << _POS_BITS | place in the piece, the sentinel slot of each piece). A sentinel
    on both sides means no merge ever needs to check where its piece starts or ends.
    """
    import numpy as np

    source, sorted_lens = run_index(lens, order)            # (n,) unit index, in slot order
    span = sorted_lens + 1                                  # (w,) a sentinel, then the symbols
    ends = np.cumsum(span)
    starts = ends - span                                    # (w,) sentinel slots
    slot = np.arange(len(source)) + np.repeat(np.arange(1, len(lens) + 1), sorted_lens)
    size = len(source) + len(lens) + 1
    sym = np.full(size, (1 << shift) - 1, dtype=np.int64)  # above every id: never in a pair
    sym[slot] = units[source]
    key = np.full(size, _DEAD, dtype=np.int64)
    key[slot] = pairs[source] << _POS_BITS | (slot - np.repeat(starts, sorted_lens))
    key[ends - 1] = _NO_PAIR | sorted_lens                  # no pair across a piece's end
    return source, sym, key, starts


def run_index(counts, which):
    """Indices gathering runs which[0], which[1], ... of consecutive runs (run k: counts[k]
    items) -> (the indices, the length of each gathered run).

    >>> import numpy as np
    >>> [a.tolist() for a in run_index(np.array([2, 1]), np.array([1, 0, 1]))]
    [[2, 0, 1, 2], [1, 2, 1]]
    """
    import numpy as np

    run_starts = np.cumsum(counts) - counts
    lengths = counts[which]
    out_starts = np.cumsum(lengths) - lengths
    return np.repeat(run_starts[which] - out_starts, lengths) + np.arange(int(lengths.sum())), lengths


def ranked_pairs(token_bytes: Sequence[bytes], ranks: Mapping[bytes, int], shift: int):
    """The id-space merges of a tiktoken rank table as (keys, values) arrays for a PairTable.

    With ranks, ``left + right`` merges whenever the concatenation has a rank, so every token
    contributes one entry per way of splitting it into two tokens. `token_bytes[i]` is the
    token of rank i (b"" where no token has it). Found with numpy: every prefix and suffix of
    every token is looked up by a polynomial hash of its bytes, and each hit is then checked
    byte for byte, so a hash collision cannot add a wrong merge (and if two tokens' hashes
    collide, `ranked_pairs_reference` does the work). Equal to it as a set of entries.
    """
    import numpy as np

    lens = np.fromiter(map(len, token_bytes), dtype=np.int64, count=len(token_bytes))
    data = np.frombuffer(b"".join(token_bytes), dtype=np.uint8)
    starts = np.cumsum(lens) - lens
    span_hash = _span_hasher(data)
    filled = np.flatnonzero(lens)
    token_hash = span_hash(starts[filled], starts[filled] + lens[filled])
    ordered = np.sort(token_hash)
    if (ordered[1:] == ordered[:-1]).any():
        return ranked_pairs_reference(token_bytes, ranks, shift)
    by_hash = PairTable(token_hash, filled)
    keys, values = [], []
    for first in range(0, len(lens), RANKED_SLICE):  # a few ms per slice, then other threads
        pause()
        block = np.arange(first, min(first + RANKED_SLICE, len(lens)))
        left, right, token = _two_token_splits(block, data, starts, lens, span_hash, by_hash)
        keys.append(left << shift | right)
        values.append(token << shift | token)
    return np.concatenate(keys), np.concatenate(values)


def _two_token_splits(block, data, starts, lens, span_hash, by_hash):
    """(left, right, token) for every split of a token of `block` into two tokens (numpy)."""
    import numpy as np

    cuts = np.maximum(lens[block] - 1, 0)                           # (tokens,) ways to split each
    token = np.repeat(block, cuts)                                  # (splits,)
    cut = np.arange(len(token)) - np.repeat(np.cumsum(cuts) - cuts, cuts) + 1
    begin = starts[token]
    left = by_hash.get(span_hash(begin, begin + cut))               # the rank of the prefix's hash
    ok = np.flatnonzero(left != BATCH_NO)
    token, cut, begin, left = token[ok], cut[ok], begin[ok], left[ok]
    right = by_hash.get(span_hash(begin + cut, begin + lens[token]))
    ok = np.flatnonzero((right != BATCH_NO) & (lens[left] == cut))
    token, cut, left, right = token[ok], cut[ok], left[ok], right[ok]
    same = _same_bytes(data, starts[left], starts[token], cut) & _same_bytes(
        data, starts[right], starts[token] + cut, lens[token] - cut)
    return left[same], right[same], token[same]


def _span_hasher(data):
    """A function (begins, ends) -> 64-bit polynomial hashes of data[begin:end] (numpy)."""
    import numpy as np

    base = 0x9E3779B97F4A7C15 | 1                                   # odd: invertible mod 2**64
    powers, inverse = np.ones((2, len(data) + 1), dtype=np.uint64)  # base**k, base**-k
    np.cumprod(np.full(len(data), base, dtype=np.uint64), out=powers[1:])
    np.cumprod(np.full(len(data), pow(base, -1, 1 << 64), dtype=np.uint64), out=inverse[1:])
    prefix = np.zeros(len(data) + 1, dtype=np.uint64)
    np.cumsum((data.astype(np.uint64) + np.uint64(1)) * powers[:-1], out=prefix[1:])

    def span_hash(begins, ends):  # 63 bits: PairTable keys are >= 0
        return (((prefix[ends] - prefix[begins]) * inverse[begins]) & np.uint64((1 << 63) - 1)).astype(np.int64)

    return span_hash


def _same_bytes(data, a_starts, b_starts, lengths):
    """For each k: data[a_starts[k]:+lengths[k]] == data[b_starts[k]:+lengths[k]] (numpy)."""
    import numpy as np

    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    differ = data[np.repeat(a_starts, lengths) + offsets] != data[np.repeat(b_starts, lengths) + offsets]
    bad = np.zeros(len(lengths), dtype=bool)
    bad[np.repeat(np.arange(len(lengths)), lengths)[differ]] = True
    return ~bad


def ranked_pairs_reference(token_bytes: Sequence[bytes], ranks: Mapping[bytes, int], shift: int):
    """`ranked_pairs`, one token at a time with the rank dict (the slow, readable definition)."""
    import numpy as np

    get = ranks.get
    keys: list[int] = []
    values: list[int] = []
    for rank, token in enumerate(token_bytes):
        for cut in range(1, len(token)):
            left = get(token[:cut])
            if left is not None:
                right = get(token[cut:])
                if right is not None:
                    keys.append(left << shift | right)
                    values.append(rank << shift | rank)
    return np.array(keys, dtype=np.int64), np.array(values, dtype=np.int64)
