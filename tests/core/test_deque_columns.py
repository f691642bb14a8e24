"""DequeColumns splices like list slice assignment, whichever side it moves."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core import deque_columns
from forma_gui.core.deque_columns import DequeColumns

f32 = st.floats(width=32, allow_nan=False)
i32 = st.integers(-2**31, 2**31 - 1)


@st.composite
def splices(draw):
    """(start values, a list of splices (i0, j0, new xs, new ys) valid in turn)."""
    n = draw(st.integers(0, 40))
    xs, ys = draw(st.lists(i32, min_size=n, max_size=n)), draw(st.lists(f32, min_size=n, max_size=n))
    steps = []
    for _ in range(draw(st.integers(1, 30))):
        i0 = draw(st.integers(0, n))
        j0 = draw(st.integers(i0, n))
        m = draw(st.integers(0, 12))
        steps.append((i0, j0, draw(st.lists(i32, min_size=m, max_size=m)), draw(st.lists(f32, min_size=m, max_size=m))))
        n += m - (j0 - i0)
    return (xs, ys), steps


@settings(max_examples=300, deadline=None)
@given(splices(), st.integers(0, 6))
def test_splices_match_lists(case, room):
    (xs, ys), steps = case
    saved = deque_columns.MIN_ROOM
    deque_columns.MIN_ROOM = room  # little room: every path (head, tail, a new buffer) runs
    try:
        cols = DequeColumns({"x": "i", "y": "f"})
        cols.set([xs, ys])
        for i0, j0, new_x, new_y in steps:
            cols.splice(i0, j0, [new_x, new_y])
            xs[i0:j0], ys[i0:j0] = new_x, new_y
            assert cols.column("x").tolist() == xs
            assert cols.column("y").tolist() == ys  # (float32 values come back exactly)
            assert len(cols) == len(xs)
    finally:
        deque_columns.MIN_ROOM = saved


def test_the_shorter_side_moves():
    cols = DequeColumns({"x": "i"})
    cols.set([list(range(1000))])
    lo, hi = cols._lo, cols._hi
    cols.splice(10, 10, [[-1]])  # near the start: the head moves one slot left
    assert (cols._lo, cols._hi) == (lo - 1, hi)
    cols.splice(900, 902, [[]])  # near the end: the tail moves two slots left
    assert (cols._lo, cols._hi) == (lo - 1, hi - 2)
    assert cols.column("x").tolist() == [*range(10), -1, *range(10, 899), *range(901, 1000)]


def test_bad_splices_are_refused():
    cols = DequeColumns({"x": "i", "y": "f"})
    cols.set([[1, 2], [1.0, 2.0]])
    with pytest.raises(IndexError):
        cols.splice(1, 3, [[], []])
    with pytest.raises(ValueError, match="different lengths"):
        cols.splice(0, 0, [[1], []])
    with pytest.raises(ValueError, match="columns given"):
        cols.splice(0, 0, [[1]])
    assert np.array_equal(cols.column("x"), [1, 2])


def test_spliced_values_are_cast_as_numpy_casts():
    """Python floats (doubles) round to float32 as numpy's cast rounds them, NaN and the
    infinities kept; values already in an array of the column's type go in as they are."""
    from array import array

    values = [0.1, 1 / 3, 1e-46, 2.0 ** -149 * 1.5, 3.4028235e38, float("nan"), float("-inf"), -0.0]
    cols = DequeColumns({"x": "i", "y": "f"})
    cols.set([[1, 2], [0.5, 1.5]])
    cols.splice(1, 1, [list(range(len(values))), values])
    expected = np.asarray(values, dtype=np.float64).astype(np.float32)
    assert cols.column("y")[1:-1].tobytes() == expected.tobytes()
    cols.splice(0, 1, [array("i", [-7]), array("f", [2.5])])
    assert cols.column("x").tolist() == [-7, *range(len(values)), 2]
    with pytest.raises(TypeError):
        cols.splice(0, 0, [[1.5], [0.0]])  # (an int column takes no float)
