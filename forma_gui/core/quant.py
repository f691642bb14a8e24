"""GGML block formats: dequantize bit for bit as ggml/gguf-py does.

Block sizes come from `ggml_types.GGML_TYPES`. Every dequantizer works on a
`(n_blocks, type_size)` uint8 array and writes a `(n_blocks, block_size)` float32
array, doing the float32 arithmetic in the same order as gguf-py so that results are
bit-identical (the f16 scale is widened to float32 first, then multiplied).
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from forma_gui.core.ggml_types import GGML_TYPES

_F16 = np.dtype("<f2")
_F32 = np.dtype("<f4")

#: output elements per chunk when the caller does not say: 1 MiB of float32, L2-sized
DEFAULT_CHUNK_ELEMENTS = 1 << 18

Kernel = Callable[[np.ndarray, np.ndarray], None]


# ---------------------------------------------------------------- input handling

def _as_bytes(raw: np.ndarray | bytes | bytearray | memoryview) -> np.ndarray:
    """`raw` as a flat uint8 array, without copying when it is already contiguous."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return np.frombuffer(raw, dtype=np.uint8)
    arr = np.ascontiguousarray(raw)
    return arr.reshape(-1).view(np.uint8)


def _type(dtype: str):
    try:
        return GGML_TYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown GGML type {dtype!r}") from None


def _as_blocks(raw: np.ndarray | bytes, dtype: str) -> np.ndarray:
    """`raw` as `(n_blocks, type_size)` uint8; the byte count must be whole blocks."""
    t = _type(dtype)
    data = _as_bytes(raw)
    if data.size % t.type_size:
        raise ValueError(f"{data.size} bytes is not a whole number of {dtype} blocks "
                         f"of {t.type_size} bytes")
    return data.reshape(-1, t.type_size)


def _f16(field: np.ndarray) -> np.ndarray:
    """(n, 2) uint8 little-endian half floats -> (n, 1) float32 (exact)."""
    return field.view(_F16).astype(np.float32)


# ---------------------------------------------------------------- kernels
# Each kernel maps blocks (n, type_size) uint8 -> out (n, block_size) float32.

def _float_kernel(storage: str) -> Kernel:
    """Kernel for a one-element-per-block type stored as numpy dtype `storage`."""
    src = np.dtype(storage)

    def kernel(blocks: np.ndarray, out: np.ndarray) -> None:
        out[:, 0] = blocks.view(src)[:, 0]
    return kernel


def _bf16_kernel(blocks: np.ndarray, out: np.ndarray) -> None:
    # bf16 is the top half of a float32: shift the 16 bits into place
    bits = blocks.view("<u2")[:, 0].astype(np.uint32) << np.uint32(16)  # (n,)
    out[:, 0] = bits.view(np.float32)


def _nibbles(qs: np.ndarray, group: int) -> np.ndarray:
    """(n, k) packed bytes -> (n, 2k) nibbles: per `group` bytes, the low nibbles, then the high."""
    g = qs.reshape(qs.shape[0], -1, 1, group)                       # (n, k/group, 1, group)
    both = g >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)  # (n, k/group, 2, group)
    return (both & np.uint8(0x0F)).reshape(qs.shape[0], -1)


def _q4_0_kernel(blocks: np.ndarray, out: np.ndarray) -> None:
    d = _f16(blocks[:, 0:2])                                   # (n, 1)
    q = _nibbles(blocks[:, 2:18], 16).view(np.int8) - np.int8(8)  # (n, 32)
    np.multiply(d, q.astype(np.float32), out=out)


def _q4_1_kernel(blocks: np.ndarray, out: np.ndarray) -> None:
    d, m = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])            # (n, 1) each
    q = _nibbles(blocks[:, 4:20], 16).astype(np.float32)          # (n, 32)
    np.multiply(d, q, out=out)
    out += m


def _q8_0_kernel(blocks: np.ndarray, out: np.ndarray) -> None:
    d = _f16(blocks[:, 0:2])                                   # (n, 1)
    q = blocks[:, 2:34].view(np.int8).astype(np.float32)       # (n, 32)
    np.multiply(q, d, out=out)


KERNELS: dict[str, Kernel] = {
    "F32": _float_kernel("<f4"),
    "F16": _float_kernel("<f2"),
    "BF16": _bf16_kernel,
    "Q4_0": _q4_0_kernel,
    "Q4_1": _q4_1_kernel,
    "Q8_0": _q8_0_kernel,
}


def _kernel(dtype: str) -> Kernel:
    _type(dtype)
    try:
        return KERNELS[dtype]
    except KeyError:
        raise NotImplementedError(f"dequantization of {dtype} is not implemented") from None


# ---------------------------------------------------------------- public API

def n_elements(raw: np.ndarray | bytes, dtype: str) -> int:
    """Number of values stored in `raw` as `dtype`."""
    t = _type(dtype)
    return _as_blocks(raw, dtype).shape[0] * t.block_size


def _default_chunk_blocks(dtype: str) -> int:
    return max(1, DEFAULT_CHUNK_ELEMENTS // _type(dtype).block_size)


def dequantize_into(raw: np.ndarray | bytes, dtype: str, out: np.ndarray, *,
                    chunk_blocks: int | None = None) -> np.ndarray:
    """Dequantize `raw` into the preallocated contiguous float32 `out`, chunk by chunk; return `out`.

    Working in cache-sized chunks keeps temporaries small and out of the page-fault path.
    """
    kernel = _kernel(dtype)
    blocks = _as_blocks(raw, dtype)                           # (n_blocks, type_size)
    block_size = _type(dtype).block_size
    if out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError("out must be a C-contiguous float32 array")
    if out.size != blocks.shape[0] * block_size:
        raise ValueError(f"out has {out.size} elements, the data holds "
                         f"{blocks.shape[0] * block_size}")
    flat = out.reshape(-1, block_size)                        # (n_blocks, block_size) view
    step = chunk_blocks if chunk_blocks is not None else _default_chunk_blocks(dtype)
    if step < 1:
        raise ValueError(f"chunk_blocks must be positive, got {step}")
    for start in range(0, blocks.shape[0], step):
        kernel(blocks[start:start + step], flat[start:start + step])
    return out


def dequantize(raw: np.ndarray | bytes, dtype: str) -> np.ndarray:
    """All values of `raw` (whole blocks of `dtype`) as a new 1-D float32 array.

    >>> dequantize(np.array([0x3C00, 0xC000], dtype=np.uint16), "F16").tolist()
    [1.0, -2.0]
    """
    out = np.empty(n_elements(raw, dtype), dtype=np.float32)
    return dequantize_into(raw, dtype, out)


def dequantize_chunks(raw: np.ndarray | bytes, dtype: str, *,
                      chunk_elements: int = 1 << 20) -> Iterator[tuple[int, np.ndarray]]:
    """Yield `(first_element_index, float32 values)` chunk by chunk, for progress and cancelling.

    Chunks are whole blocks (at least one); each yielded array is new and owned by the caller.
    """
    kernel = _kernel(dtype)
    blocks = _as_blocks(raw, dtype)
    block_size = _type(dtype).block_size
    step = max(1, chunk_elements // block_size)
    for start in range(0, blocks.shape[0], step):
        part = blocks[start:start + step]
        values = np.empty((part.shape[0], block_size), dtype=np.float32)
        kernel(part, values)
        yield start * block_size, values.reshape(-1)
