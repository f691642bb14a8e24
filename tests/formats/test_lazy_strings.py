"""LazyStrings / string_bounds: the fast walk equals the plain loop on any input, and every
string decodes exactly as it would alone (surrogateescape)."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.formats import lazy_strings
from forma_gui.formats.lazy_strings import LazyStrings, string_bounds, string_bounds_reference
from tests.conftest import MAX_EXAMPLES


def blob_of(items: list[bytes], order: str = "<") -> bytes:
    return b"".join(struct.pack(order + "Q", len(s)) + s for s in items)


def decode(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


#: items that break the fast chain: empty, 256+ bytes, seven NULs, partial UTF-8, a NUL
ODD = st.sampled_from([b"", b"x" * 256, b"a b", b" ", b"a\0\0\0\0\0\0\0b", b"\xe2\x82", b"\xff", b"\0",
                       "é€😀".encode(), b"\x80\x80", b"\x01" + b"\0" * 7])
ITEM = st.binary(max_size=12) | ODD


@pytest.fixture(autouse=True)
def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small windows and bursts, so that short examples cross every branch of the walk."""
    monkeypatch.setattr(lazy_strings, "MIN_FAST_ITEMS", 2)
    monkeypatch.setattr(lazy_strings, "FIRST_WINDOW", 64)
    monkeypatch.setattr(lazy_strings, "MAX_WINDOW", 256)
    monkeypatch.setattr(lazy_strings, "SCALAR_BURST", 3)
    monkeypatch.setattr(lazy_strings, "ITER_CHUNK", 5)
    monkeypatch.setattr(lazy_strings, "DECODE_SLICE", 7)  # joined strings decode in many slices


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(ITEM, max_size=200), st.binary(max_size=40), st.sampled_from("<>"))
def test_fast_walk_equals_reference(items: list[bytes], tail: bytes, order: str) -> None:
    blob = b"pad" + blob_of(items, order) + tail
    fast = string_bounds(blob, 3, len(items), len(blob), order)
    slow = string_bounds_reference(blob, 3, len(items), len(blob), order)
    assert fast is not None and slow is not None
    np.testing.assert_array_equal(fast, slow)
    assert fast[-1] == len(blob) - len(tail)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(ITEM, min_size=1, max_size=80), st.data())
def test_bad_length_anywhere_is_none(items: list[bytes], data: st.DataObject) -> None:
    """A truncated array, or one length made huge: both walks return None."""
    blob = blob_of(items)
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(blob) - 1))
        blob = blob[:cut]
    else:
        i = data.draw(st.integers(0, len(items) - 1))
        at = len(blob_of(items[:i]))
        blob = blob[:at] + struct.pack("<Q", len(blob)) + blob[at + 8:]
    assert string_bounds_reference(blob, 0, len(items), len(blob)) is None
    assert string_bounds(blob, 0, len(items), len(blob)) is None


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(ITEM, max_size=60), st.sampled_from("<>"), st.data())
def test_decoding_equals_one_by_one(items: list[bytes], order: str, data: st.DataObject) -> None:
    blob = blob_of(items, order)
    strings = LazyStrings.from_buffer(blob, 0, len(items), len(blob), order)
    expected = [decode(s) for s in items]
    assert strings.tolist() == expected and list(strings) == expected
    assert strings == expected and strings == tuple(expected) and expected == strings
    assert len(strings) == len(items) and strings.end == len(blob)
    start, stop, step = (data.draw(st.none() | st.integers(-70, 70)) for _ in range(3))
    if step != 0:
        assert strings[start:stop:step] == expected[start:stop:step]
    if items:
        i = data.draw(st.integers(-len(items), len(items) - 1))
        assert strings[i] == expected[i]
    assert [s.encode("utf-8", "surrogateescape") for s in strings] == items  # nothing lost
    assert list(reversed(strings)) == expected[::-1]
    data, starts, lengths = strings.spans()
    assert [data[a:a + n].tobytes() for a, n in zip(starts, lengths)] == items
    for byte in (0, 0x20, 0x80):
        at = strings.only_byte(byte)
        if all(s.count(bytes([byte])) == 1 for s in items):
            assert at is not None and data[at].tolist() == [byte] * len(items)
            assert ((at >= starts) & (at < starts + lengths)).all()
        else:
            assert at is None


def test_index_errors_and_equality() -> None:
    strings = LazyStrings.from_buffer(blob_of([b"a", b"b"]), 0, 2, 18)
    with pytest.raises(IndexError):
        strings[2]
    with pytest.raises(IndexError):
        strings[-3]
    other = LazyStrings.from_buffer(blob_of([b"a", b"b"], ">"), 0, 2, 18, ">")
    assert strings == other and strings != ["a"] and strings != "ab"
    assert strings == LazyStrings.from_buffer(blob_of([b"a", b"b"]), 0, 2, 18)
    assert strings != LazyStrings.from_buffer(blob_of([b"a", b"c"]), 0, 2, 18)
    assert LazyStrings.from_buffer(blob_of([b"a", b"b"]), 0, 2, 17) is None
    assert repr(strings) == "LazyStrings(['a', 'b'], n=2)"
    assert "a" in strings and strings.index("b") == 1
    with pytest.raises(TypeError):
        hash(strings)


def test_zeros_after_the_array_cost_little_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan stops near the array's end: a megabyte of zeros after it (every byte a
    candidate length) is not turned into 8 bytes of int64 per byte."""
    import tracemalloc

    monkeypatch.setattr(lazy_strings, "MIN_FAST_ITEMS", 64)
    monkeypatch.setattr(lazy_strings, "FIRST_WINDOW", 1 << 12)
    monkeypatch.setattr(lazy_strings, "MAX_WINDOW", 1 << 20)
    items = [b"tok%d" % i for i in range(20_000)]
    blob = blob_of(items) + bytes(1 << 20)
    tracemalloc.start()
    try:
        strings = LazyStrings.from_buffer(blob, 0, len(items), len(blob))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert strings is not None and strings[-1] == "tok19999"
    assert peak < 3 * len(blob_of(items)) + (1 << 20), peak
