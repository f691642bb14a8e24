"""The SmolLM2 GGUF test file and its gguf-py reader, shared by the tensor-view tests.

gguf-py parses every vocabulary string into numpy views, which takes seconds; one reader
per test process is enough.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import gguf
import numpy as np

from tests.conftest import data_file


def smol_path() -> Path:
    return data_file("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


@lru_cache(maxsize=1)
def _reader(path: str) -> gguf.GGUFReader:
    return gguf.GGUFReader(path)


def smol_reader() -> gguf.GGUFReader:
    """gguf-py's reader of the SmolLM2 file (the oracle)."""
    return _reader(str(smol_path()))


def gguf_tensor(name: str):
    return next(t for t in smol_reader().tensors if t.name == name)


def gguf_dequantized(name: str) -> np.ndarray:
    """A tensor dequantized by gguf-py, in numpy row-major shape."""
    t = gguf_tensor(name)
    return gguf.quants.dequantize(t.data, t.tensor_type).reshape(tuple(reversed(t.shape.tolist())))
