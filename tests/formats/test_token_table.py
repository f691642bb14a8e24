"""formats.token_table: token look-ups and merge ids on the bytes, checked against plain
Python over the decoded texts (llama.cpp's rules: split at the first space after position 0)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core.byte_keys import WIDTH
from forma_gui.formats.lazy_strings import LazyStrings
from forma_gui.formats.token_table import TokenTable, merge_ids
from tests.conftest import MAX_EXAMPLES
from tests.formats.test_lazy_strings import blob_of, decode

#: token texts: short, long (past the key width), multi-byte, invalid UTF-8, with spaces
TEXT = (st.binary(max_size=6) | st.sampled_from([b"x" * (WIDTH + 3), b"y" * WIDTH, "é€".encode(),
                                                  b"\xff\xfe", b"a b", b" "]))


def lazy(items: list[bytes]) -> LazyStrings:
    blob = blob_of(items)
    return LazyStrings.from_buffer(blob, 0, len(items), len(blob))


def reference_merge_ids(tokens: list[str], merges: list[str]):
    """None unless every merge has exactly one space and both sides are tokens."""
    ids = {t: i for i, t in reversed(list(enumerate(tokens))) if t}
    out = []
    for merge in merges:
        if merge.count(" ") != 1:
            return None
        left, right = merge.split(" ")
        if left not in ids or right not in ids:
            return None
        out.append((ids[left], ids[right], ids.get(left + right, -1)))
    return out


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(TEXT, max_size=40, unique=True), st.lists(TEXT, max_size=20))
def test_find_and_ids_of_equal_a_dict_of_texts(tokens: list[bytes], queries: list[bytes]) -> None:
    table = TokenTable(lazy(tokens))
    texts = [decode(t) for t in tokens]
    expected = {decode(q): texts.index(decode(q)) for q in queries if q and q in tokens}
    assert table.ids_of([decode(q) for q in queries]) == expected
    assert table.unique and table.has_empty == (b"" in tokens)


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(TEXT, min_size=1, max_size=30))
def test_repeated_texts_are_noticed(tokens: list[bytes]) -> None:
    table = TokenTable(lazy(tokens))
    non_empty = [t for t in tokens if t]
    assert table.unique == (len(set(non_empty)) == len(non_empty))


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(TEXT, min_size=1, max_size=30, unique=True).filter(lambda ts: b"" not in ts),
       st.data())
def test_merge_ids_equal_splitting_the_texts(tokens: list[bytes], data: st.DataObject) -> None:
    pair = st.tuples(st.sampled_from(tokens), st.sampled_from(tokens))
    merges = [a + b" " + b for a, b in data.draw(st.lists(pair, max_size=30))]
    merges += data.draw(st.lists(TEXT, max_size=2))  # maybe malformed, maybe naming non-tokens
    got = merge_ids(lazy(merges), TokenTable(lazy(tokens)))
    expected = reference_merge_ids([decode(t) for t in tokens], [decode(m) for m in merges])
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.T.tolist() == [list(e) for e in expected]


def test_an_empty_token_leaves_merges_to_the_texts() -> None:
    """llama.cpp renames an empty text "[EMPTY_<id>]", which the bytes do not spell."""
    assert merge_ids(lazy([b"a b"]), TokenTable(lazy([b"a", b"b", b""]))) is None


def test_many_merges_of_a_trained_vocabulary() -> None:
    rng = np.random.default_rng(1)
    tokens = [bytes([b]) for b in range(33, 127)]
    merges = []
    while len(tokens) < 3000:
        a, b = (tokens[i] for i in rng.integers(0, len(tokens), 2))
        if a + b not in tokens and len(a + b) <= 2 * WIDTH:
            tokens.append(a + b)
            merges.append(a + b" " + b)
    got = merge_ids(lazy(merges), TokenTable(lazy(tokens)))
    expected = reference_merge_ids([decode(t) for t in tokens], [decode(m) for m in merges])
    assert got.T.tolist() == [list(e) for e in expected]
    assert any(len(t) > WIDTH for t in tokens)  # the long-text path ran too
