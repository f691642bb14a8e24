"""Write a trained byte-level BPE in the formats other tools read.

* GPT-2 `vocab.json` + `merges.txt`: pieces in GPT-2's byte-to-unicode rendering (`Ġthe`);
  ids are ranks.
* a tiktoken rank file: one `base64(bytes) rank` line per token, in rank order. The format
  has no room for the pre-tokenizer pattern: load it with
  `load_tokenizer(path, pattern=NAME)` or
  `tiktoken.Encoding(name, pat_str=REGEX, mergeable_ranks=load_tiktoken_bpe(path), special_tokens={})`.
* a HuggingFace `tokenizer.json`: a BPE model with vocab and merges, a Split pre-tokenizer
  with the same regex followed by ByteLevel (no regex of its own), a ByteLevel decoder,
  no normalizer and no post-processor.

Ids are the trainer's ranks everywhere (the 256 bytes in byte order, then one id per merge),
so all four files give the same ids for the same text; see `forma_gui.core.bpe` for why
rank-of-bytes (tiktoken) and merge-list order (HF) agree for these merges.
"""
from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Callable

from forma_gui.core import patterns
from forma_gui.core.bpe import ByteLevelTraining, pattern_regex
from forma_gui.core.byte_map import bytes_to_pieces, bytes_to_unicode_str

#: the files `export_all` writes into a folder, with what each is
FILES: dict[str, str] = {
    "vocab.json": "GPT-2 vocabulary (piece -> id)",
    "merges.txt": "GPT-2 merges, one 'left right' per line in rank order",
    "tokenizer.json": "HuggingFace tokenizers",
    "ranks.tiktoken": "tiktoken mergeable ranks (base64 rank)",
}

MERGES_HEADER = "#version: 0.2"


#: pattern name -> the regex form to store in tokenizer.json, where the name's own form
#: (tiktoken's, with possessive quantifiers) reads differently in HF's Oniguruma: there
#: `{1,3}+` is a repetition, not possessive. These are the forms HF's own files store.
HF_REGEX: dict[str, str] = {
    "gpt2": patterns.HF_BYTELEVEL_REGEX,
    "cl100k": patterns.PATTERNS["llama3"],
}


def gpt2_vocab(training: ByteLevelTraining) -> dict[str, int]:
    """piece -> id, in id order.

    >>> from forma_gui.core.bpe import train_bytelevel
    >>> list(gpt2_vocab(train_bytelevel("the the", 2)))[-2:]
    ['he', 'the']
    """
    datas = [training.token_bytes(i) for i in range(training.vocab_size)]
    return {piece: i for i, piece in enumerate(bytes_to_pieces(datas))}


def gpt2_merges(training: ByteLevelTraining) -> list[tuple[str, str]]:
    """The merges as rendered piece pairs, in rank order."""
    return [(bytes_to_unicode_str(a), bytes_to_unicode_str(b)) for a, b in training.merged_bytes()]


def hf_regex(pattern: str) -> str:
    """The pre-tokenizer regex to write into tokenizer.json for a pattern name."""
    return HF_REGEX.get(patterns.ALIASES.get(pattern, pattern), pattern_regex(pattern))


def write_gpt2(training: ByteLevelTraining, vocab_path: str | os.PathLike,
               merges_path: str | os.PathLike) -> None:
    """GPT-2's `vocab.json` (compact, UTF-8) and `merges.txt` (with the `#version` header)."""
    _write_text(vocab_path, json.dumps(gpt2_vocab(training), ensure_ascii=False))
    lines = [MERGES_HEADER, *(f"{a} {b}" for a, b in gpt2_merges(training))]
    _write_text(merges_path, "\n".join(lines) + "\n")


def write_tiktoken(training: ByteLevelTraining, path: str | os.PathLike) -> None:
    """tiktoken's rank file: `base64(token bytes) rank` per line, ranks ascending."""
    lines = (f"{base64.b64encode(training.token_bytes(i)).decode('ascii')} {i}"
             for i in range(training.vocab_size))
    _write_text(path, "\n".join(lines) + "\n")


def hf_tokenizer_json(training: ByteLevelTraining) -> dict:
    """The `tokenizer.json` document for HuggingFace tokenizers."""
    split = {"type": "Split", "pattern": {"Regex": hf_regex(training.pattern)},
             "behavior": "Isolated", "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": False}
    model = {"type": "BPE", "dropout": None, "unk_token": None,
             "continuing_subword_prefix": None, "end_of_word_suffix": None,
             "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": gpt2_vocab(training), "merges": [list(m) for m in gpt2_merges(training)]}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": model}


def write_hf_json(training: ByteLevelTraining, path: str | os.PathLike) -> None:
    """Write the training as a HuggingFace tokenizer.json."""
    _write_text(path, json.dumps(hf_tokenizer_json(training), ensure_ascii=False, indent=1))


#: file name -> how to write it
WRITERS: dict[str, Callable[[ByteLevelTraining, Path], None]] = {
    "vocab.json": lambda t, p: write_gpt2(t, p, p.with_name("merges.txt")),
    "tokenizer.json": write_hf_json,
    "ranks.tiktoken": write_tiktoken,
}


def export_all(training: ByteLevelTraining, folder: str | os.PathLike) -> list[Path]:
    """Write every format into `folder` (created if needed); the paths written, as FILES."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, writer in WRITERS.items():
        writer(training, folder / name)
    return [folder / name for name in FILES]


def _write_text(path: str | os.PathLike, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
