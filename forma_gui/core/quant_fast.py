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
from typing import Callable, NamedTuple

import numpy as np

from forma_gui.core.quant_layout import (
    IQ4_KVALUES, MXFP4_KVALUES, e8m0_half, field_offsets, iq4_xs_scales, q3_k_scales,
)

_ONES = 0x0101010101010101  # bit 0 of each byte of a uint64


# ---------------------------------------------------------------- byte movement

def _at(dtype: str, field: str) -> int:
    return field_offsets(dtype)[field][0]


def _column(blocks: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """One scalar field of every block as a strided (n,) view of `dtype` (one long inner loop)."""
    n, stride = blocks.shape
    return np.ndarray((n,), np.dtype(dtype), blocks, offset, (stride,))


def _f16(blocks: np.ndarray, dtype: str, field: str) -> np.ndarray:
    """An f16 field of every block -> contiguous (n, 1) float32 (exact, by table lookup)."""
    bits = _column(blocks, _at(dtype, field), "<u2").astype(np.intp)
    return np.take(_f16_table(), bits, mode="clip")[:, None]


@lru_cache(maxsize=None)
def _f16_table() -> np.ndarray:
    """All 65536 half floats as float32 (numpy's own conversion, so NaN payloads agree).

    numpy's f16 -> f32 cast is scalar code (its x86 baseline has no F16C); looking the
    bits up in this 256 KB table is about twice as fast and gives the same bits.
    """
    return np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


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
    field = np.empty((n, 1, runs * run), np.uint8)
    _gather(field, blocks, offset, (stride, 0))                         # one item per block
    return field.reshape(n, runs, run)


@lru_cache(maxsize=None)
def _word_shifts(runs: int, planes: int, run: int, width: int) -> np.ndarray:
    """Shift of each uint64 word of a (runs, planes, run)-byte block: plane p shifts by p*width."""
    per_run = np.repeat(np.arange(planes, dtype=np.uint64) * np.uint64(width), run // 8)
    return np.tile(per_run, runs)                                        # (runs * planes * run / 8,)


def _planes(blocks: np.ndarray, offset: int, runs: int, run: int, width: int,
            to: int = 0) -> np.ndarray:
    """Unpack `width`-bit values in ggml's element order -> (n, runs * (8 // width) * run) uint8.

    The packed field is `runs` runs of `run` bytes at `offset` (run a multiple of 8); within
    a run the elements are bits [0, width) of every byte, then bits [width, 2 width), ...
    as in ggml's `q[l] >> shift` loops. Values land at bit `to`, ready to OR above others.
    Shifts and masks work on uint64 words, eight bytes at a time: a mask that is the same
    in every byte also clears the bits that crossed over from the neighbouring byte.
    """
    n = blocks.shape[0]
    planes = 8 // width
    if planes == 1:
        return _field(blocks, offset, runs, run).reshape(n, -1)
    x = np.empty((n, runs, planes, run), np.uint8)                      # element order
    if planes == 2:
        _nibble_planes(x, blocks, offset)
    else:
        _narrow_planes(x, blocks, offset, width)
    words = x.view(np.uint64)
    words &= np.uint64(((1 << width) - 1) * _ONES)
    if to:
        words <<= np.uint64(to)
    return x.reshape(n, -1)


def _nibble_planes(x: np.ndarray, blocks: np.ndarray, offset: int) -> None:
    """x[:, :, p] <- the field shifted right by 4p (unmasked), p = 0, 1.

    The field is gathered once; each plane is one flat shift and one copy whose
    destination runs coalesce into a single strided loop (no per-block rows).
    """
    n, runs, _, run = x.shape
    words = _field(blocks, offset, runs, run).view(np.uint64)
    item = _item(run)
    np.copyto(x[:, :, 0].view(item), words.view(item))
    np.copyto(x[:, :, 1].view(item), (words >> np.uint64(4)).view(item))


def _narrow_planes(x: np.ndarray, blocks: np.ndarray, offset: int, width: int) -> None:
    """x[:, :, p] <- the field shifted right by p * width (unmasked), for 4 or 8 planes.

    Each run is copied once per plane straight from the blocks (a zero stride repeats
    it), then every word is shifted by its plane's amount in one op: with 32+ words per
    block that beats a flat shift and a copy per plane.
    """
    n, runs, planes, run = x.shape
    _gather(x, blocks, offset, (blocks.shape[1], run, 0))
    words = x.view(np.uint64).reshape(n, -1)                            # (n, words per block)
    words >>= _word_shifts(runs, planes, run, width)


# blocks a per-word pattern covers: ops against a pattern as long as the data run as one flat
# loop, twice as fast as broadcasting a row (which also pays a call per row)
_PATTERN_BLOCKS = 512


def _copies(blocks: np.ndarray, offset: int, runs: int, run: int, planes: int) -> np.ndarray:
    """(n, runs, planes, run) uint8: each `run`-byte run of the field at `offset`, once per plane."""
    n, stride = blocks.shape
    if run <= 32:   # np.repeat moves items of up to 32 bytes at a fixed size: ~2x copyto
        field = np.ndarray((n, runs), _item(run), blocks, offset, (stride, run))
        return np.repeat(field, planes, axis=1).view(np.uint8).reshape(n, runs, planes, run)
    x = np.empty((n, runs, planes, run), np.uint8)
    _gather(x, blocks, offset, (stride, run, 0))                        # zero stride: once per plane
    return x


def _plane_pattern(per_plane: tuple[int, ...], runs: int, run: int) -> np.ndarray:
    """(_PATTERN_BLOCKS * words per block,) uint64: each word of plane p gets per_plane[p]."""
    words = np.repeat(np.array(per_plane, np.uint64), run // 8)         # (planes * run / 8,)
    return np.tile(words, runs * _PATTERN_BLOCKS)


def _per_word(op: np.ufunc, words: np.ndarray, pattern: np.ndarray) -> None:
    """words (n, w) op= a per-word pattern (w words per block), in place, in flat loops."""
    n, w = words.shape
    for first in range(0, n, _PATTERN_BLOCKS):
        flat = words[first:first + _PATTERN_BLOCKS].reshape(-1)
        op(flat, pattern[:flat.size], out=flat)


class _Placement(NamedTuple):
    """How `_placed` moves each plane: per-word left shifts, one right shift, the mask."""

    left: np.ndarray | None       # per-word pattern, None when no word moves left
    right: np.uint64 | None       # shift of every word, None for none
    mask: np.uint64 | np.ndarray  # one mask for all words, or a per-word pattern


@lru_cache(maxsize=None)
def _placement(runs: int, run: int, width: int, to: tuple[int, ...]) -> _Placement:
    """Plane p moves by to[p] - p * width (negative: right): left by that + `right`, then right."""
    moves = [bit - p * width for p, bit in enumerate(to)]
    right = max(0, -min(moves))
    lefts = tuple(move + right for move in moves)
    masks = tuple((((1 << width) - 1) << bit) * _ONES for bit in to)
    return _Placement(
        _plane_pattern(lefts, runs, run) if any(lefts) else None,
        np.uint64(right) if right else None,
        np.uint64(masks[0]) if len(set(masks)) == 1 else _plane_pattern(masks, runs, run))


def _placed(blocks: np.ndarray, offset: int, runs: int, run: int, width: int,
            to: tuple[int, ...]) -> np.ndarray:
    """Unpack like `_planes`, but plane p's values at bits [to[p], to[p] + width), zeros elsewhere.

    -> (n, runs * planes * run) uint8. Placing a value where the next step wants it (above
    the low bits it is ORed with, or at the sign bit) saves a pass there. numpy's shifts
    take no signed amounts, so every word goes left by its plane's amount plus `right`,
    then all go right by `right` (`_placement`). As to[p] + width <= 8, the wanted bits
    never leave their word's top byte, and the bits that cross between bytes land
    outside [to[p], to[p] + width), where the mask clears them.
    """
    n = blocks.shape[0]
    plan = _placement(runs, run, width, to)
    x = _copies(blocks, offset, runs, run, 8 // width)
    words = x.view(np.uint64).reshape(n, -1)                            # (n, words per block)
    if plan.left is not None:
        _per_word(np.left_shift, words, plan.left)
    if plan.right is not None:
        words >>= plan.right
    if plan.mask.ndim:
        _per_word(np.bitwise_and, words, plan.mask)
    else:
        words &= plan.mask
    return x.reshape(n, -1)


def _le_bits(blocks: np.ndarray, offset: int, nbytes: int, to: int) -> np.ndarray:
    """Bit j of the little-endian integer at `offset`, moved to bit `to` -> (n, 8 * nbytes) uint8."""
    packed = _field(blocks, offset, 1, nbytes)
    bits = np.unpackbits(packed.reshape(-1), bitorder="little")         # (n * 8 * nbytes,)
    bits.view(np.uint64)[...] <<= np.uint64(to)                         # 0/1 bytes: no carries
    return bits.reshape(blocks.shape[0], -1)


# ---------------------------------------------------------------- float passes

def _as_float(out: np.ndarray, q: np.ndarray, offset: int = 0) -> None:
    """out <- float32(q − offset), the subtraction done in wrapping uint8 then read as int8."""
    if offset:
        q -= np.uint8(offset)
        q = q.view(np.int8)
    out[...] = q.reshape(out.shape)


def _repeat(per_sub: np.ndarray, out: np.ndarray) -> np.ndarray:
    """(n, n_sub) factors -> (n, block_size), each repeated over its sub-block.

    Measured faster than broadcasting (n * n_sub, per) against (n * n_sub, 1): that pays
    numpy's loop setup once per sub-block, the repeat once per chunk.
    """
    return np.repeat(per_sub.reshape(-1), out.size // per_sub.size).reshape(out.shape)


def _scale(out: np.ndarray, d: np.ndarray, m: np.ndarray | None = None, sign: int = 1) -> None:
    """out = out · d (+ or −) m, with d and m given per block or per sub-block, as gguf-py."""
    out *= _repeat(d, out)
    if m is None:
        return
    if sign > 0:
        out += _repeat(m, out)
    else:
        out -= _repeat(m, out)


# ---------------------------------------------------------------- kernels

class Kernel(NamedTuple):
    """A format's fast path in two steps.

    `factors(blocks)` decodes the small per-block numbers (scales, mins; (n, ...) arrays)
    for many blocks at once; `apply(blocks, factors, out)` does the per-element work for
    one cache-sized chunk, given those rows of the factors. Splitting them keeps the
    per-chunk numpy calls few: their fixed cost, not arithmetic, dominated small chunks.
    """

    factors: Callable[[np.ndarray], tuple[np.ndarray, ...]]
    apply: Callable[[np.ndarray, tuple[np.ndarray, ...], np.ndarray], None]


def _no_factors(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    return ()


def _f16_factors(dtype: str, *names: str) -> Callable[[np.ndarray], tuple[np.ndarray, ...]]:
    """Factors that are just f16 fields of the block (d, m)."""
    return lambda blocks: tuple(_f16(blocks, dtype, name) for name in names)


# ---------------------------------------------------------------- one value per block

def _f16_values(blocks: np.ndarray, factors: tuple, out: np.ndarray) -> None:
    index = np.empty(out.size, np.intp)
    np.copyto(index, blocks.view("<u2").reshape(-1), casting="unsafe")
    np.take(_f16_table(), index, out=out.reshape(-1), mode="clip")


def _f32_values(blocks: np.ndarray, factors: tuple, out: np.ndarray) -> None:
    np.copyto(out, blocks.view("<f4"))


def _bf16_values(blocks: np.ndarray, factors: tuple, out: np.ndarray) -> None:
    # bf16 is the top half of a float32: widen the 16 bits and shift them into place
    bits = out.view(np.uint32)
    np.copyto(bits, blocks.view("<u2"), casting="unsafe")
    bits <<= np.uint32(16)


# ---------------------------------------------------------------- 32-element blocks

def _q4_quants(blocks: np.ndarray, dtype: str) -> np.ndarray:
    return _planes(blocks, _at(dtype, "qs"), 1, 16, 4)                  # (n, 32) 0..15


def _q5_quants(blocks: np.ndarray, dtype: str) -> np.ndarray:
    q = _q4_quants(blocks, dtype)
    q |= _le_bits(blocks, _at(dtype, "qh"), 4, to=4)
    return q                                                            # (n, 32) 0..31


def _symmetric(quants: Callable[[np.ndarray, str], np.ndarray], dtype: str, offset: int) -> Kernel:
    """d · (q − offset): Q4_0, Q5_0."""
    def apply(blocks: np.ndarray, factors: tuple, out: np.ndarray) -> None:
        _as_float(out, quants(blocks, dtype), offset)
        _scale(out, *factors)
    return Kernel(_f16_factors(dtype, "d"), apply)


def _affine(quants: Callable[[np.ndarray, str], np.ndarray], dtype: str) -> Kernel:
    """d · q + m: Q4_1, Q5_1."""
    def apply(blocks: np.ndarray, factors: tuple, out: np.ndarray) -> None:
        _as_float(out, quants(blocks, dtype))
        _scale(out, *factors)
    return Kernel(_f16_factors(dtype, "d", "m"), apply)


def _q8_0_values(blocks: np.ndarray, factors: tuple, out: np.ndarray) -> None:
    _as_float(out, _field(blocks, _at("Q8_0", "qs"), 1, 32).view(np.int8))
    _scale(out, *factors)


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


def _k_min_factors(dtype: str) -> Callable[[np.ndarray], tuple[np.ndarray, ...]]:
    """Q4_K/Q5_K: (d · scale / 2^at, dmin · min) per 32-element sub-block, (n, 8) each.

    The quants come as q · 2^at (`_K_QUANT_AT`: where their planes are placed), so the
    scale carries 2^-at: the sub-blocks alternate between the two nibble planes.
    """
    units = [np.float32(2.0 ** -bit) for bit in _K_QUANT_AT[dtype]]

    def factors(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
        scales, mins = _k_scale_min(blocks, dtype)
        for plane, unit in enumerate(units):
            if unit != 1:
                column = scales.reshape(-1)[plane::len(units)]             # one strided loop
                column *= unit
        return _f16(blocks, dtype, "d") * scales, _f16(blocks, dtype, "dmin") * mins
    return factors


def _q2_k_factors(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    """(d · scale, dmin · min) per 16-element sub-block, (n, 16) each: 4-bit halves of a byte."""
    packed = _field(blocks, _at("Q2_K", "scales"), 1, 16).reshape(-1, 16)
    return (_f16(blocks, "Q2_K", "d") * (packed & np.uint8(15)).astype(np.float32),
            _f16(blocks, "Q2_K", "dmin") * (packed >> np.uint8(4)).astype(np.float32))


def _q3_k_factors(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    scales = q3_k_scales(_field(blocks, _at("Q3_K", "scales"), 1, 12).reshape(-1, 12))
    return (_f16(blocks, "Q3_K", "d") * scales.astype(np.float32),)    # (n, 16)


def _q6_k_factors(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    """(d / 4 · scale) per 16-element sub-block, (n, 16): the quants come as 4 (q − 32).

    As for `_K_QUANT_AT`, the power of two changes no bit of the products.
    """
    scales = _field(blocks, _at("Q6_K", "scales"), 1, 16).view(np.int8).reshape(-1, 16)
    quarter_d = _f16(blocks, "Q6_K", "d") * np.float32(0.25)
    return (quarter_d * scales.astype(np.float32),)                     # (n, 16)


def _k_quant(factors: Callable[[np.ndarray], tuple[np.ndarray, ...]],
             quants: Callable[[np.ndarray], np.ndarray], offset: int) -> Kernel:
    """(d · scale) · (q − offset) [− dmin · min] per sub-block."""
    def apply(blocks: np.ndarray, f: tuple, out: np.ndarray) -> None:
        _as_float(out, quants(blocks), offset)
        _scale(out, *f, sign=-1)
    return Kernel(factors, apply)


#: bit at which Q4_K/Q5_K quants are placed, per nibble plane: the kernels produce q · 2^at
#: (Q4_K: high nibbles stay where they are, so its quants need no shift at all; Q5_K: bits
#: 3-7, so the fifth bits only move left) and the factors carry 2^-at. That changes no bit:
#: d · scale has at most 17 significant bits and stays far above float32's subnormals, so
#: (d · scale / 2^at) · (2^at q) is exactly gguf-py's (d · scale) · q, inf, NaN and −0 alike.
_K_QUANT_AT = {"Q4_K": (0, 4), "Q5_K": (3, 3)}


def _q4_k_quants(blocks: np.ndarray) -> np.ndarray:
    return _placed(blocks, _at("Q4_K", "qs"), 4, 32, 4, _K_QUANT_AT["Q4_K"])  # (n, 256) q · 2^at


def _q5_k_quants(blocks: np.ndarray) -> np.ndarray:
    at = _K_QUANT_AT["Q5_K"][0]
    q = _placed(blocks, _at("Q5_K", "qs"), 4, 32, 4, (at, at))          # low 4 bits
    q |= _placed(blocks, _at("Q5_K", "qh"), 1, 32, 1, (at + 4,) * 8)    # fifth bit
    return q                                                            # (n, 256) 8 q


def _q6_k_quants(blocks: np.ndarray) -> np.ndarray:
    """(n, 256) int8 4 (q − 32): q's six bits at bits 2-7 with the top one flipped.

    Read as int8, bits 2-7 holding q − 32 in six-bit two's complement (q with bit 5
    flipped) are 4 (q − 32): the sign extension and the subtraction come free.
    """
    q = _placed(blocks, _at("Q6_K", "ql"), 2, 64, 4, (2, 2))            # low 4 bits at 2-5
    q |= _placed(blocks, _at("Q6_K", "qh"), 2, 32, 2, (6,) * 4)         # top 2 bits at 6-7
    q ^= np.uint8(0x80)
    return q.view(np.int8)


def _q2_k_quants(blocks: np.ndarray) -> np.ndarray:
    return _planes(blocks, _at("Q2_K", "qs"), 2, 32, 2)                 # (n, 256) 0..3


def _q3_k_quants(blocks: np.ndarray) -> np.ndarray:
    q = _planes(blocks, _at("Q3_K", "qs"), 2, 32, 2)                    # low 2 bits
    q |= _planes(blocks, _at("Q3_K", "hmask"), 1, 32, 1, to=2)          # bit 2
    return q


# ---------------------------------------------------------------- non-linear levels

def _levels(out: np.ndarray, q: np.ndarray, levels: np.ndarray) -> None:
    """out <- levels[q]: each 4-bit index looks up one of 16 float32 levels."""
    index = np.empty(q.size, np.intp)
    np.copyto(index, q.reshape(-1))
    np.take(levels, index, out=out.reshape(-1), mode="clip")


def _table_kernel(dtype: str, table: np.ndarray, runs: int,
                  factors: Callable[[np.ndarray], tuple[np.ndarray, ...]]) -> Kernel:
    """d · table[q] with 4-bit q in runs of 16 bytes: IQ4_NL, IQ4_XS (per 32), MXFP4."""
    levels = table.astype(np.float32)

    def apply(blocks: np.ndarray, f: tuple, out: np.ndarray) -> None:
        _levels(out, _planes(blocks, _at(dtype, "qs"), runs, 16, 4), levels)
        _scale(out, *f)
    return Kernel(factors, apply)


def _iq4_xs_factors(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    scales_h = _field(blocks, _at("IQ4_XS", "scales_h"), 1, 2).reshape(-1, 2)
    scales_l = _field(blocks, _at("IQ4_XS", "scales_l"), 1, 4).reshape(-1, 4)
    scales = iq4_xs_scales(scales_h, scales_l).astype(np.float32)       # (n, 8)
    return (_f16(blocks, "IQ4_XS", "d") * scales,)


def _mxfp4_factors(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    return (e8m0_half(_column(blocks, _at("MXFP4", "e"), "u1"))[:, None],)


def _tq2_0_quants(blocks: np.ndarray, dtype: str) -> np.ndarray:
    return _planes(blocks, _at("TQ2_0", "qs"), 2, 32, 2)                # (n, 256) 0..2


KERNELS: dict[str, Kernel] = {
    "F32": Kernel(_no_factors, _f32_values),
    "F16": Kernel(_no_factors, _f16_values),
    "BF16": Kernel(_no_factors, _bf16_values),
    "Q4_0": _symmetric(_q4_quants, "Q4_0", 8),
    "Q4_1": _affine(_q4_quants, "Q4_1"),
    "Q5_0": _symmetric(_q5_quants, "Q5_0", 16),
    "Q5_1": _affine(_q5_quants, "Q5_1"),
    "Q8_0": Kernel(_f16_factors("Q8_0", "d"), _q8_0_values),
    "Q2_K": _k_quant(_q2_k_factors, _q2_k_quants, 0),
    "Q3_K": _k_quant(_q3_k_factors, _q3_k_quants, 4),
    "Q4_K": _k_quant(_k_min_factors("Q4_K"), _q4_k_quants, 0),
    "Q5_K": _k_quant(_k_min_factors("Q5_K"), _q5_k_quants, 0),
    "Q6_K": _k_quant(_q6_k_factors, _q6_k_quants, 0),
    "IQ4_NL": _table_kernel("IQ4_NL", IQ4_KVALUES, 1, _f16_factors("IQ4_NL", "d")),
    "IQ4_XS": _table_kernel("IQ4_XS", IQ4_KVALUES, 8, _iq4_xs_factors),
    "MXFP4": _table_kernel("MXFP4", MXFP4_KVALUES, 1, _mxfp4_factors),
    "TQ2_0": _symmetric(_tq2_0_quants, "TQ2_0", 1),
}
