"""The walk's chain memo: a chain is found by its first token and the bits of its start
score, stays while splices leave its tokens alone (moving with the ones before it), and goes
when a splice touches it or when the kept scores pass the limit (the oldest first)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from forma_gui.core.chain_memo import Chain, ChainMemo
from tests.conftest import MAX_EXAMPLES


def _chain(first: int, last: int, end_score: float = -1.0) -> Chain:
    return Chain(np.arange(max(0, last - first - 1), dtype=np.float32), end_score, 0, 512)


def test_the_start_score_is_matched_by_its_bits():
    memo = ChainMemo()
    memo.put(5, 9, 0.0, _chain(5, 9, -2.0))
    assert memo.get(5, 0.0).end_score == -2.0
    assert memo.get(5, -0.0) is None  # (+0 and -0 start different float32 paths)
    memo.put(5, 8, -0.0, _chain(5, 8, -3.0))
    assert memo.get(5, -0.0).end_score == -3.0 and memo.get(5, 0.0).end_score == -2.0
    assert (memo.hits, memo.misses) == (3, 1)


def test_a_chain_whose_scores_do_not_fit_its_tokens_is_not_kept():
    memo = ChainMemo()
    memo.put(0, 10, -1.0, _chain(0, 5))
    assert memo.get(0, -1.0) is None and len(memo) == 0


def test_past_the_limit_the_oldest_chains_go():
    memo = ChainMemo(max_values=100)
    for k in range(10):
        memo.put(100 * k, 100 * k + 31, -1.0, _chain(100 * k, 100 * k + 31))  # 30 scores each
    kept = [k for k in range(10) if memo.get(100 * k, -1.0) is not None]
    assert kept and kept == list(range(10 - len(kept), 10)) and 30 * len(kept) <= 100


#: a memo operation: keep a chain (first, length, start score) or splice (i0, removed, added)
PUT = st.tuples(st.just("put"), st.integers(0, 60), st.integers(1, 12), st.sampled_from([0.0, -0.0, -1.5, -7.0]))
SPLICE = st.tuples(st.just("splice"), st.integers(0, 70), st.integers(0, 4), st.integers(0, 4))


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(ops=st.lists(PUT | SPLICE, max_size=40), max_values=st.sampled_from([16, 1 << 22]))
def test_splices_move_or_drop_chains_as_a_list_of_spans_would(ops, max_values):
    """Against a plain list of (first, last, start bits, chain): a splice of tokens i0..j0 drops
    the chains over i0-1..j0 and moves those after j0 by the change in count; the memo may also
    have dropped the oldest chains past its limit, never others."""
    memo, spans = ChainMemo(max_values=max_values), []
    for op in ops:
        if op[0] == "put":
            _, first, length, start = op
            key = (first, np.float64(start).tobytes())
            if memo.span(first, start) is None and key not in [(f, s) for f, _, s, _ in spans]:
                chain = _chain(first, first + length, end_score=float(len(spans)))
                memo.put(first, first + length, start, chain)
                spans.append((first, first + length, np.float64(start).tobytes(), chain))
        else:
            _, i0, removed, added = op
            j0 = i0 + removed
            memo.splice(i0, j0, added)
            delta = added - removed
            spans = [(f + delta, l + delta, s, c) if f > j0 else (f, l, s, c)
                     for f, l, s, c in spans if not (f <= j0 and l >= i0 - 1)]
        live = [x for x in spans if memo.span(x[0], _start(x[2])) is not None]
        for f, l, s, c in live:
            assert memo.span(f, _start(s)) == (f, l) and memo.get(f, _start(s)) is c
        assert len(memo) == len(live)
        if max_values > 1000:
            assert live == spans
        else:  # only the oldest went
            assert live == spans[len(spans) - len(live):]
            assert sum(len(c.values) for *_, c in live) <= max_values
            spans = live


def _start(bits: bytes) -> float:
    return float(np.frombuffer(bits, dtype=np.float64)[0])
