"""GPT-2 style vocabularies: ``vocab.json``/``encoder.json`` with ``merges.txt``/``vocab.bpe`` beside it.

The JSON maps each piece (in GPT-2's byte alphabet, ``Ġworld``) to its id; the merges file
has an optional ``#version`` line and then one ``left right`` merge per line, rank = order.
Either file may be given; the other is looked for in the same folder.

``<|endoftext|>`` and ``<|startoftext|>``, when the JSON has them, become special tokens,
as tiktoken's data-gym loader and HF's GPT-2 tokenizer treat them.
"""
from __future__ import annotations

import os
from pathlib import Path

from forma_gui.core.bytelevel import ByteLevelBPETokenizer, MergeError
from forma_gui.core.tokenizer import AddedToken
from forma_gui.errors import FormatError, shown
from forma_gui.formats.file_bytes import read_bytes
from forma_gui.formats.json_text import BOM, check_text, located, parse_json
from forma_gui.formats.limits import check_id_space

JSON_NAMES = ("vocab.json", "encoder.json")
MERGES_NAMES = ("merges.txt", "vocab.bpe")
SPECIAL_PIECES = ("<|endoftext|>", "<|startoftext|>")


def load_gpt2(path: str | os.PathLike, *, pattern: str | None = None) -> ByteLevelBPETokenizer:
    """Load vocab.json + merges.txt given either one; FormatError names the file and line."""
    vocab_path, merges_path = find_pair(Path(path))
    vocab = read_vocab(vocab_path)
    merges, lines = read_merges(merges_path)
    specials = [AddedToken(p, vocab[p]) for p in SPECIAL_PIECES if p in vocab]
    try:
        return ByteLevelBPETokenizer(vocab, merges, pattern=pattern or "gpt2", added_tokens=specials,
                                     name=vocab_path.parent.name or vocab_path.name,
                                     path=str(vocab_path))
    except MergeError as e:
        raise FormatError(str(e), path=merges_path, line=lines[e.index]) from None
    except ValueError as e:
        raise FormatError(str(e), path=vocab_path) from None


def find_pair(path: Path) -> tuple[Path, Path]:
    """(json path, merges path) from either of the two."""
    is_json = path.suffix == ".json" or _starts_with_brace(path)
    names = MERGES_NAMES if is_json else JSON_NAMES
    for name in names:
        partner = path.with_name(name)
        if partner.is_file():
            return (path, partner) if is_json else (partner, path)
    raise FormatError(f"no {' or '.join(names)} next to this file (a GPT-2 vocabulary needs both "
                      "the JSON piece -> id map and the merges list)", path=path)


def _starts_with_brace(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(64).lstrip()[:1] == b"{"
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror or e}", path=path) from e


def read_vocab(path: Path) -> dict[str, int]:
    """The JSON {piece: id} map, checked: string keys, non-negative integer ids (an error
    names the byte offset of the value at fault)."""
    data = read_bytes(path)
    vocab = parse_json(data, path)
    try:
        _check_vocab(vocab, path)
    except FormatError as e:
        raise located(e, data) from None
    return vocab


def _check_vocab(vocab, path: Path) -> None:
    if not isinstance(vocab, dict) or not vocab:
        raise FormatError("expected a JSON object mapping pieces to ids", path=path, json_path=())
    bad = next((k for k, v in vocab.items() if type(v) is not int or v < 0), None)
    if bad is not None:
        raise FormatError(f"expected a non-negative integer id for {shown(bad)}, got {vocab[bad]!r:.60}",
                          path=path, json_path=(bad,))
    check_text(list(vocab), "piece {s}", path, lambda n, s: (s,))
    check_id_space(max(vocab.values()), len(vocab), "id", path)


def read_merges(path: Path) -> tuple[list[str], list[int]]:
    """The merge lines and the file line number of each (for error messages)."""
    data = read_bytes(path)
    bom = len(BOM) if data.startswith(BOM) else 0
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError("not UTF-8 text", path=path, offset=bom + e.start) from None
    merges: list[str] = []
    lines: list[int] = []
    for number, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if not line or (number == 1 and line.startswith("#version")):
            continue
        merges.append(line)
        lines.append(number)
    return merges, lines
