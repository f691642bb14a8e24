"""forma_gui.core.quant against gguf-py (llama.cpp's reference Python), bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from forma_gui.core import quant
from forma_gui.core.ggml_types import GGML_TYPES
from tests.conftest import data_file

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import quants as gq  # noqa: E402

SMOLLM = ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


def same_bits(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Bit equality of two float32 arrays (NaN payloads and signed zeros included)."""
    theirs = np.ascontiguousarray(theirs, dtype=np.float32).reshape(-1)
    return (ours.dtype == np.float32 and ours.shape == theirs.shape
            and np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)))


def random_blocks(dtype: str, n_blocks: int, seed: int = 0) -> np.ndarray:
    """Random block bytes whose f16 fields hold finite values (no NaN/Inf scales)."""
    rng = np.random.default_rng(seed)
    t = GGML_TYPES[dtype]
    blocks = rng.integers(0, 256, size=(n_blocks, t.type_size), dtype=np.uint8)
    for start in F16_FIELDS.get(dtype, ()):
        half = rng.standard_normal(n_blocks).astype(np.float16) * np.float16(0.01)
        blocks[:, start:start + 2] = half.view(np.uint8).reshape(n_blocks, 2)
    return blocks


#: byte offsets of the f16 fields (scales) inside each block, per ggml's block structs
F16_FIELDS: dict[str, tuple[int, ...]] = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
}


@pytest.fixture(scope="module")
def smollm():
    reader = gguf.GGUFReader(data_file(*SMOLLM))
    return reader


# ---------------------------------------------------------------- dequantize

def test_every_tensor_of_the_real_file_is_bit_identical(smollm):
    seen = set()
    for tensor in smollm.tensors:
        dtype = tensor.tensor_type.name
        seen.add(dtype)
        ours = quant.dequantize(tensor.data, dtype)
        assert same_bits(ours, gq.dequantize(tensor.data, tensor.tensor_type)), tensor.name
        assert ours.size == tensor.n_elements
    assert seen == {"Q4_1", "Q8_0", "F32"}


@pytest.mark.parametrize("dtype", ["Q4_0", "Q4_1", "Q8_0"])
def test_data_quantized_by_gguf_py_round_trips_bit_identically(dtype):
    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    raw = gq.quantize(x, QT[dtype])
    assert same_bits(quant.dequantize(raw, dtype), gq.dequantize(raw, QT[dtype]))


@pytest.mark.parametrize("dtype", ["Q4_0", "Q4_1", "Q8_0"])
def test_random_blocks_are_bit_identical(dtype):
    raw = random_blocks(dtype, 4096)
    assert same_bits(quant.dequantize(raw, dtype), gq.dequantize(raw, QT[dtype]))


def test_f16_and_bf16_storage_views_including_nan_inf_and_subnormals():
    bits = np.arange(1 << 16, dtype=np.uint16)               # every 16-bit pattern
    assert same_bits(quant.dequantize(bits.view(np.float16), "F16"),
                     gq.dequantize(bits.view(np.float16), QT.F16))
    # gguf-py wants BF16 as bytes; we also take the uint16 storage view
    assert same_bits(quant.dequantize(bits, "BF16"), gq.dequantize(bits.view(np.uint8), QT.BF16))


def test_f32_is_copied_bit_for_bit():
    x = np.random.default_rng(2).integers(0, 1 << 32, 1000, dtype=np.uint32).view(np.float32)
    ours = quant.dequantize(x, "F32")
    assert same_bits(ours, x) and not np.shares_memory(ours, x)


@pytest.mark.parametrize("chunk_blocks", [1, 3, 1000])
def test_dequantize_into_any_chunking(chunk_blocks):
    raw = random_blocks("Q4_1", 100, seed=3)
    out = np.full(3200, np.nan, dtype=np.float32)
    result = quant.dequantize_into(raw, "Q4_1", out, chunk_blocks=chunk_blocks)
    assert result is out and same_bits(out, gq.dequantize(raw, QT.Q4_1))


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
