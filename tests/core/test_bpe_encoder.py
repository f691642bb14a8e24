"""The rank-based BPE merge loop: known answers, and the fast paths against the reference."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from forma_gui.core import bpe_encoder as bpe
from tests.conftest import MAX_EXAMPLES, data_file


def _listed(merges: list[tuple[bytes, bytes]]):
    """Reference pair-rank function plus the id-space table for a small merges list."""
    ids: dict[bytes, int] = {bytes([b]): b for b in range(256)}
    for left, right in merges:
        ids.setdefault(left + right, len(ids))
    shift = 10
    table = {}
    for rank, (left, right) in enumerate(merges):
        table[ids[left] << shift | ids[right]] = rank << shift | ids[left + right]
    ranks = {pair: r for r, pair in enumerate(merges)}
    return bpe.listed_pair_rank(ranks), ids, table, shift


def test_wikipedia_example():
    # Wikipedia's BPE example: aa -> Z, ab -> Y, ZY -> X turns aaabdaaabac into XdXac.
    pair_rank, *_ = _listed([(b"a", b"a"), (b"a", b"b"), (b"aa", b"ab")])
    assert bpe.bpe_reference(b"aaabdaaabac", pair_rank) == [b"aaab", b"d", b"aaab", b"a", b"c"]


def test_leftmost_wins_at_overlaps():
    pair_rank, ids, table, shift = _listed([(b"e", b"e")])
    assert bpe.bpe_reference(b"eee", pair_rank) == [b"ee", b"e"]
    assert bpe.merge_pairs(list(b"eee"), table, shift) == [ids[b"ee"], ids[b"e"]]
    assert bpe.merge_ranked(b"eee", {b"e": 0, b"ee": 1}) == [b"ee", b"e"]
    assert bpe.merge_ranked(b"eeee", {b"e": 0, b"ee": 1}) == [b"ee", b"ee"]


def test_steps_record_pair_rank_position_and_symbols():
    pair_rank, *_ = _listed([(b"a", b"b"), (b"ab", b"c")])
    steps = bpe.bpe_steps(b"xabc", pair_rank)
    assert [(s.left, s.right, s.rank, s.position, s.symbols) for s in steps] == [
        (b"a", b"b", 0, 1, (b"x", b"ab", b"c")),
        (b"ab", b"c", 1, 1, (b"x", b"abc")),
    ]


def test_empty_and_single_byte():
    assert bpe.bpe_reference(b"", lambda l, r: None) == []
    assert bpe.merge_ranked(b"", {}) == []
    assert bpe.merge_ranked(b"a", {b"a": 0}) == [b"a"]


# Small alphabets make ties, overlaps and competing merges frequent.
_SMALL = st.lists(st.sampled_from([b"a", b"b", b"c"]), max_size=300).map(b"".join)


@st.composite
def _merge_lists(draw):
    """A random merges list over a/b/c: each merge joins two existing symbols."""
    symbols = [b"a", b"b", b"c"]
    merges = []
    for _ in range(draw(st.integers(0, 25))):
        left, right = draw(st.sampled_from(symbols)), draw(st.sampled_from(symbols))
        if (left, right) not in merges:
            merges.append((left, right))
            symbols.append(left + right)
    return merges


@settings(max_examples=MAX_EXAMPLES)
@given(_merge_lists(), _SMALL)
def test_merge_pairs_equals_reference(merges, text):
    pair_rank, ids, table, shift = _listed(merges)
    expected = [ids[s] for s in bpe.bpe_reference(text, pair_rank)]
    assert bpe.merge_pairs(list(text), table, shift) == expected
    assert bpe.merge_pairs_long(list(text), table, shift) == expected


@settings(max_examples=MAX_EXAMPLES)
@given(_merge_lists(), _SMALL)
def test_merge_ranked_equals_reference(merges, text):
    # tiktoken-style ranks: rank of the concatenated bytes, in merge order.
    ranks = {b"a": 0, b"b": 1, b"c": 2}
    for left, right in merges:
        ranks.setdefault(left + right, len(ranks))
    expected = bpe.bpe_reference(text, bpe.ranked_pair_rank(ranks))
    assert bpe.merge_ranked(text, ranks) == expected
    assert bpe.merge_ranked_long(text, ranks) == expected


@pytest.fixture(scope="module")
def r50k():
    from tiktoken.load import load_tiktoken_bpe

    return load_tiktoken_bpe(str(data_file("tiktoken", "r50k_base.tiktoken")))


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=200).map(lambda s: s.encode("utf-8", "replace")))
def test_real_ranks_fast_equals_reference(r50k, data):
    expected = bpe.bpe_reference(data, bpe.ranked_pair_rank(r50k))
    assert bpe.merge_ranked(data, r50k) == expected
    assert bpe.merge_ranked_long(data, r50k) == expected


# ---- merge_batch: many pieces at once ------------------------------------------------------

def _batch(texts: list[bytes], unit_ids: list[int], table, shift: int) -> list[list[int]]:
    """merge_batch on the non-empty texts, split back into one id list per text."""
    import numpy as np

    texts = [t for t in texts if t]
    units = np.array(unit_ids, dtype=np.int64)[np.frombuffer(b"".join(texts), dtype=np.uint8)]
    ids, counts = bpe.merge_batch(units, [len(t) for t in texts], table, shift)
    flat, out, at = ids.tolist(), [], 0
    for count in counts.tolist():
        out.append(flat[at:at + count])
        at += count
    return out


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(_merge_lists(), st.lists(_SMALL, max_size=8))
def test_merge_batch_equals_merge_pairs(merges, texts):
    pair_rank, ids, table, shift = _listed(merges)
    expected = [bpe.merge_pairs(list(t), table, shift) for t in texts if t]
    assert _batch(texts, list(range(256)), bpe.pair_table(table), shift) == expected


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"b", b"c"]), min_size=2, max_size=8).map(b"".join), st.data())
def test_merge_batch_with_arbitrary_ranks_equals_reference(first, data):
    # Rank tables in any order: a token may rank below its own parts (real tiktoken files
    # have many such), which a round of merge_batch must not trip over.
    tokens = data.draw(st.lists(st.lists(st.sampled_from(b"abc"), min_size=2, max_size=5).map(bytes),
                                max_size=20, unique=True))
    ranks = dict.fromkeys(data.draw(st.permutations([b"a", b"b", b"c", *tokens])))
    ranks = {token: rank for rank, token in enumerate(ranks)}
    shift = max(len(ranks), 2).bit_length()
    texts = data.draw(st.lists(_SMALL, max_size=6)) + [first]
    units = [ranks.get(bytes([b]), 0) for b in range(256)]
    table = bpe.PairTable(*bpe.ranked_pairs(list(ranks), ranks, shift))
    expected = [[ranks[s] for s in bpe.bpe_reference(t, bpe.ranked_pair_rank(ranks))] for t in texts if t]
    assert _batch(texts, units, table, shift) == expected


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.dictionaries(st.integers(0, 1 << 40), st.integers(0, 1 << 40), max_size=200),
       st.lists(st.integers(0, 1 << 40), max_size=50))
def test_pair_table_lookup_equals_dict(mapping, others):
    import numpy as np

    table = bpe.PairTable(np.array(list(mapping), dtype=np.int64), np.array(list(mapping.values()), dtype=np.int64))
    queries = [*mapping, *others]
    found = table.get(np.array(queries, dtype=np.int64)).tolist()
    assert found == [mapping.get(q, bpe.BATCH_NO) for q in queries]


def test_pair_table_far_entries_and_absent_keys():
    # Enough keys that some sit two or more slots past their home slot (found in the sorted
    # far list), and queries that are absent, present near home, and present far away.
    import numpy as np

    rng = np.random.default_rng(8)
    keys = np.unique(rng.integers(0, 1 << 40, 20_000))
    table = bpe.PairTable(keys, keys * 3)
    assert len(table.far_keys) > 10
    absent = rng.integers(1 << 41, 1 << 42, 20_000)
    queries = np.concatenate((keys, absent, table.far_keys, [0, (1 << 62) + 5]))
    present = set(keys.tolist())
    expected = [k * 3 if k in present else bpe.BATCH_NO for k in queries.tolist()]
    assert table.get(queries).tolist() == expected


def test_merge_batch_on_real_ranks_equals_merge_ranked(r50k):
    pieces = [b"hello", b" world", b"eeeeeeee", b"\xe4\xb8\xad\xe6\x96\x87", b" tokenization", b"x", b"  ", b"?!?!"]
    shift = max(len(r50k), 2).bit_length()
    table = bpe.PairTable(*bpe.ranked_pairs(list(r50k), r50k, shift))
    units = [r50k[bytes([b])] for b in range(256)]
    expected = [[r50k[s] for s in bpe.merge_ranked(p, r50k)] for p in pieces]
    assert _batch(pieces, units, table, shift) == expected


# ---- ranked_pairs: the numpy search against the readable one ---------------------------------

def _entries(keys_values) -> set[tuple[int, int]]:
    keys, values = keys_values
    return set(zip(keys.tolist(), values.tolist()))


def test_ranked_pairs_on_real_ranks_equals_reference(r50k):
    shift = max(len(r50k), 2).bit_length()
    fast = bpe.ranked_pairs(list(r50k), r50k, shift)
    assert len(fast[0]) == len(_entries(fast)) > 100_000  # no entry twice
    assert _entries(fast) == _entries(bpe.ranked_pairs_reference(list(r50k), r50k, shift))


def _weak_hasher(data):
    """A hash that collides all the time: (length, first byte). Tokens that share it make
    ranked_pairs fall back to the reference; substrings that share a token's must be caught
    by the byte-for-byte check."""
    import numpy as np

    return lambda begins, ends: ((ends - begins) << 8 | data[begins].astype(np.int64)).astype(np.int64)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=6).map(lambda b: bytes(x % 3 for x in b)), max_size=40, unique=True),
       st.randoms(use_true_random=False), st.booleans())
def test_ranked_pairs_equals_reference(tokens, rng, weak):
    # tokens over three byte values (\x00 among them) in any rank order, with unused ranks
    ranked = [bytes([b]) for b in range(3)] + [t for t in tokens if len(t) > 1] + [b""] * 3
    rng.shuffle(ranked)
    ranks = {token: rank for rank, token in enumerate(ranked) if token}
    shift = max(len(ranked), 2).bit_length()
    expected = _entries(bpe.ranked_pairs_reference(ranked, ranks, shift))
    original = bpe._span_hasher
    try:
        if weak:
            bpe._span_hasher = _weak_hasher
        assert _entries(bpe.ranked_pairs(ranked, ranks, shift)) == expected
    finally:
        bpe._span_hasher = original
