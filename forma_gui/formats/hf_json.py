"""HuggingFace ``tokenizer.json`` with a byte-level BPE model.

Supported: ``model.type == "BPE"`` (merges as ``"a b"`` strings or ``["a", "b"]`` lists,
``ignore_merges``, ``unk_token``/``fuse_unk``); pre-tokenizers ``ByteLevel`` and
``Split(behavior="Isolated")``, alone or in a ``Sequence``; normalizers NFC/NFKC/NFD/NFKD
(alone or in a ``Sequence``); ``added_tokens`` with their lstrip/rstrip/single_word/
normalized/special flags. The post-processor and decoder are not needed: `encode` adds no
BOS/EOS, and byte-level decoding is fixed. ``dropout`` is ignored (it only randomizes
training-time encodes).

Anything else (WordPiece/Unigram/WordLevel models, Metaspace/Whitespace pre-tokenizers,
Lowercase/Replace normalizers, BPE without ByteLevel) is a FormatError that names it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import regex

from forma_gui.core import patterns as pats
from forma_gui.core.bytelevel import NORMALIZERS, ByteLevelBPETokenizer, MergeError
from forma_gui.core.gc_pause import gc_paused
from forma_gui.core.tokenizer import AddedToken
from forma_gui.errors import FormatError
from forma_gui.formats.file_bytes import read_bytes
from forma_gui.formats.json_text import check_text, located, parse_json
from forma_gui.formats.limits import check_id_space


def load_hf_tokenizer(path: str | os.PathLike, *, pattern: str | None = None) -> ByteLevelBPETokenizer:
    """Load a tokenizer.json; `pattern` (name or regex) replaces the file's regex stages."""
    # Qwen3's merges alone are 151k JSON lists, none in a cycle: young collections would walk
    # them again and again (~40 ms of a ~0.4 s load)
    with gc_paused():
        return _load(Path(path), pattern)


def _load(path: Path, pattern: str | None) -> ByteLevelBPETokenizer:
    data = read_bytes(path)
    try:
        return _from_json(_read_json(data, path), path, pattern)
    except FormatError as e:
        raise located(e, data) from None


def _from_json(obj: dict, path: Path, pattern: str | None) -> ByteLevelBPETokenizer:
    model = _section(obj, "model", dict, path, at=())
    _check_model(model, path)
    stages, prefix_space = pre_tokenizer_stages(obj.get("pre_tokenizer"), path, at=("pre_tokenizer",))
    if pattern:
        stages = [pats.resolve_name(pattern)]
    forms = normalizer_forms(obj.get("normalizer"), path, at=("normalizer",))
    vocab = _vocab(_section(model, "vocab", dict, path, at=("model",)), path)
    merges = _merges(_section(model, "merges", list, path, at=("model",)), path)
    added = added_tokens(_section(obj, "added_tokens", list, path, optional=True, at=()), path, at=("added_tokens",))
    unk = model.get("unk_token")
    if unk is not None and not isinstance(unk, str):
        raise FormatError(f"expected model.unk_token to be a string or null, got {unk!r:.60}",
                          path=path, json_path=("model", "unk_token"))
    unk_id = vocab.get(unk) if unk is not None else None
    top = max(max(vocab.values(), default=-1), max((t.id for t in added), default=-1))
    check_id_space(top, len(vocab) + len(added), "id", path)
    try:
        return ByteLevelBPETokenizer(
            vocab, merges, pattern=[_compile(s, path) for s in stages], added_tokens=added,
            normalizer=forms, add_prefix_space=prefix_space,
            ignore_merges=bool(model.get("ignore_merges")), unk_id=unk_id,
            fuse_unk=bool(model.get("fuse_unk")), name=path.parent.name or path.name, path=str(path))
    except MergeError as e:
        raise FormatError(f"model.merges[{e.index}]: {e}", path=path,
                          json_path=("model", "merges", e.index)) from None
    except FormatError:
        raise  # (already names the file: a pattern that does not compile)
    except ValueError as e:
        raise FormatError(f"model: {e}", path=path, json_path=("model",)) from None


def _read_json(data: bytes, path: Path) -> dict:
    obj = parse_json(data, path)
    if not isinstance(obj, dict):
        raise FormatError("expected a JSON object at the top level", path=path, json_path=())
    return obj


def _section(obj: dict, key: str, kind: type, path: Path, *, optional: bool = False,
             at: tuple = ()) -> Any:
    """obj[key] (obj at JSON path `at`), a dict or a list as `kind` says."""
    value = obj.get(key)
    if optional and value is None:
        return kind()
    if not isinstance(value, kind):
        raise FormatError(f"expected {key!r} to be a JSON {'object' if kind is dict else 'array'}", path=path,
                          json_path=(*at, key))
    return value


def _vocab(vocab: dict, path: Path) -> dict[str, int]:
    """model.vocab: piece -> non-negative integer id."""
    check_text(list(vocab), "model.vocab[{s}]", path, lambda n, s: ("model", "vocab", s))
    ids = vocab.values()
    if set(map(type, ids)) <= {int} and min(ids, default=0) >= 0:
        return vocab  # the common case, checked at C speed (bool is not int here either)
    bad = next((k for k, v in vocab.items() if type(v) is not int or v < 0), None)
    if bad is not None:
        raise FormatError(f"model.vocab[{bad!r:.60}]: expected a non-negative integer id, got "
                          f"{vocab[bad]!r:.60}", path=path, json_path=("model", "vocab", bad))
    return vocab


def _merges(merges: list, path: Path) -> list:
    """model.merges: "left right" strings, or [left, right] pairs of strings.

    One C-level pass here: all strings or all lists. The rest (two sides, both strings, both
    tokens) is checked where each merge is looked up: ByteLevelBPETokenizer raises a
    MergeError with the merge's index, which _load reports as model.merges[i].
    """
    kinds = set(map(type, merges))
    if kinds <= {str} or kinds == {list}:
        return merges
    for n, m in enumerate(merges):
        if not (isinstance(m, str) or (isinstance(m, list) and len(m) == 2
                                       and all(isinstance(p, str) for p in m))):
            raise FormatError(f"model.merges[{n}]: expected \"left right\" or [left, right], "
                              f"got {m!r:.60}", path=path, json_path=("model", "merges", n))
    return merges


def _check_model(model: dict, path: Path) -> None:
    kind = model.get("type") or ("BPE" if "merges" in model else None)
    if kind != "BPE":
        raise FormatError(f"tokenizer.json model type {kind or 'unknown'!r:.40} is not supported "
                          "here (this loader reads byte-level BPE models)", path=path,
                          json_path=("model", "type"))
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise FormatError(f"BPE with {key}={model[key]!r:.40} is not byte-level BPE; not "
                              "supported", path=path, json_path=("model", key))


def pre_tokenizer_stages(spec: dict | None, path: Path, *, at: tuple = ()) -> tuple[list[str], bool]:
    """(regex sources applied in order, add_prefix_space) of a pre_tokenizer section (at
    JSON path `at`).

    A ByteLevel stage must be present: without it the BPE does not run on bytes.
    """
    stages: list[str] = []
    byte_level = prefix_space = False
    for item, item_at in _flatten(spec, "pretokenizers", path, at):
        kind = item.get("type")
        if kind == "ByteLevel":
            if item.get("add_prefix_space") and stages:
                raise FormatError("ByteLevel(add_prefix_space=true) after another pre-tokenizer is "
                                  "not supported", path=path, json_path=item_at)
            byte_level = True
            prefix_space = prefix_space or bool(item.get("add_prefix_space"))
            if item.get("use_regex", True):
                stages.append(pats.HF_BYTELEVEL_REGEX)
        elif kind == "Split":
            stages.append(_split_regex(item, path, item_at))
        else:
            raise FormatError(f"pre-tokenizer {kind!r:.40} is not supported (ByteLevel and Split "
                              "are)", path=path, json_path=(*item_at, "type"))
    if not byte_level:
        raise FormatError("BPE without a ByteLevel pre-tokenizer is not byte-level BPE; not supported",
                          path=path, json_path=at)
    return stages, prefix_space


def _split_regex(item: dict, path: Path, at: tuple = ()) -> str:
    behavior, invert = item.get("behavior"), item.get("invert", False)
    if behavior != "Isolated" or invert:
        raise FormatError(f"Split with behavior={behavior!r:.40}, invert={invert!r:.40} is not "
                          "supported (only Isolated, not inverted)", path=path, json_path=at)
    spec = item.get("pattern") or {}
    if not isinstance(spec, dict):
        raise FormatError(f"Split pattern {spec!r:.60} is not an object", path=path,
                          json_path=(*at, "pattern"))
    if isinstance(spec.get("Regex"), str):
        return spec["Regex"]
    if isinstance(spec.get("String"), str):
        return regex.escape(spec["String"])
    raise FormatError(f"Split pattern {spec!r:.60} is neither Regex nor String", path=path,
                      json_path=(*at, "pattern"))


def normalizer_forms(spec: dict | None, path: Path, *, at: tuple = ()) -> list[str]:
    """Unicode normalization forms of a normalizer section (at JSON path `at`), in order."""
    forms = []
    for item, item_at in _flatten(spec, "normalizers", path, at):
        kind = item.get("type")
        if not isinstance(kind, str) or kind not in NORMALIZERS:
            raise FormatError(f"normalizer {kind!r:.40} is not supported (NFC, NFKC, NFD, NFKD "
                              "are)", path=path, json_path=(*item_at, "type"))
        forms.append(kind)
    return forms


def _flatten(spec: dict | None, key: str, path: Path, at: tuple) -> list[tuple[dict, tuple]]:
    """The leaves of a (possibly nested) Sequence section at JSON path `at`, each with its own."""
    if spec is None:
        return []
    if not isinstance(spec, dict):
        raise FormatError(f"expected an object or null, got {spec!r:.60}", path=path, json_path=at)
    if spec.get("type") == "Sequence":
        items = spec.get(key)
        if not isinstance(items, list):
            raise FormatError(f"Sequence without a {key!r} list", path=path, json_path=at)
        return [leaf for n, item in enumerate(items) for leaf in _flatten(item, key, path, (*at, key, n))]
    return [(spec, at)]


def added_tokens(items: list, path: Path, *, at: tuple = ()) -> list[AddedToken]:
    """The added_tokens section (at JSON path `at`) as AddedToken records."""
    out = []
    for n, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("content"), str) \
                or type(item.get("id")) is not int or item["id"] < 0:
            raise FormatError(f"added_tokens[{n}]: expected {{'id': int, 'content': str, ...}}", path=path,
                              json_path=(*at, n))
        flags = {k: bool(item.get(k, default)) for k, default in
                 (("special", False), ("lstrip", False), ("rstrip", False),
                  ("single_word", False), ("normalized", not item.get("special", False)))}
        out.append(AddedToken(item["content"], item["id"], **flags))
    check_text([t.content for t in out], "added_tokens[{n}] {s}", path, lambda n, s: (*at, n))
    return out


def _compile(source: str, path: Path):
    try:
        return pats.compile_pattern(source)
    except ValueError as e:
        raise FormatError(str(e), path=path, json_path=("pre_tokenizer",)) from None
