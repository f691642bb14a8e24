"""Memory planner: known per-weight costs from ggml's block layouts, int8 first, int4 fallback."""
from __future__ import annotations

import pytest

from forma_gui.core.memory import (INT4, INT8, bytes_per_weight, is_token_embedding, plan_memory,
                                   tensor_bytes, totals_by_type)
from tests.conftest import data_file

# ggml: block_q8_0 = f16 d + 32 x int8 (34 bytes / 32); block_q4_0 = f16 d + 16 bytes of nibbles
KNOWN_BYTES_PER_WEIGHT = {"F32": 4.0, "F16": 2.0, "BF16": 2.0, "Q8_0": 34 / 32,
                          "Q4_0": 18 / 32, "Q4_1": 20 / 32, "Q4_K": 144 / 256, "Q6_K": 210 / 256}


@pytest.mark.parametrize("dtype, expected", KNOWN_BYTES_PER_WEIGHT.items())
def test_bytes_per_weight(dtype: str, expected: float) -> None:
    assert bytes_per_weight(dtype) == expected


def test_issue_figures() -> None:
    assert (bytes_per_weight("F16"), bytes_per_weight("Q8_0"), bytes_per_weight("Q4_0")) \
        == (2, 1.0625, 0.5625)


def test_tensor_bytes_counts_whole_blocks() -> None:
    assert tensor_bytes(64, "Q8_0") == 68
    assert tensor_bytes(65, "Q8_0") == 102  # a partial block still takes a block
    assert tensor_bytes(0, "Q4_0") == 0
    assert tensor_bytes(3, "F32") == 12


def test_embedding_names() -> None:
    assert is_token_embedding("token_embd.weight")
    assert is_token_embedding("model.embed_tokens.weight")
    assert is_token_embedding("wte.weight")
    assert not is_token_embedding("output.weight")
    assert not is_token_embedding("blk.0.wte_like.weight")


MODEL = {"token_embd.weight": 32_000 * 64, "blk.0.attn_q.weight": 64 * 64,
         "blk.0.ffn_up.weight": 64 * 256, "output_norm.weight": 64}
N = sum(MODEL.values())


def test_totals() -> None:
    assert totals_by_type(MODEL) == {"f16": 2 * N, "int8": N // 32 * 34, "int4": N // 32 * 18}


def test_int8_when_it_fits() -> None:
    plan = plan_memory(MODEL, budget=N // 32 * 34)  # exactly the int8 size
    assert plan.precision == "int8" and plan.fits
    assert {p.dtype for p in plan.parts} == {INT8}
    assert plan.total == N * 1.0625
    assert [p.name for p in plan.parts] == list(MODEL)


def test_int4_keeps_the_embedding_at_int8() -> None:
    plan = plan_memory(MODEL, budget=N // 32 * 34 - 1)  # one byte short of int8
    assert plan.precision == "int4" and plan.fits
    parts = {p.name: p for p in plan.parts}
    assert parts["token_embd.weight"].dtype == INT8
    assert parts["token_embd.weight"].nbytes == 32_000 * 64 * 1.0625
    assert all(p.dtype == INT4 for name, p in parts.items() if name != "token_embd.weight")
    assert plan.total == 32_000 * 64 * 1.0625 + (N - 32_000 * 64) * 0.5625
    assert plan.bytes_by_type() == {INT8: 32_000 * 64 * 34 // 32,
                                    INT4: (N - 32_000 * 64) * 18 // 32}


def test_nothing_fits() -> None:
    plan = plan_memory(MODEL, budget=1000)
    assert plan.precision == "int4" and not plan.fits and plan.total > 1000


def test_pairs_and_bad_counts() -> None:
    assert plan_memory(list(MODEL.items()), 10**9).total == plan_memory(MODEL, 10**9).total
    with pytest.raises(ValueError):
        plan_memory({"w": -1}, 10)


def test_smollm2_file() -> None:
    """SmolLM2-135M: 134,515,008 parameters (the 135M in its name); costs per the table."""
    from forma_gui import open_weights

    with open_weights(data_file("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")) as w:
        plan = plan_memory(w, budget=100 * 10**6)
    n = plan.n_params
    assert 134e6 < n < 136e6
    assert plan.totals == {"f16": 2 * n, "int8": n * 34 // 32, "int4": n * 18 // 32}
    assert plan.precision == "int4" and plan.fits  # int8 needs 143 MB
    embd = next(p for p in plan.parts if p.name == "token_embd.weight")
    assert (embd.n_params, embd.dtype) == (49152 * 576, INT8)
