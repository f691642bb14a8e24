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
