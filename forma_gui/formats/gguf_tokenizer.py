"""The tokenizer stored in a GGUF file's ``tokenizer.ggml.*`` metadata, as llama.cpp loads it.

Only the header is read (`GGUFFile(read_tensors=False)`): a vocab-only file has no tensors,
and a multi-gigabyte model opens its tokenizer as fast as a small one. The keys and defaults
follow llama-vocab.cpp ``llama_vocab::impl::load``:

    tokenizer.ggml.model        STRING  gpt2 | llama | bert | t5 (others are refused)
    tokenizer.ggml.pre          STRING  the pre-tokenizer (gpt2 family; see core.llama_pre)
    tokenizer.ggml.tokens       ARRAY[STRING]   required; an empty text becomes [EMPTY_<id>]
    tokenizer.ggml.scores       ARRAY[FLOAT32 | INT32]  at least one per token
    tokenizer.ggml.token_type   ARRAY[INT32]            at least one per token
    tokenizer.ggml.merges       ARRAY[STRING]   "left right", required for gpt2
    tokenizer.ggml.*_token_id   UINT32  bos, eos, eot, eom, unknown, seperator [sic], padding,
                                        mask, fim_*; an id past the vocabulary is ignored
    tokenizer.ggml.add_{bos,eos,sep}_token, add_space_prefix, remove_extra_whitespaces,
    normalizer.lowercase, normalizer.strip_accents                BOOL
    tokenizer.ggml.precompiled_charsmap   ARRAY[UINT8 | INT8]  (t5)

Everything llama.cpp would refuse is a FormatError naming the key and its byte offset: a
missing or mistyped key, a count larger than the file (the GGUF reader checks those), fewer
scores or types than tokens, a repeated token text, a merge naming a token the vocabulary
does not have, an unknown model or pre-tokenizer name, add_bos without a BOS token.
"""
from __future__ import annotations

import os
from array import array
from operator import methodcaller
from pathlib import Path
from typing import Any, Sequence

from forma_gui.core.charsmap import CharsMap
from forma_gui.core.llama_pre import UnknownPreTokenizer, llama_pre_tokenizer
from forma_gui.core.llama_tokenizers import (LlamaBPETokenizer, LlamaSPMTokenizer,
                                             LlamaUGMTokenizer)
from forma_gui.core.llama_vocab import TYPE_ATTRS, ATTR_NORMAL, LlamaTokenizer, LlamaVocab
from forma_gui.core.slices import (sliced_all, sliced_dict, sliced_join, sliced_set,
                                   sliced_split)
from forma_gui.core.wordpiece import WordPieceTokenizer
from forma_gui.errors import FormatError, shown
from forma_gui.formats.gguf import GGUFFile
from forma_gui.formats.gguf_split import first_shard_path
from forma_gui.formats import token_table
from forma_gui.formats.lazy_strings import LazyStrings
from forma_gui.formats.token_table import TokenTable

K = "tokenizer.ggml."

#: model name -> (family, default special ids, default flags) as llama_vocab::impl::load sets them
FAMILIES: dict[str, tuple[str, dict[str, int | None], dict[str, bool]]] = {
    "llama": ("spm", {"bos": 1, "eos": 2, "unk": 0},
              {"add_space_prefix": True, "clean_spaces": False, "add_bos": True,
               "add_eos": False}),
    "bert": ("wpm", {"bos": 101, "unk": 100, "sep": 102, "pad": 0, "mask": 103},
             {"add_space_prefix": False, "clean_spaces": True, "add_bos": True,
              "add_eos": False, "add_sep": True}),
    "gpt2": ("bpe", {"bos": 11, "eos": 11},
             {"add_space_prefix": False, "escape_whitespaces": False, "clean_spaces": True}),
    "t5": ("ugm", {"eos": 1, "unk": 2, "pad": 0}, {"add_bos": False, "add_eos": True}),
}
#: models llama.cpp knows that forma does not tokenize
UNSUPPORTED_MODELS = ("rwkv", "plamo2", "gemma4", "hybriddna", "whitespace")

#: special id name -> metadata key suffix (later keys win, as the deprecated FIM ones do)
SPECIAL_KEYS = (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("eot", "eot_token_id"),
                ("eom", "eom_token_id"), ("unk", "unknown_token_id"),
                ("sep", "seperator_token_id"), ("pad", "padding_token_id"),
                ("mask", "mask_token_id"), ("fim_pre", "fim_pre_token_id"),
                ("fim_suf", "fim_suf_token_id"), ("fim_mid", "fim_mid_token_id"),
                ("fim_pad", "fim_pad_token_id"), ("fim_rep", "fim_rep_token_id"),
                ("fim_sep", "fim_sep_token_id"), ("fim_pre", "prefix_token_id"),
                ("fim_suf", "suffix_token_id"), ("fim_mid", "middle_token_id"))
#: boolean key -> flag
FLAG_KEYS = (("add_space_prefix", "add_space_prefix"),
             ("remove_extra_whitespaces", "remove_extra_whitespaces"))
LLAMA_FLAG_DEFAULTS = {"add_space_prefix": False, "add_bos": False, "add_eos": False,
                       "add_sep": False, "ignore_merges": False, "clean_spaces": False,
                       "remove_extra_whitespaces": False, "escape_whitespaces": True,
                       "treat_whitespace_as_suffix": False}


class _Meta:
    """Typed access to GGUF metadata: every mismatch is a FormatError at the key's offset."""

    def __init__(self, gguf: GGUFFile) -> None:
        self.g = gguf
        self.path = gguf.path

    def fail(self, key: str, message: str) -> FormatError:
        return FormatError(f"{key}: {message}", path=self.path,
                           offset=self.g.metadata_offsets.get(key))

    def get(self, key: str, types: tuple[str, ...], *, required: bool = False) -> Any:
        if key not in self.g.metadata:
            if required:
                raise FormatError(f"{key} is missing (llama.cpp needs it)", path=self.path)
            return None
        found = self.g.metadata_types[key]
        if found not in types:
            raise self.fail(key, f"expected {' or '.join(types)}, found {found}")
        return self.g.metadata[key]


def load_gguf_tokenizer(path: str | os.PathLike, *, pattern: str | None = None) -> LlamaTokenizer:
    """The tokenizer of a GGUF file, llama.cpp's way. `pattern` replaces the pre-tokenizer
    regexes of a ``gpt2`` vocabulary (a name from core.patterns or a raw regex). A later shard
    of a split model reads the first shard's, which holds the model's metadata."""
    path = os.fspath(path)
    with GGUFFile(path, read_tensors=False) as gguf:
        first = first_shard_path(gguf)
        if first is None:
            return _build(_Meta(gguf), Path(path).name, pattern)
    if not os.path.isfile(first):
        raise FormatError("the first shard of this split model, which holds its tokenizer, is "
                          "missing (expected this file)", path=first)
    with GGUFFile(first, read_tensors=False) as gguf:
        return _build(_Meta(gguf), Path(first).name, pattern)


def _build(meta: _Meta, name: str, pattern: str | None) -> LlamaTokenizer:
    model = meta.get(K + "model", ("STRING",), required=True)
    if model in ("no_vocab", "none"):
        raise meta.fail(K + "model", f"{shown(model)}: the file has no vocabulary")
    if model in UNSUPPORTED_MODELS:
        raise meta.fail(K + "model", f"tokenizer model {shown(model)} is not supported (supported: "
                                     f"{', '.join(FAMILIES)})")
    if model not in FAMILIES:
        raise meta.fail(K + "model", f"unknown tokenizer model {shown(model)} (llama.cpp refuses it; "
                                     f"known: {', '.join(FAMILIES)})")
    family, default_ids, family_flags = FAMILIES[model]
    tokens, token_ids, table = _tokens(meta)
    flags = {**LLAMA_FLAG_DEFAULTS, **family_flags}
    pre_name = meta.get(K + "pre", ("STRING",))
    pre = _pre_tokenizer(meta, pre_name, pattern) if family == "bpe" else None
    if pre is not None:
        flags.update({k: v for k, v in pre.flags.items() if k != "no_bos"})
        if pre.flags.get("no_bos"):
            default_ids = {**default_ids, "bos": None}
    for flag, key in FLAG_KEYS:
        value = meta.get(K + key, ("BOOL",))
        if value is not None:
            flags[flag] = value
    specials = _special_ids(meta, default_ids, len(tokens))
    _add_flags(meta, flags, specials)
    vocab = LlamaVocab(tokens, _attrs(meta, len(tokens)), _scores(meta, len(tokens)),
                       specials=specials, flags=flags,
                       model_name=meta.get("general.name", ("STRING",)) or "",
                       pre=pre_name or "",
                       architecture=meta.get("general.architecture", ("STRING",)) or "",
                       token_to_id=token_ids,
                       find_texts=None if table is None else table.ids_of)
    if family == "bpe":
        merges, merge_ids = _merges(meta, vocab, pre_name, table)
        return LlamaBPETokenizer(vocab, merges, pre, merge_ids=merge_ids, name=name,
                                 path=meta.path)
    if family == "spm":
        return LlamaSPMTokenizer(vocab, name=name, path=meta.path)
    if family == "wpm":
        return WordPieceTokenizer(vocab, name=name, path=meta.path)
    return LlamaUGMTokenizer(vocab, _charsmap(meta), name=name, path=meta.path)


def _tokens(meta: _Meta) -> tuple[Sequence[str], dict[str, int] | None, TokenTable | None]:
    """The token texts (an empty one becomes "[EMPTY_<id>]"; still undecoded when the
    bytes passed the checks), text -> id (None: the vocabulary builds it when first asked)
    and the texts by bytes (None: not built); a repeated text is an error."""
    raw = meta.get(K + "tokens", ("ARRAY[STRING]",), required=True)
    table = TokenTable(raw) if isinstance(raw, LazyStrings) else None
    if table is not None and table.unique and not table.has_empty:
        return raw, None, table  # checked on the bytes: the list and the dict can wait
    tokens = list(raw)
    if "" in tokens:
        tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    ids = sliced_dict(tokens, range(len(tokens)))  # in slices: a loading worker holds the GIL
    if len(ids) != len(tokens):
        for i, t in enumerate(tokens):
            if ids[t] != i:
                raise meta.fail(K + "tokens", f"token {i} {shown(t)} repeats token {ids[t]} "
                                              "(llama.cpp asserts the texts are unique)")
    return tokens, ids, table


def _counted(meta: _Meta, key: str, types: tuple[str, ...], n: int):
    values = meta.get(key, types)
    if values is not None and len(values) < n:
        raise meta.fail(key, f"{len(values)} entries for {n} tokens")
    return values


def _scores(meta: _Meta, n: int):
    """float32 scores (INT32 arrays are converted), None without the key."""
    import numpy as np

    values = _counted(meta, K + "scores", ("ARRAY[FLOAT32]", "ARRAY[INT32]"), n)
    return None if values is None else np.asarray(values[:n], dtype=np.float32)


def _attrs(meta: _Meta, n: int) -> array:
    """Attribute bits per token (uint16) from the types; all NORMAL without the key."""
    import numpy as np

    types = _counted(meta, K + "token_type", ("ARRAY[INT32]",), n)
    if types is None:
        return array("H", [ATTR_NORMAL]) * n
    table = np.zeros(8, dtype=np.uint16)  # unknown types map to UNDEFINED (0)
    for kind, attr in TYPE_ATTRS.items():
        table[kind] = attr
    types = np.asarray(types[:n], dtype=np.int64)
    attrs = np.where((types >= 0) & (types < 8), table[np.clip(types, 0, 7)], 0)
    return array("H", attrs.astype(np.uint16).tobytes())


def _pre_tokenizer(meta: _Meta, name: str | None, pattern: str | None):
    try:
        pre = llama_pre_tokenizer(name)
    except UnknownPreTokenizer as e:
        raise meta.fail(K + "pre", str(e)) from None
    if not pre.byte_encode:
        raise meta.fail(K + "pre", f"pre-tokenizer {shown(name)} works on raw UTF-8 (SPM-style BPE), "
                                   "which is not supported")
    if pattern is not None:
        from dataclasses import replace

        from forma_gui.core import patterns as pats

        compiled = pats.get_pattern(pattern)
        pre = replace(pre, sources=(compiled.pattern,), patterns=(compiled,), wide=(False,))
    return pre


def _special_ids(meta: _Meta, defaults: dict[str, int | None], n: int) -> dict[str, int | None]:
    specials: dict[str, int | None] = {key: None for key, _ in SPECIAL_KEYS}
    for key, value in defaults.items():
        specials[key] = value if value is not None and value < n else None
    for key, suffix in SPECIAL_KEYS:
        value = meta.get(K + suffix, ("UINT32",))
        if value is not None and value < n:
            specials[key] = value
    return specials


def _add_flags(meta: _Meta, flags: dict[str, bool], specials: dict[str, int | None]) -> None:
    """add_bos/add_eos/add_sep and the BERT normalizer options; refuse an add_* without id."""
    for flag, ident in (("add_bos", "bos"), ("add_eos", "eos"), ("add_sep", "sep")):
        value = meta.get(K + flag + "_token", ("BOOL",))
        if value is not None:
            flags[flag] = value
        if flags.get(flag) and specials.get(ident) is None:
            raise meta.fail(K + flag + "_token", f"{flag} is true, but the {ident} token id is not "
                                                 "set (llama.cpp refuses the model)")
    lowercase = meta.get(K + "normalizer.lowercase", ("BOOL",))
    flags["lowercase"] = True if lowercase is None else lowercase
    strip = meta.get(K + "normalizer.strip_accents", ("BOOL",))
    flags["strip_accents"] = flags["lowercase"] if strip is None else strip


def _merges(meta: _Meta, vocab: LlamaVocab, pre_name: str | None,
            table: TokenTable | None) -> tuple[Sequence[str], Any]:
    """The merges, each naming two tokens of the vocabulary (llama.cpp splits at the first
    space after position 0), and, when `table` could find them, their (left, right, result)
    ids for the first encode. Still undecoded (LazyStrings) when they pass the fast checks:
    the merge table is built on the first encode."""
    key = K + "merges"
    merges = meta.get(key, ("ARRAY[STRING]",), required=pre_name != "kimi-k2")
    if not merges:
        return [], None
    if table is not None and isinstance(merges, LazyStrings):
        merge_ids = token_table.merge_ids(merges, table)
        if merge_ids is not None:
            return merges, merge_ids
    ids = vocab.token_to_id
    if _merges_are_pairs_of_tokens(merges, ids):
        return merges, None
    for i, merge in enumerate(merges):
        cut = merge.find(" ", 1)
        if cut < 0:
            raise meta.fail(key, f"merge {i} {shown(merge)} has no space separating two tokens")
        for part in (merge[:cut], merge[cut + 1:]):
            if part not in ids:
                raise meta.fail(key, f"merge {i} {shown(merge)} names {shown(part)}, which is not a token")
    return merges, None


def _merges_are_pairs_of_tokens(merges: Sequence[str], ids: dict[str, int]) -> bool:
    """The common case, checked at C speed: one space in every merge, and both sides tokens
    (then the left side is not empty, and llama.cpp's split at the first space after
    position 0 cuts there). False means: look at each merge."""
    if sliced_set(methodcaller("count", " "), merges) != {1}:
        return False
    # in slices, as _tokens: one pass over half a million parts held the GIL for ~70 ms
    parts = sliced_split(sliced_join(" ", merges), " ")  # one space each: 2 parts each
    # each distinct side once: a set hashes every fresh string once, then only the distinct
    # ones (about a third) are looked up: ~3x faster than a lookup per side
    return sliced_all(ids.__contains__, list(sliced_set(None, parts)))


def _charsmap(meta: _Meta) -> CharsMap | None:
    key = K + "precompiled_charsmap"
    blob = meta.get(key, ("ARRAY[UINT8]", "ARRAY[INT8]"))
    if blob is None or not len(blob):
        return None
    try:
        return CharsMap(blob.tobytes(), path=meta.path, strict=False, stop_at_nul=True)
    except FormatError as e:
        raise meta.fail(key, e.message) from None
