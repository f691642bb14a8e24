"""forma_gui: see how a language model sees text and weights.

Public entry points (stable: other tools call them):

    forma_gui.load_tokenizer(path, *, pattern=None) -> Tokenizer
    forma_gui.open_weights(path) -> WeightFile
    forma_gui.FormatError
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from forma_gui.errors import FormatError

if TYPE_CHECKING:  # pragma: no cover
    from forma_gui.core.tokenizer import Tokenizer
    from forma_gui.formats.weights import WeightFile

__version__ = "0.1.0"
__all__ = ["FormatError", "load_tokenizer", "open_weights", "__version__"]


def load_tokenizer(path, *, pattern: str | None = None) -> "Tokenizer":
    """Open any supported tokenizer file or folder; the format is detected from the content."""
    from forma_gui.formats.loader import load_tokenizer as _load

    return _load(path, pattern=pattern)


def open_weights(path) -> "WeightFile":
    """Open a .gguf, a .safetensors, or a folder of safetensors shards, memory-mapped read-only."""
    from forma_gui.formats.weights import open_weights as _open

    return _open(path)
