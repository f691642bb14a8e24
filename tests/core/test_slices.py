"""Sliced C-speed passes equal the one-call builtins they stand for."""
from __future__ import annotations

from itertools import repeat

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from forma_gui.core import slices
from tests.conftest import MAX_EXAMPLES


@pytest.fixture(autouse=True)
def small_slices(monkeypatch):
    monkeypatch.setattr(slices, "SLICE", 3)  # every example crosses several slices


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(a=st.lists(st.integers(), max_size=40), b=st.lists(st.integers(), max_size=40))
def test_sliced_map_equals_list_map(a, b):
    assert slices.sliced_map(int.__add__, a, b) == list(map(int.__add__, a, b))
    assert slices.sliced_map(str, a) == list(map(str, a))
    assert slices.sliced_map(divmod, iter(a), repeat(7)) == list(map(divmod, a, repeat(7)))


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(keys=st.lists(st.text(max_size=2), max_size=40), n=st.integers(0, 45))
def test_sliced_dict_equals_dict_zip(keys, n):
    expected = dict(zip(keys, range(n)))
    for out in (slices.sliced_dict(keys, range(n)), slices.sliced_dict(iter(keys), iter(range(n))),
                slices.sliced_dict(keys, list(range(n)))):
        assert out == expected
        assert list(out) == list(expected)  # the same order too


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=st.text(alphabet="ab\x00 ", max_size=400), sep=st.sampled_from(["\x00", " ", "a"]))
def test_sliced_split_equals_split(text, sep):
    assert slices.sliced_split(text, sep) == text.split(sep)  # cut every 48 characters


def test_sliced_split_refuses_longer_separators():
    with pytest.raises(ValueError):
        slices.sliced_split("aaa", "aa")


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(items=st.lists(st.text(max_size=3), max_size=40), sep=st.sampled_from(["", "\x00", "ab"]))
def test_sliced_join_equals_join(items, sep):
    assert slices.sliced_join(sep, items) == sep.join(items)
    data = [s.encode("utf-8") for s in items]
    assert slices.sliced_join(sep.encode(), data) == sep.encode().join(data)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(values=st.lists(st.integers(-2**63, 2**63 - 1), max_size=40))
def test_sliced_array_equals_fromiter(values):
    out = slices.sliced_array(iter(values), np.int64)
    assert out.dtype == np.int64 and out.tolist() == values


def test_pack_in_slices_equals_shifted_or(monkeypatch):
    from forma_gui.core import bytelevel

    monkeypatch.setattr(bytelevel, "SLICE", 1000)
    high, low = list(range(5000, 0, -1)), range(5000)
    assert bytelevel._pack(high, low, 13) == [h << 13 | l for h, l in zip(high, low)]


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(items=st.lists(st.integers(-3, 3), max_size=40))
def test_sliced_all_and_set_equal_builtins(items):
    assert slices.sliced_all(bool, items) == all(map(bool, items))
    assert slices.sliced_set(abs, items) == set(map(abs, items))
    assert slices.sliced_set(None, items) == set(items)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=st.text(alphabet="ab \x00", max_size=200), new=st.sampled_from(["", "\x00", "xy"]))
def test_sliced_replace_equals_replace(text, new):
    assert slices.sliced_replace(text, " ", new) == text.replace(" ", new)  # 48-character passes


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(items=st.lists(st.integers(), max_size=40))
def test_sliced_list_equals_list(items):
    assert slices.sliced_list(iter(items)) == items
    assert slices.sliced_list(x for x in items) == items


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(parts=st.lists(st.lists(st.integers(-2**31, 2**31 - 1), max_size=9), max_size=6),
       code=st.sampled_from("iq"))
def test_sliced_concat_and_copy_equal_joined_arrays(parts, code):
    from array import array

    arrays = [array(code, p) for p in parts]
    joined = array(code, [x for p in parts for x in p])
    out = slices.sliced_concat(arrays, array(code))
    assert out == joined and out.typecode == code
    flags = [bytes(len(p)) + b"\x03" for p in parts]
    assert slices.sliced_concat(flags, bytearray()) == bytearray(b"".join(flags))
    copy = slices.sliced_copy(joined, step=4)
    assert copy == joined and copy is not joined and copy.typecode == code
    assert slices.sliced_copy(bytearray(b"".join(flags)), step=4) == b"".join(flags)
