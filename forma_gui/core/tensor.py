"""Tensor layouts: where each element of a strided view lives, and which block holds it.

`Layout` is numpy's strided-array model with the buffer left out: a shape, strides and an
offset, in elements. Slicing, transposing and permuting only change those numbers, exactly
as numpy does for views; `offset_of(index)` says which element of the buffer an index
reaches. `BlockLayout` adds GGML's block quantization: a stored tensor is a row-major
sequence of blocks, each `block_size` elements in `type_size` bytes, rows holding whole
blocks, so element i lives in block i // block_size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import EllipsisType
from typing import Iterable, Union

from forma_gui.core.ggml_types import GGML_TYPES

Index = Union[int, slice, EllipsisType, tuple]


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides in elements of a C-ordered array.

    >>> row_major_strides((2, 3, 4))
    (12, 4, 1)
    """
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)  # numpy's rule: a zero-length axis does not zero the strides
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Layout:
    """A strided view: shape, strides (elements), offset (elements), itemsize (bytes).

    >>> Layout((2, 3)).strides
    (3, 1)
    >>> v = Layout((4, 6))[1:, ::-2]
    >>> v.shape, v.strides, v.offset, v.offset_of((0, 0))
    ((3, 3), (6, -2), 11, 11)
    """

    shape: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    offset: int = 0
    itemsize: int = 1

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        strides = row_major_strides(shape) if self.strides is None else \
            tuple(int(s) for s in self.strides)
        if len(strides) != len(shape):
            raise ValueError(f"{len(strides)} strides for {len(shape)} dimensions")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def byte_strides(self) -> tuple[int, ...]:
        """Strides in bytes, as numpy's `ndarray.strides` reports them."""
        return tuple(s * self.itemsize for s in self.strides)

    @property
    def byte_offset(self) -> int:
        """`offset` in bytes."""
        return self.offset * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        """C-contiguous by numpy's rule: axes of length 1 may have any stride."""
        if self.size == 0:
            return True
        expected = 1
        for dim, stride in zip(reversed(self.shape), reversed(self.strides)):
            if dim != 1 and stride != expected:
                return False
            expected *= dim
        return True

    def offset_of(self, index: Iterable[int]) -> int:
        """Element offset in the buffer of one full index (negative indices count from the end).

        >>> Layout((2, 3)).transpose().offset_of((2, 1))
        5
        """
        index = tuple(index)
        if len(index) != self.ndim:
            raise IndexError(f"{len(index)} indices for {self.ndim} dimensions")
        return self.offset + sum(_wrap(i, d, axis) * s for axis, (i, d, s)
                                 in enumerate(zip(index, self.shape, self.strides)))

    def byte_offset_of(self, index: Iterable[int]) -> int:
        """`offset_of` in bytes."""
        return self.offset_of(index) * self.itemsize

    def transpose(self) -> Layout:
        """Axes reversed, as `ndarray.T`."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def permute(self, axes: Iterable[int]) -> Layout:
        """Axes reordered, as `np.transpose(a, axes)`."""
        axes = tuple(a + self.ndim if a < 0 else a for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"{axes} is not a permutation of {self.ndim} axes")
        return Layout(tuple(self.shape[a] for a in axes), tuple(self.strides[a] for a in axes),
                      self.offset, self.itemsize)

    def __getitem__(self, key: Index) -> Layout:
        """Basic indexing as numpy: ints drop an axis, slices keep it (any step), `...` fills."""
        keys = _expand(key if isinstance(key, tuple) else (key,), self.ndim)
        shape, strides, offset = [], [], self.offset
        for axis, (k, dim, stride) in enumerate(zip(keys, self.shape, self.strides)):
            if isinstance(k, slice):
                start, stop, step = k.indices(dim)
                length = len(range(start, stop, step))
                if length == 0:  # numpy: an empty slice keeps the stride and the start
                    start, step = 0, 1
                shape.append(length)
                strides.append(stride * step)
                offset += start * stride
            else:
                offset += _wrap(k, dim, axis) * stride
        return Layout(tuple(shape), tuple(strides), offset, self.itemsize)


def _wrap(i: int, dim: int, axis: int) -> int:
    """A Python-style index into an axis of length `dim`."""
    i = int(i)
    if not -dim <= i < dim:
        raise IndexError(f"index {i} is out of bounds for axis {axis} with size {dim}")
    return i + dim if i < 0 else i


def _expand(keys: tuple, ndim: int) -> list[int | slice]:
    """One key per axis: `...` becomes full slices, missing trailing keys too."""
    if sum(k is Ellipsis for k in keys) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    for k in keys:
        if not (k is Ellipsis or isinstance(k, slice) or _is_int(k)):
            raise IndexError(f"only integers, slices and '...' are valid indices, not {k!r}")
    n_real = sum(k is not Ellipsis for k in keys)
    if n_real > ndim:
        raise IndexError(f"too many indices: {n_real} for {ndim} dimensions")
    fill = [slice(None)] * (ndim - n_real)
    if Ellipsis in keys:
        at = keys.index(Ellipsis)
        return [*keys[:at], *fill, *keys[at + 1:]]
    return [*keys, *fill]


def _is_int(k: object) -> bool:
    return hasattr(k, "__index__") and not isinstance(k, bool)


@dataclass(frozen=True)
class BlockLayout:
    """A stored tensor as a row-major run of blocks starting at byte `offset` of its file.

    >>> q = BlockLayout.of((2, 64), "Q4_0", offset=1024)   # 18-byte blocks of 32
    >>> q.n_blocks, q.block_of(70)
    (4, (2, 1060, 1078))
    """

    shape: tuple[int, ...]
    block_size: int      # elements per block (1 for plain element types)
    type_size: int       # bytes per block
    offset: int = 0      # absolute byte offset of the first block

    @classmethod
    def of(cls, shape: tuple[int, ...], dtype: str, offset: int = 0) -> BlockLayout:
        """The layout of a GGML-typed tensor (sizes from the GGML_TYPES table)."""
        t = GGML_TYPES[dtype]
        return cls(tuple(shape), t.block_size, t.type_size, offset)

    def __post_init__(self) -> None:
        if self.shape and self.shape[-1] % self.block_size:
            raise ValueError(f"rows of {self.shape[-1]} elements are not whole blocks of "
                             f"{self.block_size}")

    @property
    def elements(self) -> Layout:
        """The logical row-major element layout."""
        return Layout(self.shape)

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def n_blocks(self) -> int:
        """Blocks the tensor is stored in."""
        return self.n_elements // self.block_size

    @property
    def nbytes(self) -> int:
        return self.n_blocks * self.type_size

    @property
    def row_bytes(self) -> int:
        """Bytes of one stored row (the last axis), scales included."""
        return (self.shape[-1] if self.shape else 1) // self.block_size * self.type_size

    def block_of(self, flat_index: int) -> tuple[int, int, int]:
        """(block index, first byte, byte after the last) of the block holding element i.

        `flat_index` counts elements in row-major order of the stored tensor.
        """
        if not 0 <= flat_index < self.n_elements:
            raise IndexError(f"element {flat_index} is out of range for {self.n_elements}")
        block = flat_index // self.block_size
        start = self.offset + block * self.type_size
        return block, start, start + self.type_size

    def block_at(self, index: Iterable[int]) -> tuple[int, int, int]:
        """`block_of` for a full multi-dimensional index."""
        return self.block_of(self.elements.offset_of(index))

    def elements_of(self, block: int) -> range:
        """Flat indices of the elements block `block` holds."""
        if not 0 <= block < self.n_blocks:
            raise IndexError(f"block {block} is out of range for {self.n_blocks}")
        return range(block * self.block_size, (block + 1) * self.block_size)
