"""The one table of GGML tensor types: id, elements per block, bytes per block.

Everything else (shapes, sizes, bits per weight, parsing) derives from GGML_TYPES.
Byte counts are written as the block's fields added up, as in ggml.
"""
from __future__ import annotations

from typing import NamedTuple

QK_K = 256  # elements in a K-quant super-block


class GGMLType(NamedTuple):
    """One GGML storage type: its id in ggml.h and the size of one block."""

    type_id: int
    block_size: int  # elements per block
    type_size: int   # bytes per block


#: name -> GGMLType; ids follow ggml.h (gaps are removed types)
GGML_TYPES: dict[str, GGMLType] = {
    "F32": GGMLType(0, 1, 4),
    "F16": GGMLType(1, 1, 2),
    "Q4_0": GGMLType(2, 32, 2 + 16),
    "Q4_1": GGMLType(3, 32, 2 + 2 + 16),
    "Q5_0": GGMLType(6, 32, 2 + 4 + 16),
    "Q5_1": GGMLType(7, 32, 2 + 2 + 4 + 16),
    "Q8_0": GGMLType(8, 32, 2 + 32),
    # ggml-common.h: block_q8_1 {ggml_half d, s; int8 qs[32]}, asserted 36 bytes; gguf-py's
    # GGML_QUANT_SIZES still says 4 + 4 + 32 (from when d and s were floats)
    "Q8_1": GGMLType(9, 32, 2 + 2 + 32),
    "Q2_K": GGMLType(10, QK_K, 2 + 2 + QK_K // 16 + QK_K // 4),
    "Q3_K": GGMLType(11, QK_K, 2 + QK_K // 4 + QK_K // 8 + 12),
    "Q4_K": GGMLType(12, QK_K, 2 + 2 + QK_K // 2 + 12),
    "Q5_K": GGMLType(13, QK_K, 2 + 2 + QK_K // 2 + QK_K // 8 + 12),
    "Q6_K": GGMLType(14, QK_K, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    "Q8_K": GGMLType(15, QK_K, 4 + QK_K + QK_K // 8),
    "IQ2_XXS": GGMLType(16, QK_K, 2 + QK_K // 4),
    "IQ2_XS": GGMLType(17, QK_K, 2 + QK_K // 4 + QK_K // 32),
    "IQ3_XXS": GGMLType(18, QK_K, 2 + QK_K // 4 + QK_K // 8),
    "IQ1_S": GGMLType(19, QK_K, 2 + QK_K // 8 + QK_K // 16),
    "IQ4_NL": GGMLType(20, 32, 2 + 16),
    "IQ3_S": GGMLType(21, QK_K, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    "IQ2_S": GGMLType(22, QK_K, 2 + QK_K // 4 + QK_K // 16),
    "IQ4_XS": GGMLType(23, QK_K, 2 + 2 + QK_K // 2 + QK_K // 64),
    "I8": GGMLType(24, 1, 1),
    "I16": GGMLType(25, 1, 2),
    "I32": GGMLType(26, 1, 4),
    "I64": GGMLType(27, 1, 8),
    "F64": GGMLType(28, 1, 8),
    "IQ1_M": GGMLType(29, QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),
    "BF16": GGMLType(30, 1, 2),
    "TQ1_0": GGMLType(34, QK_K, 2 + 4 * 13),
    "TQ2_0": GGMLType(35, QK_K, 2 + QK_K // 4),
    "MXFP4": GGMLType(39, 32, 1 + 16),
}

#: type id -> name
GGML_TYPE_NAMES: dict[int, str] = {t.type_id: name for name, t in GGML_TYPES.items()}


def is_block_quantized(dtype: str) -> bool:
    """True for types stored in multi-element blocks (Q4_0, Q6_K, ...)."""
    return GGML_TYPES[dtype].block_size > 1


def bits_per_weight(dtype: str) -> float:
    """Storage cost per element, scales included.

    >>> bits_per_weight("Q4_0"), bits_per_weight("Q8_0"), bits_per_weight("F16")
    (4.5, 8.5, 16.0)
    """
    t = GGML_TYPES[dtype]
    return 8 * t.type_size / t.block_size


def bytes_per_weight(dtype: str) -> float:
    """Bytes per element: F16 = 2, Q8_0 = 1.0625, Q4_0 = 0.5625."""
    return bits_per_weight(dtype) / 8


def tensor_nbytes(dtype: str, n_elements: int) -> int:
    """Bytes that `n_elements` of `dtype` occupy; the count must be a whole number of blocks."""
    t = GGML_TYPES[dtype]
    if n_elements % t.block_size:
        raise ValueError(f"{n_elements} elements is not a whole number of {dtype} blocks "
                         f"of {t.block_size}")
    return n_elements // t.block_size * t.type_size
