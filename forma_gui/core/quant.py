"""GGML block formats: dequantize bit for bit as ggml/gguf-py does, quantize, take blocks apart.

Sizes come from `ggml_types.GGML_TYPES`, field positions from `quant_layout.BLOCK_FIELDS`.
Each format is described once, readably, as three steps over `(n_blocks, type_size)`
uint8 blocks: the integer quants in element order, the per-block scales, and the
formula combining them, with the float32 operations in the same order as gguf-py so the
results are bit-identical (f16 scales are widened to float32 first, then multiplied).
That reference path also feeds `block_scales` and `decode_block`; the fast kernels in
`quant_fast` are tested against it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import numpy as np

from forma_gui.core import quant_fast, quant_tables
from forma_gui.core.ggml_types import GGML_TYPES, QK_K, GGMLType
from forma_gui.core.quant_layout import (
    BLOCK_FIELDS, IQ4_KVALUES, MXFP4_KVALUES, bitplanes, crumbs, e8m0_half, field_offsets,
    iq4_xs_scales, k_scale_min, le_bits, nibbles, q3_k_scales, trits,
)

#: output elements per chunk when the caller does not say: 512 KiB of float32, so the chunk
#: and its temporaries stay in L2 (measured: 2^17 beat 2^16 and 2^18 on a 2 MB L2)
DEFAULT_CHUNK_ELEMENTS = 1 << 17
#: output elements whose per-block factors are decoded in one go (they are 1/16 of it at most)
FACTOR_GROUP_ELEMENTS = 1 << 21

Blocks = np.ndarray           # (n_blocks, type_size) uint8
Scales = dict[str, np.ndarray]


# ---------------------------------------------------------------- input handling

def _ggml_type(dtype: str) -> GGMLType:
    try:
        return GGML_TYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown GGML type {dtype!r}") from None


def _as_bytes(raw: np.ndarray | bytes | bytearray | memoryview) -> np.ndarray:
    """`raw` as a flat uint8 array, without copying when it is already contiguous."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return np.frombuffer(raw, dtype=np.uint8)
    return np.ascontiguousarray(raw).reshape(-1).view(np.uint8)


def as_blocks(raw: np.ndarray | bytes, dtype: str) -> Blocks:
    """`raw` viewed as `(n_blocks, type_size)` uint8; the byte count must be whole blocks."""
    t = _ggml_type(dtype)
    data = _as_bytes(raw)
    if data.size % t.type_size:
        raise ValueError(f"{data.size} bytes is not a whole number of {dtype} blocks "
                         f"of {t.type_size} bytes")
    return data.reshape(-1, t.type_size)


def _fields(blocks: Blocks, dtype: str) -> dict[str, np.ndarray]:
    """Field name -> `(n_blocks, field_bytes)` uint8 view."""
    return {name: blocks[:, a:b] for name, (a, b) in field_offsets(dtype).items()}


def _f16(field: np.ndarray) -> np.ndarray:
    """(n, 2) little-endian half-float bytes -> (n,) float32 (exact)."""
    return field.view("<f2")[:, 0].astype(np.float32)


# ---------------------------------------------------------------- formats (reference path)

class Format(NamedTuple):
    """One block format, readably: quants, scales, and how they make values (gguf-py's op order)."""

    quants: Callable[[dict[str, np.ndarray]], np.ndarray]  # fields -> (n, block_size) ints
    scales: Callable[[dict[str, np.ndarray]], Scales]      # fields -> per-block scales
    values: Callable[[Scales, np.ndarray], np.ndarray]     # -> (n, block_size) float32
    formula: str


def _sub(x: np.ndarray) -> np.ndarray:
    """(n, s) per-sub-block factors -> (n, s, 1), to broadcast over each sub-block's quants."""
    return x[:, :, None]


def _per_sub(q: np.ndarray, n_sub: int) -> np.ndarray:
    """(n, block_size) quants -> (n, n_sub, block_size / n_sub) float32."""
    return q.reshape(q.shape[0], n_sub, -1).astype(np.float32)


def _dq_offset(offset: int) -> Callable[[Scales, np.ndarray], np.ndarray]:
    """d · (q − offset), as gguf-py: the integer difference in int8, widened, then times d."""
    def values(s: Scales, q: np.ndarray) -> np.ndarray:
        return s["d"][:, None] * (q.astype(np.int8) - np.int8(offset)).astype(np.float32)
    return values


def _dq_plus_m(s: Scales, q: np.ndarray) -> np.ndarray:
    return s["d"][:, None] * q.astype(np.float32) + s["m"][:, None]


def _dq_table(table: np.ndarray) -> Callable[[Scales, np.ndarray], np.ndarray]:
    def values(s: Scales, q: np.ndarray) -> np.ndarray:
        return s["d"][:, None] * table[q].astype(np.float32)
    return values


def _dq_k_min(n_sub: int) -> Callable[[Scales, np.ndarray], np.ndarray]:
    """K-quants with mins: (d · scale) · q − (dmin · min) per sub-block."""
    def values(s: Scales, q: np.ndarray) -> np.ndarray:
        d = s["d"][:, None] * s["scales"].astype(np.float32)            # (n, n_sub)
        m = s["dmin"][:, None] * s["mins"].astype(np.float32)           # (n, n_sub)
        return (_sub(d) * _per_sub(q, n_sub) - _sub(m)).reshape(q.shape[0], -1)
    return values


def _dq_k_signed(n_sub: int, offset: int) -> Callable[[Scales, np.ndarray], np.ndarray]:
    """K-quants without mins: (d · scale) · (q − offset) per sub-block."""
    def values(s: Scales, q: np.ndarray) -> np.ndarray:
        d = s["d"][:, None] * s["scales"].astype(np.float32)            # (n, n_sub)
        centred = q.astype(np.int8) - np.int8(offset)
        return (_sub(d) * _per_sub(centred, n_sub)).reshape(q.shape[0], -1)
    return values


def _dq_iq4_xs(s: Scales, q: np.ndarray) -> np.ndarray:
    d = s["d"][:, None] * s["scales"].astype(np.float32)                # (n, 8)
    return (_sub(d) * _per_sub(IQ4_KVALUES[q], 8)).reshape(q.shape[0], -1)


def _scalar_format(storage: str, to_f32: Callable[[np.ndarray], np.ndarray],
                   formula: str) -> Format:
    """One value per block, stored as numpy dtype `storage`."""
    def quants(f: dict[str, np.ndarray]) -> np.ndarray:
        return f["value"].view(storage)                                  # (n, 1)
    return Format(quants, lambda f: {}, lambda s, q: to_f32(q), formula)


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _d(f: dict[str, np.ndarray]) -> Scales:
    return {"d": _f16(f["d"])}


def _d_m(f: dict[str, np.ndarray]) -> Scales:
    return {"d": _f16(f["d"]), "m": _f16(f["m"])}


def _q5_quants(f: dict[str, np.ndarray]) -> np.ndarray:
    return nibbles(f["qs"], 16) | (le_bits(f["qh"]) << 4)


def _q2_k_scales(f: dict[str, np.ndarray]) -> Scales:
    return {"d": _f16(f["d"]), "dmin": _f16(f["dmin"]),
            "scales": f["scales"] & np.uint8(15), "mins": f["scales"] >> 4}


def _q45_k_scales(f: dict[str, np.ndarray]) -> Scales:
    scales, mins = k_scale_min(f["scales"])
    return {"d": _f16(f["d"]), "dmin": _f16(f["dmin"]), "scales": scales, "mins": mins}


def _tq1_0_quants(f: dict[str, np.ndarray]) -> np.ndarray:
    qs = f["qs"]
    return np.concatenate([trits(qs[:, :32], 32, 5), trits(qs[:, 32:], 16, 5),
                           trits(f["qh"], 4, 4)], axis=-1)


def _mxfp4_scales(f: dict[str, np.ndarray]) -> Scales:
    e = f["e"][:, 0]
    return {"d": e8m0_half(e), "e": e.copy()}


# i-quants: each group of 8 (IQ3: 4) elements is one codebook entry (quant_tables.grid);
# the quants below are the entry's levels with the stored signs applied, in element order.

def _signed_levels(grid_name: str, index: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """Codebook entries at `index` (..., entries), minus where `negative` (..., entries * width)."""
    levels = quant_tables.grid(grid_name)[index].astype(np.int8)       # (..., entries, width)
    levels = levels.reshape(negative.shape)
    return np.where(negative.astype(bool), -levels, levels).reshape(index.shape[0], -1)


def _ksign_bits(sign_index: np.ndarray) -> np.ndarray:
    """7-bit sign indices (...,) -> (..., 8) 0/1, bit k negating element k (ggml ksigns_iq2xs)."""
    signs = quant_tables.ksigns()[sign_index]
    return np.unpackbits(signs[..., None], axis=-1, bitorder="little")


def _iq2_xxs_words(f: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """IQ2_XXS/IQ3_XXS: per 32 elements a uint32 of grid indices and one of signs + scale."""
    words = np.ascontiguousarray(f["qs"]).view("<u4").reshape(-1, 8, 2)
    return words[..., 0], words[..., 1]                                 # (n, 8) each


def _sign_fields(word: np.ndarray) -> np.ndarray:
    """Four 7-bit sign indices packed in the low 28 bits of each word -> (..., 4, 8) bits."""
    return _ksign_bits((word[..., None] >> np.array([0, 7, 14, 21], np.uint32)) & 127)


def _iq2_xxs_quants(f: dict[str, np.ndarray]) -> np.ndarray:
    grids, signs = _iq2_xxs_words(f)
    index = np.ascontiguousarray(grids).view(np.uint8).reshape(-1, 32)  # (n, 32) entries
    return _signed_levels("IQ2_XXS", index, _sign_fields(signs).reshape(-1, 8, 32))


def _iq3_xxs_quants(f: dict[str, np.ndarray]) -> np.ndarray:
    signs = np.ascontiguousarray(f["scales_signs"]).view("<u4")         # (n, 8)
    return _signed_levels("IQ3_XXS", f["qs"], _sign_fields(signs).reshape(-1, 8, 32))


def _iq2_xs_quants(f: dict[str, np.ndarray]) -> np.ndarray:
    q = np.ascontiguousarray(f["qs"]).view("<u2")                       # (n, 32)
    negative = _ksign_bits((q >> 9).astype(np.uint8))                   # (n, 32, 8)
    return _signed_levels("IQ2_XS", q & 511, negative)


def _iq2_s_quants(f: dict[str, np.ndarray]) -> np.ndarray:
    index = f["qs"].astype(np.uint16) | (crumbs(f["qh"], 1).astype(np.uint16) << 8)
    negative = le_bits(f["signs"]).reshape(-1, 32, 8)
    return _signed_levels("IQ2_S", index, negative)


def _iq3_s_quants(f: dict[str, np.ndarray]) -> np.ndarray:
    index = f["qs"].astype(np.uint16) | (le_bits(f["qh"]).astype(np.uint16) << 8)
    negative = le_bits(f["signs"]).reshape(-1, 64, 4)
    return _signed_levels("IQ3_S", index, negative)


def _nibble_scales(f: dict[str, np.ndarray]) -> Scales:
    """IQ2_XS/IQ2_S/IQ3_S: 4-bit sub-block scales, two per byte, low nibble first."""
    return {"d": _f16(f["d"]), "scales": nibbles(f["scales"], 1)}


def _iq2_xxs_scales(f: dict[str, np.ndarray]) -> Scales:
    """IQ2_XXS: the 4-bit scale is the top of each sub-block's sign word."""
    return {"d": _f16(f["d"]), "scales": (_iq2_xxs_words(f)[1] >> 28).astype(np.uint8)}


def _iq3_xxs_scales(f: dict[str, np.ndarray]) -> Scales:
    words = np.ascontiguousarray(f["scales_signs"]).view("<u4")         # (n, 8)
    return {"d": _f16(f["d"]), "scales": (words >> 28).astype(np.uint8)}


def _dq_grid(offset: float, times: float, step: int = 1) -> Callable[[Scales, np.ndarray], np.ndarray]:
    """(d · (offset + step · scale) · times) · q per sub-block, the sub-block factor as gguf-py."""
    def values(s: Scales, q: np.ndarray) -> np.ndarray:
        scale = s["scales"].astype(np.float32)
        db = s["d"][:, None] * (np.float32(offset) + np.float32(step) * scale) * np.float32(times)
        return (_sub(db) * _per_sub(q, scale.shape[1])).reshape(q.shape[0], -1)
    return values


def _iq1_s_parts(f: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    qh = np.ascontiguousarray(f["qh"]).view("<u2")                      # (n, 8)
    high = (qh[..., None] >> np.array([0, 3, 6, 9], np.uint16)) & 7     # (n, 8, 4)
    return qh, f["qs"].astype(np.uint16) | (high.reshape(-1, 32) << 8)


def _iq1_s_quants(f: dict[str, np.ndarray]) -> np.ndarray:
    return quant_tables.grid("IQ1_S")[_iq1_s_parts(f)[1]].reshape(-1, QK_K)


def _iq1_s_scales(f: dict[str, np.ndarray]) -> Scales:
    qh = _iq1_s_parts(f)[0]
    delta = np.where(qh & np.uint16(0x8000), np.float32(-0.125), np.float32(0.125))
    return {"d": _f16(f["d"]), "scales": ((qh >> 12) & 7).astype(np.uint8), "delta": delta}


def _iq1_m_parts(f: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    halves = nibbles(f["qh"], 1).astype(np.uint16)                       # (n, 32): 4 bits each
    return halves, f["qs"].astype(np.uint16) | ((halves & 7) << 8)


def _iq1_m_quants(f: dict[str, np.ndarray]) -> np.ndarray:
    return quant_tables.grid("IQ1_M")[_iq1_m_parts(f)[1]].reshape(-1, QK_K)


def _iq1_m_scales(f: dict[str, np.ndarray]) -> Scales:
    """IQ1_M keeps its f16 d in the top nibbles of the four uint16 scale words."""
    words = np.ascontiguousarray(f["scales"]).view("<u2")               # (n, 4)
    top = (words & np.uint16(0xF000)) >> np.array([12, 8, 4, 0], np.uint16)
    d = np.bitwise_or.reduce(top, axis=-1).astype("<u2").view("<f2").astype(np.float32)
    scales = (words[..., None] >> np.array([0, 3, 6, 9], np.uint16)) & 7
    delta = np.where(_iq1_m_parts(f)[0] & 8, np.float32(-0.125), np.float32(0.125))
    return {"d": d, "scales": scales.reshape(-1, 16).astype(np.uint8), "delta": delta}


def _dq_iq1(s: Scales, q: np.ndarray) -> np.ndarray:
    """d · (2 · scale + 1) · (q + delta): dl per sub-block, delta per group of 8."""
    dl = s["d"][:, None] * (2 * s["scales"].astype(np.float32) + 1)      # (n, n_sub)
    n_delta = s["delta"].shape[1]
    shifted = q.reshape(q.shape[0], n_delta, -1).astype(np.float32) + s["delta"][:, :, None]
    return (_sub(dl) * shifted.reshape(q.shape[0], dl.shape[1], -1)).reshape(q.shape[0], -1)


FORMATS: dict[str, Format] = {
    "F32": _scalar_format("<u4", lambda q: q.view(np.float32), "f32"),
    "F16": _scalar_format("<u2", lambda q: q.view("<f2").astype(np.float32), "f16 → f32"),
    "BF16": _scalar_format("<u2", _bf16_to_f32, "bf16 → f32 (bits << 16)"),
    "I8": _scalar_format("i1", lambda q: q.astype(np.float32), "int → f32"),
    "I16": _scalar_format("<i2", lambda q: q.astype(np.float32), "int → f32"),
    "I32": _scalar_format("<i4", lambda q: q.astype(np.float32), "int → f32"),
    "I64": _scalar_format("<i8", lambda q: q.astype(np.float32), "int → f32"),
    "F64": _scalar_format("<f8", lambda q: q.astype(np.float32), "f64 → f32 (round to nearest even)"),
    "Q4_0": Format(lambda f: nibbles(f["qs"], 16), _d, _dq_offset(8), "d · (q − 8)"),
    "Q4_1": Format(lambda f: nibbles(f["qs"], 16), _d_m, _dq_plus_m, "d · q + m"),
    "Q5_0": Format(_q5_quants, _d, _dq_offset(16), "d · (q − 16)"),
    "Q5_1": Format(_q5_quants, _d_m, _dq_plus_m, "d · q + m"),
    "Q8_0": Format(lambda f: f["qs"].view(np.int8), _d, _dq_offset(0), "d · q"),
    "Q2_K": Format(lambda f: crumbs(f["qs"], 32), _q2_k_scales, _dq_k_min(16),
                   "d · scale · q − dmin · min"),
    "Q3_K": Format(lambda f: crumbs(f["qs"], 32) | (bitplanes(f["hmask"]) << 2),
                   lambda f: {"d": _f16(f["d"]), "scales": q3_k_scales(f["scales"])},
                   _dq_k_signed(16, 4), "d · scale · (q − 4)"),
    "Q4_K": Format(lambda f: nibbles(f["qs"], 32), _q45_k_scales, _dq_k_min(8),
                   "d · scale · q − dmin · min"),
    "Q5_K": Format(lambda f: nibbles(f["qs"], 32) | (bitplanes(f["qh"]) << 4),
                   _q45_k_scales, _dq_k_min(8), "d · scale · q − dmin · min"),
    "Q6_K": Format(lambda f: nibbles(f["ql"], 64) | (crumbs(f["qh"], 32) << 4),
                   lambda f: {"d": _f16(f["d"]), "scales": f["scales"].view(np.int8)},
                   _dq_k_signed(16, 32), "d · scale · (q − 32)"),
    "Q8_K": Format(lambda f: f["qs"].view(np.int8),
                   lambda f: {"d": f["d"].view("<f4")[:, 0].astype(np.float32)},
                   _dq_offset(0), "d · q"),
    "IQ4_NL": Format(lambda f: nibbles(f["qs"], 16), _d, _dq_table(IQ4_KVALUES),
                     "d · kvalues[q]"),
    "IQ4_XS": Format(lambda f: nibbles(f["qs"], 16),
                     lambda f: {"d": _f16(f["d"]),
                                "scales": iq4_xs_scales(f["scales_h"], f["scales_l"])},
                     _dq_iq4_xs, "d · scale · kvalues[q]"),
    "TQ1_0": Format(_tq1_0_quants, _d, _dq_offset(1), "d · (q − 1)"),
    "TQ2_0": Format(lambda f: crumbs(f["qs"], 32), _d, _dq_offset(1), "d · (q − 1)"),
    "MXFP4": Format(lambda f: nibbles(f["qs"], 16), _mxfp4_scales, _dq_table(MXFP4_KVALUES),
                    "d · kvalues[q], d = 2^(e − 128)"),
    "IQ2_XXS": Format(_iq2_xxs_quants, _iq2_xxs_scales, _dq_grid(0.5, 0.25),
                      "d · (0.5 + scale) / 4 · q,  q = ±grid level"),
    "IQ2_XS": Format(_iq2_xs_quants, _nibble_scales, _dq_grid(0.5, 0.25),
                     "d · (0.5 + scale) / 4 · q,  q = ±grid level"),
    "IQ2_S": Format(_iq2_s_quants, _nibble_scales, _dq_grid(0.5, 0.25),
                    "d · (0.5 + scale) / 4 · q,  q = ±grid level"),
    "IQ3_XXS": Format(_iq3_xxs_quants, _iq3_xxs_scales, _dq_grid(0.5, 0.5),
                      "d · (0.5 + scale) / 2 · q,  q = ±grid level"),
    "IQ3_S": Format(_iq3_s_quants, _nibble_scales, _dq_grid(1, 1, step=2),
                    "d · (1 + 2 · scale) · q,  q = ±grid level"),
    "IQ1_S": Format(_iq1_s_quants, _iq1_s_scales, _dq_iq1,
                    "d · (2 · scale + 1) · (q + delta),  q ∈ {−1, 0, 1}, delta = ±1/8"),
    "IQ1_M": Format(_iq1_m_quants, _iq1_m_scales, _dq_iq1,
                    "d · (2 · scale + 1) · (q + delta),  q ∈ {−1, 0, 1}, delta = ±1/8"),
}


#: block types ggml stores but never turns back into floats (no `to_float` in its type traits)
NO_DEQUANTIZER = {"Q8_1": "ggml's intermediate type for dot products"}


def _format(dtype: str) -> Format:
    _ggml_type(dtype)
    try:
        return FORMATS[dtype]
    except KeyError:
        why = NO_DEQUANTIZER.get(dtype)
        raise NotImplementedError(f"the {dtype} block format is not implemented" + (
            f": {dtype} is {why}, and ggml itself has no dequantizer for it" if why else "")) from None


def dequantize_reference(raw: np.ndarray | bytes, dtype: str) -> np.ndarray:
    """The slow, readable path: values = formula(block_scales, quants), whole tensor at once."""
    fmt = _format(dtype)
    fields = _fields(as_blocks(raw, dtype), dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        values = fmt.values(fmt.scales(fields), fmt.quants(fields))
    return values.astype(np.float32).reshape(-1)


# ---------------------------------------------------------------- fast path

def _reference_kernel(dtype: str) -> quant_fast.Kernel:
    fmt = FORMATS[dtype]

    def apply(blocks: Blocks, factors: tuple, out: np.ndarray) -> None:
        fields = _fields(blocks, dtype)
        out[...] = fmt.values(fmt.scales(fields), fmt.quants(fields))
    return quant_fast.Kernel(lambda blocks: (), apply)


def _kernel(dtype: str) -> quant_fast.Kernel:
    _format(dtype)
    fast = quant_fast.KERNELS.get(dtype)
    return fast if fast is not None else _reference_kernel(dtype)


def _chunk_blocks(dtype: str, chunk_blocks: int | None) -> int:
    if chunk_blocks is None:
        return max(1, DEFAULT_CHUNK_ELEMENTS // _ggml_type(dtype).block_size)
    if chunk_blocks < 1:
        raise ValueError(f"chunk_blocks must be positive, got {chunk_blocks}")
    return chunk_blocks


# ---------------------------------------------------------------- public API

def n_elements(raw: np.ndarray | bytes, dtype: str) -> int:
    """Number of values stored in `raw` as `dtype`."""
    return as_blocks(raw, dtype).shape[0] * _ggml_type(dtype).block_size


def dequantize_into(raw: np.ndarray | bytes, dtype: str, out: np.ndarray, *,
                    chunk_blocks: int | None = None) -> np.ndarray:
    """Dequantize `raw` into the preallocated C-contiguous float32 `out` (any shape); return `out`.

    Works `chunk_blocks` blocks at a time (default: about 512 KiB of output), so the
    temporaries stay in cache instead of being page-faulted in at the size of the tensor.
    """
    kernel = _kernel(dtype)
    blocks = as_blocks(raw, dtype)                                      # (n_blocks, type_size)
    block_size = _ggml_type(dtype).block_size
    if out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError("out must be a C-contiguous float32 array")
    if out.size != blocks.shape[0] * block_size:
        raise ValueError(f"out has {out.size} elements, the data holds "
                         f"{blocks.shape[0] * block_size}")
    rows = out.reshape(-1, block_size)                                  # (n_blocks, block_size)
    step = _chunk_blocks(dtype, chunk_blocks)
    # per-block factors (scales, mins) are decoded for many chunks at once: they are small
    group = step * max(1, FACTOR_GROUP_ELEMENTS // (step * block_size))
    # garbage scales may overflow to inf or make 0 · inf = nan, exactly as in ggml: no warnings
    with np.errstate(over="ignore", invalid="ignore"):
        for first in range(0, blocks.shape[0], group):
            part = blocks[first:first + group]
            factors = kernel.factors(part)
            for start in range(0, part.shape[0], step):
                chunk = slice(start, start + step)
                kernel.apply(part[chunk], tuple(f[chunk] for f in factors),
                             rows[first + start:first + start + step])
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
    """Yield `(first_element_index, float32 values)` in order, for progress and cancelling.

    Chunks are whole blocks (at least one); each yielded array is new and owned by the
    caller. Bad input is refused here, not at the first `next()`.
    """
    _kernel(dtype)
    blocks = as_blocks(raw, dtype)
    step = max(1, chunk_elements // _ggml_type(dtype).block_size)
    return _chunks(blocks, dtype, step)


def _chunks(blocks: Blocks, dtype: str, step: int) -> Iterator[tuple[int, np.ndarray]]:
    block_size = _ggml_type(dtype).block_size
    for start in range(0, blocks.shape[0], step):
        part = blocks[start:start + step]
        values = np.empty(part.shape[0] * block_size, dtype=np.float32)
        yield start * block_size, dequantize_into(part, dtype, values)


def block_scales(raw: np.ndarray | bytes, dtype: str) -> Scales:
    """Per-block scales exactly as the dequantizer uses them ({} for F32/F16/BF16).

    `d` (and `m`, `dmin`) float32 of shape (n_blocks,); K-quant sub-block `scales` (and
    `mins`) as small integers of shape (n_blocks, n_sub): Q4_K/Q5_K 6-bit (8 per block),
    Q2_K 4-bit (16), Q3_K signed 6-bit minus 32 (16), Q6_K int8 (16), IQ4_XS signed (8).
    """
    fmt = _format(dtype)
    scales = fmt.scales(_fields(as_blocks(raw, dtype), dtype))
    return {name: np.ascontiguousarray(v) for name, v in scales.items()}


# ---------------------------------------------------------------- quantize (ggml reference rounding)

#: blocks per quantization step: bounds the float32 temporaries to a few MB
_QUANTIZE_CHUNK_BLOCKS = 1 << 14


def _inverse(d: np.ndarray) -> np.ndarray:
    """ggml's `id = d ? 1.0f/d : 0.0f` in float32."""
    with np.errstate(divide="ignore"):
        return np.where(d == 0, np.float32(0), np.float32(1) / d)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C `roundf` (halves away from zero), exactly: the fraction x − trunc(x) is exact in float."""
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), np.float32(0))


def _truncate_levels(x: np.ndarray, top: int) -> np.ndarray:
    """ggml's `MIN(top, (uint8_t)(x))` for x ≥ 0: truncate toward zero, clamp."""
    return np.trunc(x).astype(np.uint8).clip(0, top)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(n, 32) quants -> (n, 16) bytes: elements 0-15 in the low nibbles, 16-31 in the high."""
    return (q[:, :16] & np.uint8(15)) | (q[:, 16:] << np.uint8(4))


def _pack_high_bits(q: np.ndarray) -> np.ndarray:
    """(n, 32) 5-bit quants -> (n, 4) bytes: bit 4 of element j as bit j, little-endian."""
    return np.packbits(q >> np.uint8(4), axis=-1, bitorder="little")


def _f16_bytes(x: np.ndarray) -> np.ndarray:
    return x.astype("<f2").view(np.uint8).reshape(x.shape[0], -1)


def _q_symmetric(blocks: np.ndarray, half: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0/Q5_0: d = (signed value of largest magnitude) / −half, q = trunc(x/d + half + .5)."""
    imax = np.abs(blocks).argmax(axis=-1)[:, None]
    d = np.take_along_axis(blocks, imax, axis=-1) / np.float32(-half)    # (n, 1)
    q = _truncate_levels(blocks * _inverse(d) + np.float32(half + 0.5), 2 * half - 1)
    return d, q


def _q_affine(blocks: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_1/Q5_1: m = min, d = (max − min) / top, q = trunc((x − m)/d + .5)."""
    lo, hi = blocks.min(axis=-1, keepdims=True), blocks.max(axis=-1, keepdims=True)
    d = (hi - lo) / np.float32(top)
    return d, lo, _truncate_levels((blocks - lo) * _inverse(d) + np.float32(0.5), top)


def _quantize_q4_0(b: np.ndarray) -> dict[str, np.ndarray]:
    d, q = _q_symmetric(b, 8)
    return {"d": _f16_bytes(d), "qs": _pack_nibbles(q)}


def _quantize_q5_0(b: np.ndarray) -> dict[str, np.ndarray]:
    d, q = _q_symmetric(b, 16)
    return {"d": _f16_bytes(d), "qh": _pack_high_bits(q), "qs": _pack_nibbles(q)}


def _quantize_q4_1(b: np.ndarray) -> dict[str, np.ndarray]:
    d, m, q = _q_affine(b, 15)
    return {"d": _f16_bytes(d), "m": _f16_bytes(m), "qs": _pack_nibbles(q)}


def _quantize_q5_1(b: np.ndarray) -> dict[str, np.ndarray]:
    d, m, q = _q_affine(b, 31)
    return {"d": _f16_bytes(d), "m": _f16_bytes(m), "qh": _pack_high_bits(q),
            "qs": _pack_nibbles(q)}


def _quantize_q8_0(b: np.ndarray) -> dict[str, np.ndarray]:
    d = np.abs(b).max(axis=-1, keepdims=True) / np.float32(127)
    q = _round_half_away(b * _inverse(d)).astype(np.int8)
    return {"d": _f16_bytes(d), "qs": q.view(np.uint8)}


def _quantize_bf16(b: np.ndarray) -> dict[str, np.ndarray]:
    """ggml_compute_fp32_to_bf16: NaNs made quiet (keeping the sign and top payload), else RNE."""
    bits = b.view(np.uint32)
    is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    bits = np.where(is_nan, (bits & np.uint32(0xFFFF0000)) | np.uint32(0x00400000), bits)
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> 16
    return {"value": rounded.astype("<u2").view(np.uint8)}


QUANTIZERS: dict[str, Callable[[np.ndarray], dict[str, np.ndarray]]] = {
    "F32": lambda b: {"value": b.astype("<f4").view(np.uint8)},
    "F16": lambda b: {"value": _f16_bytes(b)},
    "BF16": _quantize_bf16,
    "Q4_0": _quantize_q4_0,
    "Q4_1": _quantize_q4_1,
    "Q5_0": _quantize_q5_0,
    "Q5_1": _quantize_q5_1,
    "Q8_0": _quantize_q8_0,
}


def quantize(x: np.ndarray, dtype: str) -> np.ndarray:
    """Quantize rows of `x` (last axis a multiple of the block size) -> uint8 (*x.shape[:-1], row_bytes).

    Byte-identical to gguf-py / ggml's reference quantizers. Like ggml, it works from float32:
    other input dtypes are converted to float32 first.
    """
    t = _ggml_type(dtype)
    if dtype not in QUANTIZERS:
        raise NotImplementedError(f"quantization to {dtype} is not implemented")
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % t.block_size:
        raise ValueError(f"the last axis of {x.shape} is not a multiple of the {dtype} "
                         f"block size {t.block_size}")
    blocks = x.reshape(-1, t.block_size)                                 # (n_blocks, block_size)
    out = np.empty((blocks.shape[0], t.type_size), dtype=np.uint8)
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, blocks.shape[0], _QUANTIZE_CHUNK_BLOCKS):
            part = slice(start, start + _QUANTIZE_CHUNK_BLOCKS)
            fields = QUANTIZERS[dtype](np.ascontiguousarray(blocks[part]))
            out[part] = np.concatenate([fields[f.name] for f in BLOCK_FIELDS[dtype]], axis=-1)
    return out.reshape(*x.shape[:-1], x.shape[-1] // t.block_size * t.type_size)


# ---------------------------------------------------------------- one block, taken apart

@dataclass(frozen=True, eq=False)
class BlockField:
    """One field of a block: bytes [start, end) inside it, those bytes, and what they mean."""

    name: str
    start: int
    end: int
    raw: bytes
    value: object  # float for scales; int for a single integer; np.ndarray for packed bytes


@dataclass(frozen=True, eq=False)
class NibbleLayout:
    """Where each 4-bit half of a packed byte goes, for drawing bytes as two nibbles."""

    field: str                    # the packed field: "qs" ("ql" for Q6_K)
    lo: np.ndarray                # (n_bytes,) low nibble of each byte
    hi: np.ndarray                # (n_bytes,) high nibble of each byte
    lo_element: np.ndarray        # (n_bytes,) element index each low nibble becomes
    hi_element: np.ndarray        # (n_bytes,) element index each high nibble becomes
    high_field: str | None        # field holding the bits above the nibble ("qh"), if any
    high_bits: np.ndarray | None  # (block_size,) those bits per element (quants >> 4)


@dataclass(frozen=True, eq=False)
class BlockView:
    """One block taken apart: fields with byte ranges, quants, values and the formula."""

    dtype: str
    fields: list[BlockField]
    quants: np.ndarray            # (block_size,) the stored integer quants, in element order
    values: np.ndarray            # (block_size,) float32, equal to dequantize() of the block
    formula: str                  # e.g. "d · (q − 8)"
    scales: dict[str, object]     # this block's row of block_scales()
    nibble_layout: NibbleLayout | None

    def field(self, name: str) -> BlockField:
        """The field called `name`."""
        return next(f for f in self.fields if f.name == name)


#: types packing 4-bit quants: (packed field, run length of the nibble split, high-bit field)
NIBBLE_FIELDS: dict[str, tuple[str, int, str | None]] = {
    "Q4_0": ("qs", 16, None), "Q4_1": ("qs", 16, None), "Q5_0": ("qs", 16, "qh"),
    "Q5_1": ("qs", 16, "qh"), "Q4_K": ("qs", 32, None), "Q5_K": ("qs", 32, "qh"),
    "Q6_K": ("ql", 64, "qh"), "IQ4_NL": ("qs", 16, None), "IQ4_XS": ("qs", 16, None),
    "MXFP4": ("qs", 16, None),
}

_FIELD_DTYPES = {"f16": "<f2", "f32": "<f4", "u8": "u1", "i8": "i1", "u16": "<u2",
                 "i16": "<i2", "u32": "<u4", "i32": "<i4", "i64": "<i8", "f64": "<f8"}


def _field_value(raw: bytes, kind: str) -> object:
    """A field's bytes as what they mean: scalars as Python numbers, runs as arrays."""
    if kind == "bf16":
        return float(_bf16_to_f32(np.frombuffer(raw, "<u2"))[0])
    if kind == "e8m0":
        return float(e8m0_half(np.frombuffer(raw, np.uint8))[0])
    arr = np.frombuffer(raw, _FIELD_DTYPES[kind])
    return arr.copy() if kind == "u8" or arr.size > 1 else arr[0].item()


def _nibble_layout(dtype: str, block: bytes, quants: np.ndarray) -> NibbleLayout | None:
    if dtype not in NIBBLE_FIELDS:
        return None
    name, run, high_field = NIBBLE_FIELDS[dtype]
    start, end = field_offsets(dtype)[name]
    packed = np.frombuffer(block[start:end], np.uint8)
    index = np.arange(packed.size)
    lo_element = index // run * 2 * run + index % run                   # ggml's nibble order
    return NibbleLayout(name, packed & 15, packed >> 4, lo_element, lo_element + run,
                        high_field, quants >> 4 if high_field else None)


def decode_block(raw_block: bytes | np.ndarray, dtype: str) -> BlockView:
    """Take one block apart for the block microscope.

    >>> view = decode_block(bytes([0x00, 0x3C]) + bytes([0x9F] * 16), "Q4_0")
    >>> view.field("d").value, view.quants[:2].tolist(), view.values[[0, 16]].tolist()
    (1.0, [15, 15], [7.0, 1.0])
    """
    fmt, t = _format(dtype), _ggml_type(dtype)
    block = _as_bytes(raw_block).tobytes()
    if len(block) != t.type_size:
        raise ValueError(f"a {dtype} block is {t.type_size} bytes, got {len(block)}")
    fields = _fields(as_blocks(block, dtype), dtype)
    quants = np.asarray(fmt.quants(fields))[0].copy()
    parts = [BlockField(spec.name, a, b, block[a:b], _field_value(block[a:b], spec.kind))
             for spec, (a, b) in zip(BLOCK_FIELDS[dtype], field_offsets(dtype).values())]
    scales = {name: v[0] for name, v in block_scales(block, dtype).items()}
    return BlockView(dtype, parts, quants, dequantize(block, dtype), fmt.formula, scales,
                     _nibble_layout(dtype, block, quants))
