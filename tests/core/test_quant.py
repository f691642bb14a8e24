"""forma_gui.core.quant against gguf-py (llama.cpp's reference Python), bit for bit."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core import quant
from forma_gui.core.ggml_types import GGML_TYPES
from forma_gui.core.quant_layout import BLOCK_FIELDS, field_offsets
from tests.conftest import MAX_EXAMPLES, data_file

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import quants as gq  # noqa: E402

SMOLLM = ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
#: every type gguf-py can dequantize that we implement (all but Q8_K, which it lacks)
GGUF_TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
              "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "IQ2_XXS", "IQ2_XS",
              "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
#: types gguf-py can also quantize, so the test data is gguf-py's own
GGUF_QUANTIZABLE = ["BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4"]
OUR_QUANTIZE = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
BLOCK_TYPES = [t for t in GGUF_TYPES + ["Q8_K"] if GGML_TYPES[t].block_size > 1]


def same_bits(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Bit equality of two float32 arrays: NaN payloads and signed zeros count."""
    theirs = np.ascontiguousarray(theirs, dtype=np.float32).reshape(-1)
    return (ours.dtype == np.float32 and ours.shape == theirs.shape
            and np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)))


def f16_offsets(dtype: str) -> list[int]:
    return [field_offsets(dtype)[f.name][0] for f in BLOCK_FIELDS[dtype] if f.kind == "f16"]


def random_blocks(dtype: str, n_blocks: int, seed: int = 0, finite: bool = True) -> np.ndarray:
    """Random block bytes; with `finite`, the f16 scale fields hold ordinary values."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_blocks, GGML_TYPES[dtype].type_size), dtype=np.uint8)
    for start in f16_offsets(dtype) if finite else ():
        half = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16)
        blocks[:, start:start + 2] = half.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def gguf_dequantize(raw: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):                  # inf/nan scales
        return gq.dequantize(raw, QT[dtype])


@pytest.fixture(scope="module")
def smollm():
    return gguf.GGUFReader(data_file(*SMOLLM))


# ---------------------------------------------------------------- layout

@pytest.mark.parametrize("dtype", sorted(BLOCK_FIELDS))
def test_block_fields_add_up_to_the_type_size(dtype):
    assert sum(f.nbytes for f in BLOCK_FIELDS[dtype]) == GGML_TYPES[dtype].type_size
    assert GGML_TYPES[dtype].type_size == gguf.GGML_QUANT_SIZES[QT[dtype]][1]


# ---------------------------------------------------------------- dequantize

def test_every_tensor_of_the_real_file_is_bit_identical(smollm):
    seen = set()
    for tensor in smollm.tensors:
        dtype = tensor.tensor_type.name
        seen.add(dtype)
        ours = quant.dequantize(tensor.data, dtype)
        assert ours.size == tensor.n_elements
        assert same_bits(ours, gguf_dequantize(tensor.data, dtype)), tensor.name
    assert seen == {"Q4_1", "Q8_0", "F32"}


def test_reference_path_on_the_real_file(smollm):
    firsts = {}
    for tensor in smollm.tensors:
        firsts.setdefault(tensor.tensor_type.name, tensor)
    for dtype, tensor in firsts.items():
        rows = tensor.data[:64]                                         # enough rows to mean it
        assert same_bits(quant.dequantize_reference(rows, dtype), gguf_dequantize(rows, dtype))


@pytest.mark.parametrize("dtype", GGUF_QUANTIZABLE)
def test_data_quantized_by_gguf_py_is_bit_identical(dtype):
    x = (np.random.default_rng(1).standard_normal((48, 512)) * 0.05).astype(np.float32)
    raw = gq.quantize(x, QT[dtype])
    expected = gguf_dequantize(raw, dtype)
    assert same_bits(quant.dequantize(raw, dtype), expected)
    assert same_bits(quant.dequantize_reference(raw, dtype), expected)


@pytest.mark.parametrize("dtype", GGUF_TYPES)
def test_random_blocks_are_bit_identical(dtype):
    raw = random_blocks(dtype, 2048 if GGML_TYPES[dtype].block_size > 1 else 8192)
    raw = raw.reshape(16, -1)                                           # rows, as in a file
    expected = gguf_dequantize(raw, dtype)
    assert same_bits(quant.dequantize(raw, dtype), expected)
    assert same_bits(quant.dequantize_reference(raw, dtype), expected)


def special_halves() -> np.ndarray:
    """f16 bit patterns: every zero/subnormal and inf/NaN, and 16 mantissas of every exponent."""
    bits = np.arange(1 << 16, dtype=np.uint32)
    exponent, mantissa = (bits >> 10) & 31, bits & 1023
    keep = (exponent == 0) | (exponent == 31) | (mantissa % 64 == 0) | (mantissa == 1023)
    return bits[keep].astype("<u2")


@pytest.mark.parametrize("dtype", [t for t in GGUF_TYPES if f16_offsets(t)])
def test_special_f16_scales_nan_inf_subnormal_signed_zero(dtype):
    halves = special_halves()
    raw = random_blocks(dtype, halves.size, seed=5, finite=False)
    for i, start in enumerate(f16_offsets(dtype)):                      # d and m/dmin differ
        raw[:, start:start + 2] = np.roll(halves, 7 * i).view(np.uint8).reshape(-1, 2)
    expected = gguf_dequantize(raw.reshape(4, -1), dtype)
    assert same_bits(quant.dequantize(raw, dtype), expected)
    assert same_bits(quant.dequantize_reference(raw, dtype), expected)


def test_q8_k_matches_ggml_dequantize_row_q8_k():
    # ggml: block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; }, y = d * qs
    raw = random_blocks("Q8_K", 64, seed=6)
    raw[:, :4] = (np.random.default_rng(6).standard_normal((64, 1)) * 0.01).astype("<f4").view(np.uint8)
    expected = []
    for block in raw:
        (d,) = struct.unpack_from("<f", block, 0)
        qs = np.frombuffer(block[4:260].tobytes(), np.int8)
        expected.append(np.float32(d) * qs.astype(np.float32))
    assert same_bits(quant.dequantize(raw, "Q8_K"), np.concatenate(expected))


def test_f16_and_bf16_storage_views_with_every_bit_pattern():
    bits = np.arange(1 << 16, dtype=np.uint16)
    assert same_bits(quant.dequantize(bits.view(np.float16), "F16"),
                     gguf_dequantize(bits.view(np.float16), "F16"))
    # BF16 storage arrives as uint16; gguf-py wants it as bytes
    assert same_bits(quant.dequantize(bits, "BF16"), gguf_dequantize(bits.view(np.uint8), "BF16"))


def test_f32_is_copied_bit_for_bit():
    x = np.random.default_rng(2).integers(0, 1 << 32, 1000, dtype=np.uint32).view(np.float32)
    ours = quant.dequantize(x, "F32")
    assert same_bits(ours, x) and not np.shares_memory(ours, x)


@pytest.mark.parametrize("dtype", ["I8", "I16", "I32", "I64", "F64"])
def test_plain_numeric_types_convert_like_numpy(dtype):
    storage = {"I8": "i1", "I16": "<i2", "I32": "<i4", "I64": "<i8", "F64": "<f8"}[dtype]
    x = (np.random.default_rng(3).standard_normal(500) * 1000).astype(storage)
    assert same_bits(quant.dequantize(x, dtype), x.astype(np.float32))


def test_input_forms_bytes_memoryview_readonly_memmap_and_strided(tmp_path):
    raw = random_blocks("Q4_K", 40, seed=7)
    expected = quant.dequantize(raw, "Q4_K")
    path = tmp_path / "blocks.bin"
    raw.tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    for form in (raw.tobytes(), memoryview(raw.tobytes()), mapped, raw.reshape(-1)):
        assert same_bits(quant.dequantize(form, "Q4_K"), expected)
    x = np.arange(20, dtype=np.float32)
    assert same_bits(quant.dequantize(x[::2], "F32"), x[::2])


@pytest.mark.parametrize("chunk_blocks", [1, 3, 1000])
def test_dequantize_into_any_chunking(chunk_blocks):
    raw = random_blocks("Q4_1", 100, seed=3)
    out = np.full((100, 32), np.nan, dtype=np.float32)
    result = quant.dequantize_into(raw, "Q4_1", out, chunk_blocks=chunk_blocks)
    assert result is out and same_bits(out.reshape(-1), gguf_dequantize(raw, "Q4_1"))


@pytest.mark.parametrize("dtype", ["Q4_K", "Q5_K", "Q6_K"])
def test_k_quants_in_chunks_longer_than_one_bit_pattern(dtype):
    # per-word shift/mask patterns cover 512 blocks: longer chunks apply them piece by piece
    raw = random_blocks(dtype, 1200, seed=11, finite=False)
    out = np.empty(1200 * 256, dtype=np.float32)
    quant.dequantize_into(raw, dtype, out, chunk_blocks=1100)
    assert same_bits(out, gguf_dequantize(raw, dtype))


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(dtype=st.sampled_from(BLOCK_TYPES), n_blocks=st.integers(1, 70),
       chunk_blocks=st.integers(1, 80), seed=st.integers(0, 2**32 - 1))
def test_fast_path_equals_reference_for_any_chunking(dtype, n_blocks, chunk_blocks, seed):
    raw = random_blocks(dtype, n_blocks, seed=seed, finite=seed % 2 == 0)
    out = np.empty(n_blocks * GGML_TYPES[dtype].block_size, dtype=np.float32)
    quant.dequantize_into(raw, dtype, out, chunk_blocks=chunk_blocks)
    assert same_bits(out, quant.dequantize_reference(raw, dtype))


def test_dequantize_chunks_cover_the_tensor_in_order():
    raw = random_blocks("Q8_0", 100, seed=4)
    chunks = list(quant.dequantize_chunks(raw, "Q8_0", chunk_elements=1000))
    assert [start for start, _ in chunks] == [0, 992, 1984, 2976]
    assert same_bits(np.concatenate([v for _, v in chunks]), quant.dequantize(raw, "Q8_0"))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="whole number"):
        quant.dequantize(np.zeros(19, np.uint8), "Q4_0")
    with pytest.raises(ValueError, match="unknown"):
        quant.dequantize(np.zeros(18, np.uint8), "Q9_9")
    with pytest.raises(ValueError, match="elements"):
        quant.dequantize_into(np.zeros(18, np.uint8), "Q4_0", np.empty(31, np.float32))
    with pytest.raises(ValueError, match="float32"):
        quant.dequantize_into(np.zeros(18, np.uint8), "Q4_0", np.empty(32, np.float64))
    with pytest.raises(ValueError, match="whole number"):
        quant.dequantize_chunks(np.zeros(19, np.uint8), "Q4_0")       # refused before next()
    with pytest.raises(NotImplementedError, match="Q8_1 .*ggml itself has no dequantizer"):
        quant.dequantize(np.zeros(36, np.uint8), "Q8_1")


def test_q8_1_blocks_are_ggml_s_36_bytes():
    # ggml-common.h: block_q8_1 {ggml_half d, s; int8_t qs[32]} with static_assert(sizeof ==
    # 2*sizeof(ggml_half) + QK8_1); gguf-py's GGML_QUANT_SIZES still lists 40 (float d and s)
    assert (GGML_TYPES["Q8_1"].block_size, GGML_TYPES["Q8_1"].type_size) == (32, 36)


# ---------------------------------------------------------------- quantize

def quantize_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(8)
    ties = np.round(rng.standard_normal((16, 256)) * 8).astype(np.float32) / 8
    ties[0, :32] = 0.0                                                  # an all-zero block
    ties[1, :32] = -3.0                                                 # a constant block
    return [rng.standard_normal((4, 8, 256)).astype(np.float32),      # any leading shape
            (rng.standard_normal((32, 256)) * 1e-6).astype(np.float32),
            ties,
            (rng.uniform(-1, 1, (8, 64)) * 65000).astype(np.float32)]


@pytest.mark.parametrize("dtype", OUR_QUANTIZE)
def test_quantize_is_byte_identical_to_gguf_py(dtype):
    for x in quantize_inputs():
        ours = quant.quantize(x, dtype)
        theirs = np.ascontiguousarray(gq.quantize(x, QT[dtype])).view(np.uint8)
        assert ours.dtype == np.uint8 and ours.shape == theirs.reshape(ours.shape).shape
        assert ours.shape[:-1] == x.shape[:-1]
        assert np.array_equal(ours, theirs.reshape(ours.shape)), x.shape
        assert same_bits(quant.dequantize(ours, dtype), gguf_dequantize(theirs, dtype))


def test_bf16_rounds_to_nearest_even_and_keeps_nans_quiet():
    rng = np.random.default_rng(9)
    bits = np.concatenate([rng.integers(0, 1 << 32, 200_000, dtype=np.uint32),
                           np.array([0x7F800000, 0xFF800000, 0x7F800001, 0xFFFFFFFF, 0x7FC00000,
                                     0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x00000001],
                                    dtype=np.uint32)])
    x = bits.view(np.float32).reshape(-1, 2)
    assert np.array_equal(quant.quantize(x, "BF16"), gq.quantize(x, QT.BF16))


def test_quantize_refuses_what_it_cannot_do():
    with pytest.raises(NotImplementedError, match="Q4_K"):
        quant.quantize(np.zeros((1, 256), np.float32), "Q4_K")
    with pytest.raises(ValueError, match="multiple"):
        quant.quantize(np.zeros((2, 33), np.float32), "Q4_0")


# ---------------------------------------------------------------- block_scales

def f16_at(raw: np.ndarray, start: int) -> np.ndarray:
    return raw[:, start:start + 2].copy().view("<f2")[:, 0].astype(np.float32)


def test_block_scales_q4_0_reproduce_the_dequantizer():
    raw = random_blocks("Q4_0", 500, seed=10)
    scales = quant.block_scales(raw, "Q4_0")
    q = np.concatenate([raw[:, 2:] & 15, raw[:, 2:] >> 4], axis=1)     # the spec's element order
    expected = scales["d"][:, None] * (q.astype(np.int8) - 8).astype(np.float32)
    assert scales["d"].shape == (500,) and scales["d"].dtype == np.float32
    assert same_bits(quant.dequantize(raw, "Q4_0"), expected)


def test_block_scales_q4_k_and_q6_k_reproduce_the_dequantizer():
    raw = random_blocks("Q4_K", 200, seed=22)
    s = quant.block_scales(raw, "Q4_K")
    qs = raw[:, 16:].reshape(-1, 4, 32)                  # ggml: 4 x (32 low nibbles, 32 high)
    q = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.float32)
    d = s["d"][:, None] * s["scales"].astype(np.float32)
    m = s["dmin"][:, None] * s["mins"].astype(np.float32)
    assert same_bits(quant.dequantize(raw, "Q4_K"), d[:, :, None] * q - m[:, :, None])
    raw = random_blocks("Q6_K", 200, seed=23)
    s = quant.block_scales(raw, "Q6_K")
    ql, qh = raw[:, :128].reshape(-1, 2, 64), raw[:, 128:192].reshape(-1, 2, 32)
    low = np.stack([ql & 15, ql >> 4], axis=2).reshape(-1, 2, 4, 32)
    high = np.stack([(qh >> k) & 3 for k in (0, 2, 4, 6)], axis=2)    # (n, 2, 4, 32)
    q = ((low | (high << 4)).astype(np.int32) - 32).reshape(-1, 16, 16).astype(np.float32)
    d = s["d"][:, None] * s["scales"].astype(np.float32)
    assert same_bits(quant.dequantize(raw, "Q6_K"), d[:, :, None] * q)


@pytest.mark.parametrize("dtype", ["Q4_1", "Q5_1"])
def test_block_scales_affine_types_have_d_and_m(dtype):
    raw = random_blocks(dtype, 100, seed=11)
    scales = quant.block_scales(raw, dtype)
    assert set(scales) == {"d", "m"}
    assert same_bits(scales["d"], f16_at(raw, 0)) and same_bits(scales["m"], f16_at(raw, 2))


@pytest.mark.parametrize("dtype", ["Q4_K", "Q5_K"])
def test_block_scales_k_quants_decode_6_bit_scales_and_mins_like_gguf(dtype):
    raw = random_blocks(dtype, 300, seed=12)
    scales = quant.block_scales(raw, dtype)
    sc, mn = gq.Q4_K.get_scale_min(raw[:, 4:16])
    assert np.array_equal(scales["scales"], sc) and np.array_equal(scales["mins"], mn)
    assert scales["scales"].shape == (300, 8)
    assert same_bits(scales["d"], f16_at(raw, 0)) and same_bits(scales["dmin"], f16_at(raw, 2))


def test_block_scales_q6_k_q2_k_q3_k_iq4_xs():
    raw = random_blocks("Q6_K", 50, seed=13)
    s = quant.block_scales(raw, "Q6_K")
    assert np.array_equal(s["scales"], raw[:, 192:208].view(np.int8))
    assert same_bits(s["d"], f16_at(raw, 208))
    raw = random_blocks("Q2_K", 50, seed=14)
    s = quant.block_scales(raw, "Q2_K")
    assert np.array_equal(s["scales"], raw[:, :16] & 15) and np.array_equal(s["mins"], raw[:, :16] >> 4)
    raw = random_blocks("Q3_K", 50, seed=15)
    s = quant.block_scales(raw, "Q3_K")
    packed = raw[:, 96:108].astype(np.int32)          # low 4 bits in bytes 0-7, top 2 in 8-11
    j = np.arange(16)
    low = np.where(j < 8, packed[:, j % 8] & 15, packed[:, j % 8] >> 4)
    high = (packed[:, 8 + j % 4] >> (2 * (j // 4))) & 3
    assert np.array_equal(s["scales"].astype(np.int32), (low | (high << 4)) - 32)
    raw = random_blocks("IQ4_XS", 50, seed=16)
    s = quant.block_scales(raw, "IQ4_XS")
    scales_h = raw[:, 2:4].copy().view("<u2").astype(np.int32)        # (n, 1)
    j = np.arange(8)
    low = (raw[:, 4 + j // 2].astype(np.int32) >> (4 * (j % 2))) & 15
    assert np.array_equal(s["scales"].astype(np.int32), (low | (((scales_h >> 2 * j) & 3) << 4)) - 32)


@pytest.mark.parametrize("dtype", BLOCK_TYPES)
def test_block_scales_have_one_row_per_block(dtype):
    raw = random_blocks(dtype, 7, seed=17)
    scales = quant.block_scales(raw, dtype)
    assert "d" in scales and all(v.shape[0] == 7 for v in scales.values())
    assert scales["d"].dtype == np.float32 and scales["d"].shape == (7,)
    assert quant.block_scales(np.zeros(8, np.uint8), "F32") == {}


# ---------------------------------------------------------------- decode_block

@pytest.mark.parametrize("dtype", BLOCK_TYPES + ["F32", "F16", "BF16"])
def test_decode_block_fields_tile_the_block_and_values_match(dtype):
    raw = random_blocks(dtype, 3, seed=18)
    view = quant.decode_block(raw[1], dtype)
    assert [(f.start, f.end) for f in view.fields] == list(field_offsets(dtype).values())
    assert view.fields[0].start == 0 and view.fields[-1].end == GGML_TYPES[dtype].type_size
    assert b"".join(f.raw for f in view.fields) == raw[1].tobytes()
    assert same_bits(view.values, quant.dequantize(raw, dtype).reshape(3, -1)[1])
    assert view.quants.shape == view.values.shape and view.formula
    assert view.dtype == dtype


def test_decode_block_q4_0_nibbles_in_element_order():
    block = bytes([0x00, 0x40]) + bytes((i * 17) & 0xFF for i in range(16))   # d = 2.0
    view = quant.decode_block(block, "Q4_0")
    qs = np.frombuffer(block[2:], np.uint8)
    assert view.field("d").value == 2.0 and (view.field("d").start, view.field("d").end) == (0, 2)
    assert (view.field("qs").start, view.field("qs").end) == (2, 18)
    assert view.quants[:16].tolist() == (qs & 15).tolist()              # low nibbles: 0-15
    assert view.quants[16:].tolist() == (qs >> 4).tolist()              # high nibbles: 16-31
    assert view.values.tolist() == [2.0 * (q - 8) for q in view.quants.tolist()]
    assert view.formula == "d · (q − 8)"
    layout = view.nibble_layout
    assert layout.lo_element.tolist() == list(range(16))
    assert layout.hi_element.tolist() == list(range(16, 32))
    assert layout.high_bits is None


def test_decode_block_q5_0_quants_include_the_high_bit():
    raw = random_blocks("Q5_0", 1, seed=19)
    view = quant.decode_block(raw[0], "Q5_0")
    qh = int.from_bytes(raw[0, 2:6].tobytes(), "little")
    high = np.array([(qh >> j) & 1 for j in range(32)])
    qs = raw[0, 6:22]
    low = np.concatenate([qs & 15, qs >> 4])
    assert view.quants.tolist() == (low | (high << 4)).tolist()
    assert view.nibble_layout.high_bits.tolist() == high.tolist()


@pytest.mark.parametrize("dtype", list(quant.NIBBLE_FIELDS))
def test_nibble_layout_rebuilds_the_quants(dtype):
    view = quant.decode_block(random_blocks(dtype, 1, seed=20)[0], dtype)
    layout = view.nibble_layout
    high = layout.high_bits if layout.high_bits is not None else np.zeros_like(view.quants)
    rebuilt = np.empty_like(view.quants)
    rebuilt[layout.lo_element] = layout.lo | (high[layout.lo_element] << 4)
    rebuilt[layout.hi_element] = layout.hi | (high[layout.hi_element] << 4)
    assert rebuilt.tolist() == view.quants.tolist()


def test_codebooks_match_gguf_py_and_ksigns_have_even_parity():
    from forma_gui.core import quant_tables

    for dtype in ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S"):
        theirs = getattr(gq, dtype)
        theirs.init_grid()
        assert np.array_equal(quant_tables.grid(dtype).astype(np.float32),
                              theirs.grid.reshape(theirs.grid_shape)), dtype
    assert quant_tables.ksigns().tobytes() == gq.IQ2_XXS.ksigns
    assert all(bin(s).count("1") % 2 == 0 for s in quant_tables.ksigns().tolist())


def test_decode_block_k_quant_scales_and_formula():
    raw = random_blocks("Q4_K", 2, seed=21)
    view = quant.decode_block(raw[1], "Q4_K")
    scales = quant.block_scales(raw, "Q4_K")
    assert view.scales["scales"].tolist() == scales["scales"][1].tolist()
    assert view.scales["d"] == scales["d"][1]
    assert view.formula == "d · scale · q − dmin · min"
    with pytest.raises(ValueError, match="144 bytes"):
        quant.decode_block(raw[0, :100], "Q4_K")
