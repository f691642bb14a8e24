"""How much memory a model takes at each precision, and which precision fits a budget.

Costs come from the GGML type table (`ggml_types`): F16 = 2 bytes per weight, Q8_0 = 34
bytes per 32 (1.0625), Q4_0 = 18 bytes per 32 (0.5625). The planner prefers int8 (Q8_0)
for everything and falls back to int4 (Q4_0) only when int8 does not fit; even then the
token embedding table stays at int8, because a 4-bit embedding row is what a token *is*
to the model and its errors are not averaged away by a matmul.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from forma_gui.core.ggml_types import GGML_TYPES, bytes_per_weight

if TYPE_CHECKING:  # pragma: no cover
    from forma_gui.formats.weights import WeightFile

__all__ = ["bytes_per_weight", "tensor_bytes", "is_token_embedding", "totals_by_type",
           "plan_memory", "MemoryPlan", "PartPlan", "INT8", "INT4", "DISPLAY_TYPES"]

INT8, INT4 = "Q8_0", "Q4_0"
#: the precisions shown side by side: display label -> GGML type
DISPLAY_TYPES: dict[str, str] = {"f16": "F16", "int8": INT8, "int4": INT4}
#: name components of the token embedding table in GGUF, HF Llama-style and GPT-2 naming
EMBEDDING_PARTS = frozenset({"token_embd", "embed_tokens", "wte"})


def tensor_bytes(n_params: int, dtype: str) -> int:
    """Bytes `n_params` weights take as `dtype`, a partial last block counted whole.

    >>> tensor_bytes(1024, "Q8_0"), tensor_bytes(1024, "Q4_0"), tensor_bytes(1024, "F16")
    (1088, 576, 2048)
    """
    t = GGML_TYPES[dtype]
    return math.ceil(n_params / t.block_size) * t.type_size


def is_token_embedding(name: str) -> bool:
    """True for the token embedding table under GGUF, HF and GPT-2 naming.

    >>> names = ("token_embd.weight", "model.embed_tokens.weight", "transformer.wte.weight",
    ...          "lm_head.weight")
    >>> [is_token_embedding(n) for n in names]
    [True, True, True, False]
    """
    return not EMBEDDING_PARTS.isdisjoint(name.split("."))


def totals_by_type(params: Mapping[str, int]) -> dict[str, int]:
    """Whole-model bytes at each display precision: {"f16": ..., "int8": ..., "int4": ...}."""
    return {label: sum(tensor_bytes(n, dtype) for n in params.values())
            for label, dtype in DISPLAY_TYPES.items()}


@dataclass(frozen=True)
class PartPlan:
    """One tensor's share of the plan."""

    name: str
    n_params: int
    dtype: str
    nbytes: int


@dataclass(frozen=True)
class MemoryPlan:
    """The chosen precision, per-part bytes, and whether the total fits the budget."""

    budget: int
    precision: str                 # "int8" or "int4"
    parts: tuple[PartPlan, ...]
    totals: dict[str, int]         # f16 / int8 / int4 whole-model bytes, for display

    @property
    def total(self) -> int:
        """Planned bytes of all parts."""
        return sum(p.nbytes for p in self.parts)

    @property
    def fits(self) -> bool:
        """Whether the planned bytes fit the budget."""
        return self.total <= self.budget

    @property
    def n_params(self) -> int:
        """Parameters of all parts."""
        return sum(p.n_params for p in self.parts)

    def bytes_by_type(self) -> dict[str, int]:
        """Planned bytes per GGML type, e.g. {"Q4_0": ..., "Q8_0": ...} under int4."""
        out: dict[str, int] = {}
        for p in self.parts:
            out[p.dtype] = out.get(p.dtype, 0) + p.nbytes
        return out


def plan_memory(model: Mapping[str, int] | Iterable[tuple[str, int]] | WeightFile,
                budget: int) -> MemoryPlan:
    """int8 if the whole model fits in `budget` bytes, else int4 with an int8 embedding.

    `model` is {tensor name: parameter count}, (name, count) pairs, or an open WeightFile.
    If even int4 does not fit, the int4 plan is returned with `fits` False.

    >>> plan = plan_memory({"token_embd.weight": 3200, "blk.0.w": 6400}, budget=8000)
    >>> plan.precision, [(p.name, p.dtype, p.nbytes) for p in plan.parts], plan.fits
    ('int4', [('token_embd.weight', 'Q8_0', 3400), ('blk.0.w', 'Q4_0', 3600)], True)
    """
    params = _param_counts(model)
    totals = totals_by_type(params)
    if totals["int8"] <= budget:
        return _plan(params, budget, "int8", lambda name: INT8, totals)
    return _plan(params, budget, "int4",
                 lambda name: INT8 if is_token_embedding(name) else INT4, totals)


def _plan(params: dict[str, int], budget: int, precision: str, choose, totals) -> MemoryPlan:
    parts = tuple(PartPlan(name, n, choose(name), tensor_bytes(n, choose(name)))
                  for name, n in params.items())
    return MemoryPlan(budget, precision, parts, totals)


def _param_counts(model) -> dict[str, int]:
    """{name: parameter count} from a mapping, pairs, or anything with `.tensors`."""
    if hasattr(model, "tensors"):
        return {t.name: t.n_elements for t in model.tensors}
    items = model.items() if isinstance(model, Mapping) else model
    counts = {str(name): int(n) for name, n in items}
    if any(n < 0 for n in counts.values()):
        raise ValueError("parameter counts must not be negative")
    return counts
