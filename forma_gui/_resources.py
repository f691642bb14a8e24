"""Locate the embedded defaults shipped in the wheel (the top-level `resources/` folder)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def resource_path(*parts: str) -> Path:
    """Path of a shipped resource, e.g. resource_path("gpt2", "encoder.json")."""
    root = resources.files("forma_gui.resources")
    return Path(str(root.joinpath(*parts)))


def default_tokenizer_path() -> Path:
    """The embedded default vocabulary: GPT-2's encoder.json (with vocab.bpe beside it)."""
    return resource_path("gpt2", "encoder.json")
