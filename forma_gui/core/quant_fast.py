"""Fast dequantization kernels, bit-identical to the readable formats in `quant`.

A kernel maps `blocks` (n, type_size) uint8 -> `out` (n, block_size) float32 for one
cache-sized chunk. Profiling showed the cost is not arithmetic but numpy's per-row
overhead: an operation on an (n, 16) strided slice pays a call per block (~9 ns each).
So every step here is either a flat operation over the whole chunk, or a copy that
moves each run of packed bytes as one opaque (void) item. The float work is then a few
long passes over `out`: widen the integer quants, multiply by the scales repeated per
element, subtract/add the mins, in the same order and dtypes as gguf-py so the bits
agree. (Every product here is exact in float32 anyway: an 11-bit f16 significand times
a small integer; the one rounding is the final add/subtract of the min.)
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

from forma_gui.core.quant_layout import field_offsets, q3_k_scales

Kernel = Callable[[np.ndarray, np.ndarray], None]

_ONES = 0x0101010101010101  # bit 0 of each byte of a uint64


# ---------------------------------------------------------------- byte movement

def _at(dtype: str, field: str) -> int:
    return field_offsets(dtype)[field][0]


def _column(blocks: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """One scalar field of every block as a strided (n,) view of `dtype` (one long inner loop)."""
    n, stride = blocks.shape
    return np.ndarray((n,), np.dtype(dtype), blocks, offset, (stride,))


def _f16(blocks: np.ndarray, dtype: str, field: str) -> np.ndarray:
    """An f16 field of every block -> contiguous (n, 1) float32 (exact)."""
    return _column(blocks, _at(dtype, field), "<f2").astype(np.float32)[:, None]


@lru_cache(maxsize=None)
def _item(nbytes: int) -> np.dtype:
    return np.dtype((np.void, nbytes))


def _gather(dst: np.ndarray, src: np.ndarray, offset: int, strides: tuple[int, ...]) -> None:
    """dst (..., run) uint8 <- runs of `src` bytes starting at `offset`, laid out by `strides`.

    Each run moves as one void item, so numpy loops over runs, not over short rows.
    """
    item = _item(dst.shape[-1])
    view = np.ndarray(dst.shape[:-1], item, src, offset, strides)
    np.copyto(dst.view(item)[..., 0], view)


def _field(blocks: np.ndarray, offset: int, runs: int, run: int) -> np.ndarray:
    """`runs * run` bytes at `offset` of every block -> contiguous (n, runs, run) uint8."""
    n, stride = blocks.shape
    field = np.empty((n, runs, run), np.uint8)
    _gather(field, blocks, offset, (stride, run))
    return field


def _plane(words: np.ndarray, p: int, width: int, to: int) -> np.ndarray:
    """Bits [p*width, (p+1)*width) of every byte moved to bit `to`, eight bytes per uint64 op."""
    mask = np.uint64(((1 << width) - 1) * _ONES << to)
    shift = p * width - to
    if shift == 0:
        return words & mask
    plane = words >> np.uint64(shift) if shift > 0 else words << np.uint64(-shift)
    plane &= mask  # also clears the bits that crossed over from the neighbouring byte
    return plane


def _planes(blocks: np.ndarray, offset: int, runs: int, run: int, width: int,
            to: int = 0) -> np.ndarray:
    """Unpack `width`-bit values in ggml's element order -> (n, runs * (8 // width) * run) uint8.

    The packed field is `runs` runs of `run` bytes at `offset` (run a multiple of 8); within
    a run the elements are bits [0, width) of every byte, then bits [width, 2 width), ...
    as in ggml's `q[l] >> shift` loops. Values land at bit `to`, ready to OR above others.
    """
    n = blocks.shape[0]
    field = _field(blocks, offset, runs, run)                           # (n, runs, run)
    planes = 8 // width
    if planes == 1:
        return field.reshape(n, -1)
    words = field.view(np.uint64)
    x = np.empty((n, runs, planes, run), np.uint8)                      # element order
    for p in range(planes):
        _gather(x[:, :, p], _plane(words, p, width, to), 0, (runs * run, run))
    return x.reshape(n, -1)


def _le_bits(blocks: np.ndarray, offset: int, nbytes: int, to: int) -> np.ndarray:
    """Bit j of the little-endian integer at `offset`, moved to bit `to` -> (n, 8 * nbytes) uint8."""
    packed = _field(blocks, offset, 1, nbytes)
    bits = np.unpackbits(packed.reshape(-1), bitorder="little")         # (n * 8 * nbytes,)
    bits <<= np.uint8(to)
    return bits.reshape(blocks.shape[0], -1)


# ---------------------------------------------------------------- float passes

def _as_float(out: np.ndarray, q: np.ndarray, offset: int = 0) -> None:
    """out <- float32(q − offset), the subtraction done in wrapping uint8 then read as int8."""
    if offset:
        q -= np.uint8(offset)
        q = q.view(np.int8)
    out[...] = q


def _repeat(per_sub: np.ndarray, out: np.ndarray) -> np.ndarray:
    """(n, n_sub) factors -> (n, block_size), each repeated over its sub-block."""
    return np.repeat(per_sub.reshape(-1), out.size // per_sub.size).reshape(out.shape)


def _scale(out: np.ndarray, d: np.ndarray, m: np.ndarray | None = None, sign: int = 1) -> None:
    """out = out · d (+ or −) m, with d and m given per block or per sub-block."""
    out *= _repeat(d, out)
    if m is None:
        return
    if sign > 0:
        out += _repeat(m, out)
    else:
        out -= _repeat(m, out)


# ---------------------------------------------------------------- one value per block

def _copy_kernel(storage: str) -> Kernel:
    def kernel(blocks: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, blocks.view(storage), casting="unsafe")
    return kernel


def _bf16(blocks: np.ndarray, out: np.ndarray) -> None:
    # bf16 is the top half of a float32: widen the 16 bits and shift them into place
    bits = out.view(np.uint32)
    np.copyto(bits, blocks.view("<u2"), casting="unsafe")
    bits <<= np.uint32(16)


# ---------------------------------------------------------------- 32-element blocks

def _nibbles_32(blocks: np.ndarray, dtype: str) -> np.ndarray:
    return _planes(blocks, _at(dtype, "qs"), 1, 16, 4)                  # (n, 32)


def _q5_quants(blocks: np.ndarray, dtype: str) -> np.ndarray:
    q = _nibbles_32(blocks, dtype)
    q |= _le_bits(blocks, _at(dtype, "qh"), 4, to=4)
    return q                                                            # (n, 32) 0..31


def _q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    _as_float(out, _nibbles_32(blocks, "Q4_0"), 8)
    _scale(out, _f16(blocks, "Q4_0", "d"))


def _q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    _as_float(out, _nibbles_32(blocks, "Q4_1"))
    _scale(out, _f16(blocks, "Q4_1", "d"), _f16(blocks, "Q4_1", "m"))


def _q5_0(blocks: np.ndarray, out: np.ndarray) -> None:
    _as_float(out, _q5_quants(blocks, "Q5_0"), 16)
    _scale(out, _f16(blocks, "Q5_0", "d"))


def _q5_1(blocks: np.ndarray, out: np.ndarray) -> None:
    _as_float(out, _q5_quants(blocks, "Q5_1"))
    _scale(out, _f16(blocks, "Q5_1", "d"), _f16(blocks, "Q5_1", "m"))


def _q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    _as_float(out, _field(blocks, _at("Q8_0", "qs"), 1, 32).view(np.int8).reshape(out.shape))
    _scale(out, _f16(blocks, "Q8_0", "d"))


# ---------------------------------------------------------------- K-quants (256 elements)

def _k_scale_min(blocks: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K packed 6-bit scales and mins -> (n, 8) float32 each (layout: quant_layout.k_scale_min).

    Worked on the three little-endian uint32 words of the 12 bytes, four values per op.
    """
    offset = _at(dtype, "scales")
    sc, mn, lo = (_column(blocks, offset + 4 * i, "<u4") for i in range(3))  # (n,) each
    low6, top2, low4 = np.uint32(0x3F3F3F3F), np.uint32(0x30303030), np.uint32(0x0F0F0F0F)
    scales = np.empty((blocks.shape[0], 2), "<u4")
    mins = np.empty((blocks.shape[0], 2), "<u4")
    scales[:, 0] = sc & low6
    scales[:, 1] = (lo & low4) | ((sc >> np.uint32(2)) & top2)
    mins[:, 0] = mn & low6
    mins[:, 1] = ((lo >> np.uint32(4)) & low4) | ((mn >> np.uint32(2)) & top2)
    return (scales.view(np.uint8).astype(np.float32),                  # (n, 8)
            mins.view(np.uint8).astype(np.float32))


def _k_with_mins(blocks: np.ndarray, out: np.ndarray, q: np.ndarray, dtype: str) -> None:
    """(d · scale) · q − (dmin · min) per 32-element sub-block (Q4_K, Q5_K)."""
    scales, mins = _k_scale_min(blocks, dtype)
    _as_float(out, q)
    _scale(out, _f16(blocks, dtype, "d") * scales, _f16(blocks, dtype, "dmin") * mins, -1)


def _q4_k(blocks: np.ndarray, out: np.ndarray) -> None:
    _k_with_mins(blocks, out, _planes(blocks, _at("Q4_K", "qs"), 4, 32, 4), "Q4_K")


def _q5_k(blocks: np.ndarray, out: np.ndarray) -> None:
    q = _planes(blocks, _at("Q5_K", "qs"), 4, 32, 4)                    # (n, 256) low 4 bits
    q |= _planes(blocks, _at("Q5_K", "qh"), 1, 32, 1, to=4)             # bit 4
    _k_with_mins(blocks, out, q, "Q5_K")


def _q6_k(blocks: np.ndarray, out: np.ndarray) -> None:
    q = _planes(blocks, _at("Q6_K", "ql"), 2, 64, 4)                    # (n, 256) low 4 bits
    q |= _planes(blocks, _at("Q6_K", "qh"), 2, 32, 2, to=4)             # bits 4-5
    scales = _field(blocks, _at("Q6_K", "scales"), 1, 16).view(np.int8).reshape(-1, 16)
    _as_float(out, q, 32)
    _scale(out, _f16(blocks, "Q6_K", "d") * scales.astype(np.float32))


def _q2_k(blocks: np.ndarray, out: np.ndarray) -> None:
    q = _planes(blocks, _at("Q2_K", "qs"), 2, 32, 2)                    # (n, 256) 0..3
    packed = _field(blocks, _at("Q2_K", "scales"), 1, 16).reshape(-1, 16)
    scales = (packed & np.uint8(15)).astype(np.float32)                 # (n, 16)
    mins = (packed >> np.uint8(4)).astype(np.float32)
    _as_float(out, q)
    _scale(out, _f16(blocks, "Q2_K", "d") * scales, _f16(blocks, "Q2_K", "dmin") * mins, -1)


def _q3_k(blocks: np.ndarray, out: np.ndarray) -> None:
    q = _planes(blocks, _at("Q3_K", "qs"), 2, 32, 2)                    # (n, 256) low 2 bits
    q |= _planes(blocks, _at("Q3_K", "hmask"), 1, 32, 1, to=2)          # bit 2
    scales = q3_k_scales(_field(blocks, _at("Q3_K", "scales"), 1, 12).reshape(-1, 12))
    _as_float(out, q, 4)
    _scale(out, _f16(blocks, "Q3_K", "d") * scales.astype(np.float32))


KERNELS: dict[str, Kernel] = {
    "F32": _copy_kernel("<f4"),
    "F16": _copy_kernel("<f2"),
    "BF16": _bf16,
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "Q8_0": _q8_0,
    "Q2_K": _q2_k,
    "Q3_K": _q3_k,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
}
