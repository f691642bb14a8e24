"""Sliced C-speed passes equal the one-call builtins they stand for."""
from __future__ import annotations

from itertools import repeat

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
    out = slices.sliced_dict(keys, range(n))
    assert out == dict(zip(keys, range(n)))
    assert list(out) == list(dict(zip(keys, range(n))))  # the same order too


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=st.text(alphabet="ab\x00 ", max_size=400), sep=st.sampled_from(["\x00", " ", "a"]))
def test_sliced_split_equals_split(text, sep):
    assert slices.sliced_split(text, sep) == text.split(sep)  # cut every 48 characters


def test_sliced_split_refuses_longer_separators():
    with pytest.raises(ValueError):
        slices.sliced_split("aaa", "aa")
