"""Layout agrees with numpy on every shape, permutation and slice; BlockLayout with gguf-py."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core.tensor import BlockLayout, Layout
from tests.conftest import MAX_EXAMPLES, data_file

DTYPES = [np.int16, np.int32, np.int64]
shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)


def element_offset(view: np.ndarray, base: np.ndarray) -> int:
    """Where numpy put the view's first element, in elements of `base`."""
    delta = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return delta // base.itemsize


def assert_same(layout: Layout, view: np.ndarray, base: np.ndarray) -> None:
    """Shape, strides, offset, contiguity and every element's offset match numpy."""
    assert layout.shape == view.shape
    if base.size:  # numpy gives freshly made empty arrays zero strides, depending on version
        assert layout.byte_strides == view.strides
    assert layout.nbytes == view.nbytes and layout.size == view.size
    assert layout.ndim == view.ndim
    assert layout.is_contiguous == view.flags.c_contiguous
    if view.size:
        assert layout.offset == element_offset(view, base)
        for index in np.ndindex(*view.shape):
            assert layout.offset_of(index) == view[index]  # base holds arange: value = offset


@st.composite
def keys(draw, shape: tuple[int, ...]):
    """A basic index for `shape`: ints, slices with any step, maybe one Ellipsis."""
    parts = []
    for dim in shape[:draw(st.integers(0, len(shape)))]:
        if dim and draw(st.booleans()):
            parts.append(draw(st.integers(-dim, dim - 1)))
        else:
            bound = st.none() | st.integers(-dim - 2, dim + 2)
            step = draw(st.none() | st.integers(-3, 3).filter(bool))
            parts.append(slice(draw(bound), draw(bound), step))
    if draw(st.booleans()):  # `...` stands for the axes the parts leave out, which trail
        at = draw(st.integers(0, len(parts))) if len(parts) == len(shape) else len(parts)
        parts.insert(at, Ellipsis)
    return parts[0] if len(parts) == 1 and draw(st.booleans()) else tuple(parts)


def np_index(view: np.ndarray, key) -> np.ndarray:
    """view[key] as a view even when every axis gets an integer (numpy would give a scalar)."""
    key = key if isinstance(key, tuple) else (key,)
    return view[key if Ellipsis in key else (*key, Ellipsis)]


@st.composite
def operations(draw):
    shape = draw(shapes)
    dtype = draw(st.sampled_from(DTYPES))
    ops, current = [], shape
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["permute", "transpose", "slice"]))
        if kind == "permute":
            arg = tuple(draw(st.permutations(range(len(current)))))
            current = tuple(current[a] for a in arg)
        elif kind == "slice":
            arg = draw(keys(current))
            current = np.empty(current)[arg].shape
        else:
            arg, current = None, current[::-1]
        ops.append((kind, arg))
    return shape, dtype, ops


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(operations())
def test_views_agree_with_numpy(case) -> None:
    shape, dtype, ops = case
    base = np.arange(math.prod(shape), dtype=dtype)
    view = base.reshape(shape)
    layout = Layout(shape, itemsize=base.itemsize)
    assert_same(layout, view, base)
    for kind, arg in ops:
        if kind == "permute":
            view, layout = np.transpose(view, arg), layout.permute(arg)
        elif kind == "transpose":
            view, layout = view.T, layout.transpose()
        else:
            view, layout = np_index(view, arg), layout[arg]
        assert_same(layout, view, base)


@st.composite
def strided(draw):
    """Any in-bounds strided layout, negative strides included."""
    shape = draw(st.lists(st.integers(1, 4), max_size=3).map(tuple))
    strides = tuple(draw(st.integers(-7, 7)) for _ in shape)
    low = sum(min(0, (d - 1) * s) for d, s in zip(shape, strides))
    high = sum(max(0, (d - 1) * s) for d, s in zip(shape, strides))
    offset = -low + draw(st.integers(0, 3))
    return shape, strides, offset, offset + high + 1


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(strided(), st.sampled_from(DTYPES), st.data())
def test_as_strided_agrees_with_numpy(case, dtype, data) -> None:
    shape, strides, offset, n = case
    base = np.arange(n, dtype=dtype)
    layout = Layout(shape, strides, offset, base.itemsize)
    view = np.lib.stride_tricks.as_strided(base[offset:], shape, layout.byte_strides)
    assert_same(layout, view, base)
    key = data.draw(keys(shape))
    assert_same(layout[key], np_index(view, key), base)


def test_known_answers() -> None:
    assert Layout((2, 3)).strides == (3, 1)
    assert Layout((2, 3), itemsize=4).byte_strides == (12, 4)
    assert Layout(()).offset_of(()) == 0 and Layout(()).size == 1
    t = Layout((2, 3)).transpose()
    assert (t.shape, t.strides, t.is_contiguous) == ((3, 2), (1, 3), False)
    assert Layout((5,))[::-1].offset_of((0,)) == 4
    assert Layout((4, 4))[1, 2:].offset == 6
    assert Layout((1, 3), strides=(99, 1)).is_contiguous  # length-1 axes do not count


@pytest.mark.parametrize("call", [
    lambda: Layout((2, 3))[2], lambda: Layout((2, 3))[0, 0, 0], lambda: Layout((2,))[..., ...],
    lambda: Layout((2, 3)).offset_of((0,)), lambda: Layout((2,))["a"],
])
def test_bad_indices(call) -> None:
    with pytest.raises(IndexError):
        call()


def test_bad_layouts() -> None:
    with pytest.raises(ValueError):
        Layout((2, 3)).permute((0, 0))
    with pytest.raises(ValueError):
        Layout((2, 3), strides=(1,))
    with pytest.raises(ValueError):
        BlockLayout.of((2, 40), "Q4_0")


# -- blocks ----------------------------------------------------------------------------------

def test_block_layout_known_answers() -> None:
    """Q4_0: 32 elements in 18 bytes (2-byte scale + 16 bytes of nibbles), per ggml."""
    q = BlockLayout.of((3, 64), "Q4_0", offset=100)
    assert (q.n_blocks, q.nbytes, q.row_bytes) == (6, 108, 36)
    assert q.block_of(0) == (0, 100, 118)
    assert q.block_of(31) == (0, 100, 118) and q.block_of(32) == (1, 118, 136)
    assert q.block_at((2, 63)) == (5, 190, 208)
    assert list(q.elements_of(1)) == list(range(32, 64))
    f = BlockLayout.of((4,), "F16", offset=8)
    assert f.block_of(3) == (3, 14, 16)
    with pytest.raises(IndexError):
        q.block_of(192)


def test_block_bytes_dequantize_to_the_right_elements() -> None:
    """The bytes block_of names, dequantized alone by gguf-py, are those elements' values."""
    gguf = pytest.importorskip("gguf")
    from forma_gui import open_weights

    path = data_file("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
    with open(path, "rb") as f, open_weights(path) as w:
        for name in ("blk.0.ffn_down.weight", "token_embd.weight"):
            qtype = gguf.GGMLQuantizationType[w.tensor(name).dtype]
            full = gguf.quants.dequantize(w.raw(name), qtype).ravel()
            q = w.layout(name)
            for i in (0, 31, 32, 1000, q.n_elements - 1):
                block, start, end = q.block_of(i)
                f.seek(start)
                values = gguf.quants.dequantize(np.frombuffer(f.read(end - start), np.uint8),
                                                qtype)
                elements = q.elements_of(block)
                np.testing.assert_array_equal(values, full[elements.start:elements.stop])
                assert i in elements
