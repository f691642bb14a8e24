"""Where each field sits inside one GGML block, as in ggml's `block_*` structs.

Sizes per block come from `ggml_types.GGML_TYPES`; this table only says how those bytes
are split (tests check that the fields add up to `type_size`).
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from forma_gui.core.ggml_types import QK_K


class FieldSpec(NamedTuple):
    """One field of a quantized block: name, byte length, storage kind."""

    name: str
    nbytes: int
    kind: str  # storage: "f16", "bf16", "f32", "e8m0", "u8" (packed bits), "i8", "u16", "i16", "u32"


#: GGML type -> its block's fields in storage order
BLOCK_FIELDS: dict[str, tuple[FieldSpec, ...]] = {
    "F32": (FieldSpec("value", 4, "f32"),),
    "F16": (FieldSpec("value", 2, "f16"),),
    "BF16": (FieldSpec("value", 2, "bf16"),),
    "Q4_0": (FieldSpec("d", 2, "f16"), FieldSpec("qs", 16, "u8")),
    "Q4_1": (FieldSpec("d", 2, "f16"), FieldSpec("m", 2, "f16"), FieldSpec("qs", 16, "u8")),
    "Q5_0": (FieldSpec("d", 2, "f16"), FieldSpec("qh", 4, "u8"), FieldSpec("qs", 16, "u8")),
    "Q5_1": (FieldSpec("d", 2, "f16"), FieldSpec("m", 2, "f16"), FieldSpec("qh", 4, "u8"),
             FieldSpec("qs", 16, "u8")),
    "Q8_0": (FieldSpec("d", 2, "f16"), FieldSpec("qs", 32, "i8")),
    "Q2_K": (FieldSpec("scales", QK_K // 16, "u8"), FieldSpec("qs", QK_K // 4, "u8"),
             FieldSpec("d", 2, "f16"), FieldSpec("dmin", 2, "f16")),
    "Q3_K": (FieldSpec("hmask", QK_K // 8, "u8"), FieldSpec("qs", QK_K // 4, "u8"),
             FieldSpec("scales", 12, "u8"), FieldSpec("d", 2, "f16")),
    "Q4_K": (FieldSpec("d", 2, "f16"), FieldSpec("dmin", 2, "f16"),
             FieldSpec("scales", 12, "u8"), FieldSpec("qs", QK_K // 2, "u8")),
    "Q5_K": (FieldSpec("d", 2, "f16"), FieldSpec("dmin", 2, "f16"),
             FieldSpec("scales", 12, "u8"), FieldSpec("qh", QK_K // 8, "u8"),
             FieldSpec("qs", QK_K // 2, "u8")),
    "Q6_K": (FieldSpec("ql", QK_K // 2, "u8"), FieldSpec("qh", QK_K // 4, "u8"),
             FieldSpec("scales", QK_K // 16, "i8"), FieldSpec("d", 2, "f16")),
    "Q8_K": (FieldSpec("d", 4, "f32"), FieldSpec("qs", QK_K, "i8"),
             FieldSpec("bsums", QK_K // 8, "i16")),
    "IQ4_NL": (FieldSpec("d", 2, "f16"), FieldSpec("qs", 16, "u8")),
    "IQ4_XS": (FieldSpec("d", 2, "f16"), FieldSpec("scales_h", 2, "u16"),
               FieldSpec("scales_l", QK_K // 64, "u8"), FieldSpec("qs", QK_K // 2, "u8")),
    "IQ2_XXS": (FieldSpec("d", 2, "f16"), FieldSpec("qs", QK_K // 4, "u8")),
    "IQ2_XS": (FieldSpec("d", 2, "f16"), FieldSpec("qs", QK_K // 4, "u16"),
               FieldSpec("scales", QK_K // 32, "u8")),
    "IQ2_S": (FieldSpec("d", 2, "f16"), FieldSpec("qs", QK_K // 8, "u8"),
              FieldSpec("signs", QK_K // 8, "u8"), FieldSpec("qh", QK_K // 32, "u8"),
              FieldSpec("scales", QK_K // 32, "u8")),
    "IQ3_XXS": (FieldSpec("d", 2, "f16"), FieldSpec("qs", QK_K // 4, "u8"),
                FieldSpec("scales_signs", QK_K // 8, "u32")),
    "IQ3_S": (FieldSpec("d", 2, "f16"), FieldSpec("qs", QK_K // 4, "u8"),
              FieldSpec("qh", QK_K // 32, "u8"), FieldSpec("signs", QK_K // 8, "u8"),
              FieldSpec("scales", QK_K // 64, "u8")),
    "IQ1_S": (FieldSpec("d", 2, "f16"), FieldSpec("qs", QK_K // 8, "u8"),
              FieldSpec("qh", QK_K // 16, "u16")),
    "IQ1_M": (FieldSpec("qs", QK_K // 8, "u8"), FieldSpec("qh", QK_K // 16, "u8"),
              FieldSpec("scales", QK_K // 32, "u16")),
    "TQ1_0": (FieldSpec("qs", (QK_K - 4 * QK_K // 64) // 5, "u8"),
              FieldSpec("qh", QK_K // 64, "u8"), FieldSpec("d", 2, "f16")),
    "TQ2_0": (FieldSpec("qs", QK_K // 4, "u8"), FieldSpec("d", 2, "f16")),
    "MXFP4": (FieldSpec("e", 1, "e8m0"), FieldSpec("qs", 16, "u8")),
    "I8": (FieldSpec("value", 1, "i8"),),
    "I16": (FieldSpec("value", 2, "i16"),),
    "I32": (FieldSpec("value", 4, "i32"),),
    "I64": (FieldSpec("value", 8, "i64"),),
    "F64": (FieldSpec("value", 8, "f64"),),
}

#: the 16 non-linear levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl)
IQ4_KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                        1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)
#: the FP4 (e2m1) levels of MXFP4, doubled to integers (ggml's kvalues_mxfp4)
MXFP4_KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12],
                         dtype=np.int8)


@lru_cache(maxsize=None)
def field_offsets(dtype: str) -> dict[str, tuple[int, int]]:
    """Field name -> (start, end) byte range inside one block.

    >>> field_offsets("Q4_1")
    {'d': (0, 2), 'm': (2, 4), 'qs': (4, 20)}
    """
    ranges, start = {}, 0
    for spec in BLOCK_FIELDS[dtype]:
        ranges[spec.name] = (start, start + spec.nbytes)
        start += spec.nbytes
    return ranges


# ---------------------------------------------------------------- bit unpacking
# Readable reference unpackers: integer quants in ggml's element order.

def nibbles(packed: np.ndarray, group: int) -> np.ndarray:
    """(n, k) bytes -> (n, 2k): for each run of `group` bytes, their low nibbles, then their high."""
    runs = packed.reshape(packed.shape[0], -1, 1, group)                # (n, k/group, 1, group)
    both = runs >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)      # (n, k/group, 2, group)
    return (both & np.uint8(0x0F)).reshape(packed.shape[0], -1)


def crumbs(packed: np.ndarray, group: int) -> np.ndarray:
    """(n, k) bytes -> (n, 4k): for each run of `group` bytes, bits 0-1 of each, then 2-3, 4-5, 6-7."""
    runs = packed.reshape(packed.shape[0], -1, 1, group)                # (n, k/group, 1, group)
    planes = runs >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    return (planes & np.uint8(3)).reshape(packed.shape[0], -1)         # (n, 4k)


def bitplanes(packed: np.ndarray) -> np.ndarray:
    """(n, k) bytes -> (n, 8k): bit 0 of every byte, then bit 1 of every byte, ... (K-quant high bits)."""
    runs = packed.reshape(packed.shape[0], 1, -1)                        # (n, 1, k)
    planes = runs >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)       # (n, 8, k)
    return (planes & np.uint8(1)).reshape(packed.shape[0], -1)


def le_bits(packed: np.ndarray) -> np.ndarray:
    """(n, k) bytes -> (n, 8k): bit j of the little-endian integer they form (Q5_0/Q5_1 `qh`)."""
    return np.unpackbits(packed, axis=-1, bitorder="little")


def trits(packed: np.ndarray, group: int, digits: int) -> np.ndarray:
    """TQ1_0: (n, k) bytes each holding `digits` base-3 digits as a fixed-point fraction -> (n, k*digits).

    Digit i of a byte b is the top of (b * 3**i mod 256) * 3, as ggml's dequantize_row_tq1_0.
    """
    runs = packed.reshape(packed.shape[0], -1, 1, group)                # (n, k/group, 1, group)
    powers = (3 ** np.arange(digits)).astype(np.uint8).reshape(1, 1, digits, 1)
    shifted = (runs * powers).astype(np.uint16)                        # uint8 product wraps mod 256
    return ((shifted * 3) >> 8).astype(np.uint8).reshape(packed.shape[0], -1)


def k_scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: 12 bytes -> eight 6-bit scales and eight 6-bit mins, (n, 8) uint8 each.

    Bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 the
    same for the mins; bytes 8-11 the low 4 bits of scales 4-7 (low nibble) and mins 4-7.
    """
    sc, mn, lo = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]        # (n, 4) each
    scales = np.concatenate([sc & 63, (lo & 15) | ((sc >> 2) & 48)], axis=-1)
    mins = np.concatenate([mn & 63, (lo >> 4) | ((mn >> 2) & 48)], axis=-1)
    return scales, mins


def q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """Q3_K: 12 bytes -> sixteen signed 6-bit scales (n, 16) int8.

    Low 4 bits: bytes 0-7, low nibbles for scales 0-7, high nibbles for 8-15. High 2 bits:
    bytes 8-11, scale j in bits 2*(j // 4) of byte 8 + j % 4.
    """
    low = nibbles(packed[:, 0:8], 8)                                   # (n, 16)
    high = crumbs(packed[:, 8:12], 4)                                  # (n, 16)
    return (low | (high << 4)).view(np.int8) - np.int8(32)


def iq4_xs_scales(scales_h: np.ndarray, scales_l: np.ndarray) -> np.ndarray:
    """IQ4_XS: 6-bit scales (low nibbles in `scales_l`, top 2 bits in uint16 `scales_h`) -> (n, 8) int8."""
    low = nibbles(scales_l, 1)         # (n, 8): byte 0 low, byte 0 high, byte 1 low, ...
    high = crumbs(scales_h, 1)         # (n, 8): bits 2j, 2j+1 of the little-endian uint16
    return (low | (high << 4)).view(np.int8) - np.int8(32)


def e8m0_half(e: np.ndarray) -> np.ndarray:
    """MXFP4's shared exponent byte -> float32 2**(e - 128) (half, since the levels are doubled)."""
    e32 = e.astype(np.uint32)
    bits = np.where(e32 < 2, np.uint32(0x00200000) << e32, (e32 - np.uint32(1)) << np.uint32(23))
    return bits.view(np.float32)
