"""`load_tokenizer`: detect a tokenizer file's format from its content and load it.

Each format lives in its own module and exposes one loader; LOADERS maps the sniffed
kind to "module:function". Files are recognised by their first bytes, never by name alone.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from forma_gui.errors import FormatError
from forma_gui.formats.file_bytes import read_head
from forma_gui.formats.json_text import BOM, parse_json

#: bytes read to recognise a file
SNIFF_BYTES = 4096

if TYPE_CHECKING:  # pragma: no cover
    from forma_gui.core.tokenizer import Tokenizer

#: sniffed kind -> "module:function"; every loader takes (path, *, pattern=None)
LOADERS = {
    "gguf": "forma_gui.formats.gguf_tokenizer:load_gguf_tokenizer",
    "hf-json": "forma_gui.formats.hf_json:load_hf_tokenizer",
    "gpt2-json": "forma_gui.formats.gpt2_files:load_gpt2",
    "gpt2-merges": "forma_gui.formats.gpt2_files:load_gpt2",
    "tiktoken": "forma_gui.formats.tiktoken_file:load_tiktoken",
    "sentencepiece": "forma_gui.formats.sentencepiece_model:load_sentencepiece",
}

#: file names looked for, in order, when a folder is given
FOLDER_CANDIDATES = (
    "tokenizer.json", "vocab.json", "encoder.json", "tokenizer.model",
    "*.model", "*.model.v3", "*.tiktoken", "*.gguf",
)

def load_tokenizer(path: str | os.PathLike, *, pattern: str | None = None) -> "Tokenizer":
    """Load any supported tokenizer; FormatError if the file is not one."""
    path = Path(path)
    if path.is_dir():
        path = find_in_folder(path)
    kind = sniff(path)
    module_name, func_name = LOADERS[kind].split(":")
    loader = getattr(importlib.import_module(module_name), func_name)
    return loader(path, pattern=pattern)


def find_in_folder(folder: Path) -> Path:
    """The tokenizer file inside a model folder."""
    for candidate in FOLDER_CANDIDATES:
        hits = sorted(folder.glob(candidate))
        if hits:
            return hits[0]
    raise FormatError("no tokenizer file in this folder (looked for "
                      + ", ".join(FOLDER_CANDIDATES) + ")", path=folder)


def sniff(path: Path) -> str:
    """The kind of tokenizer file, from its first bytes."""
    head = read_head(path, SNIFF_BYTES)
    if head[:4] == b"GGUF":
        return "gguf"
    stripped = head.removeprefix(BOM).lstrip()
    if stripped[:1] == b"{":
        return _sniff_json(path, head)
    if stripped.startswith(b"#version") or path.name.endswith((".bpe", "merges.txt")):
        return "gpt2-merges"
    if _looks_like_tiktoken(head, whole=len(head) < SNIFF_BYTES) or (
            path.name.endswith(".tiktoken") and not head.strip()):
        return "tiktoken"
    if head[:1] == b"\x0a":  # protobuf field 1 (pieces), length-delimited
        return "sentencepiece"
    raise FormatError("not a tokenizer file this tool knows (GGUF, tokenizer.json, vocab.json + "
                      "merges.txt, tiktoken ranks, SentencePiece .model)", path=path, offset=0)


def _sniff_json(path: Path, head: bytes) -> str:
    """tokenizer.json has a "model" object; vocab.json is a flat piece -> id map."""
    text = head.decode("utf-8", "replace")
    if '"model"' in text or '"added_tokens"' in text or '"truncation"' in text:
        return "hf-json"
    if os.path.getsize(path) <= len(head):
        obj = parse_json(head, path)
        if isinstance(obj, dict) and "model" in obj:
            return "hf-json"
    return "gpt2-json"


def _looks_like_tiktoken(head: bytes, whole: bool) -> bool:
    """Lines of `base64 rank` (blank lines skipped, as tiktoken does; the last line of a head
    cut from a longer file may be cut too).

    >>> _looks_like_tiktoken(b"IQ== 0\\n\\nIg== 1\\n", True), _looks_like_tiktoken(b"\\n\\n", True)
    (True, False)
    """
    lines = head.split(b"\n")
    if not whole:
        lines = lines[:-1]
    lines = [line for line in lines if line.strip()][:4]
    return bool(lines) and all(len(parts) == 2 and parts[1].isdigit()
                               for parts in map(bytes.split, lines))
