"""core.byte_keys: exact look-ups of byte strings, checked against a plain dict of bytes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core import byte_keys
from forma_gui.core.byte_keys import WIDTH, KeyIndex, byte_keys as keys_of
from tests.conftest import MAX_EXAMPLES

#: strings around the word and key boundaries, and ones sharing a long prefix
EDGE = st.sampled_from([b"", b"\0", b"\0\0", b"a" * 8, b"a" * 9, b"a" * 16, b"a" * WIDTH,
                        b"a" * (WIDTH + 1), b"a" * WIDTH + b"b", b"a" * 40, b"\xff" * 7])
ITEM = st.binary(max_size=WIDTH + 8) | EDGE


def packed(items: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The items back to back with a junk byte between them (keys must not read past an end)."""
    data = b"".join(item + b"\x7f" for item in items)
    lengths = np.array([len(i) for i in items], dtype=np.int64)
    starts = np.cumsum(lengths + 1) - lengths - 1
    return np.frombuffer(data, dtype=np.uint8), starts, lengths


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(ITEM, max_size=60), st.lists(ITEM, max_size=60))
def test_find_equals_a_dict_of_bytes(indexed: list[bytes], queries: list[bytes]) -> None:
    index = KeyIndex(keys_of(*packed(indexed)))
    found = index.find(keys_of(*packed(queries))).tolist()
    for query, got in zip(queries, found):
        if len(query) > WIDTH or query not in indexed:
            assert got == -1
        else:
            assert indexed[got] == query  # any of equal indexed strings
    short = [i for i in indexed if len(i) <= WIDTH]
    assert index.repeats == (len(set(short)) != len(short))


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(ITEM, min_size=1, max_size=40), st.data())
def test_excluded_positions_are_never_found(items: list[bytes], data: st.DataObject) -> None:
    excluded = data.draw(st.sets(st.integers(0, len(items) - 1)))
    index = KeyIndex(keys_of(*packed(items)), exclude=np.array(sorted(excluded), dtype=np.int64))
    found = index.find(keys_of(*packed(items))).tolist()
    for i, got in enumerate(found):
        allowed = [j for j, item in enumerate(items) if item == items[i] and j not in excluded]
        assert got in allowed if allowed and len(items[i]) <= WIDTH else got == -1


def test_keys_are_equal_exactly_when_the_strings_are() -> None:
    items = [b"ab", b"ab\0", b"a" * WIDTH, b"a" * (WIDTH - 1) + b"b", b"", b"\0"]
    keys = keys_of(*packed(items))
    for i, a in enumerate(items):
        for j, b in enumerate(items):
            assert (keys[i] == keys[j]).all() == (a == b)


def test_many_keys_in_slices_with_long_probe_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small slices, a crowded table (SPREAD 1: long probe chains) and many keys."""
    monkeypatch.setattr(byte_keys, "KEY_SLICE", 7)
    monkeypatch.setattr(byte_keys, "SPREAD", 1)
    rng = np.random.default_rng(0)
    items = list(dict.fromkeys(rng.bytes(int(n)) for n in rng.integers(0, 12, 3000)))
    index = KeyIndex(keys_of(*packed(items)))
    queries = items[::-1] + [b"\x7f" * 13, b"not there"]
    got = index.find(keys_of(*packed(queries))).tolist()
    expected = [items.index(q) if q in items else -1 for q in queries]
    assert got == expected and not index.repeats
