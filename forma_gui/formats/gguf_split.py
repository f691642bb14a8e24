"""Split GGUF models: one model stored as ``<prefix>-00001-of-0000N.gguf`` ... ``-0000N-of-0000N``.

llama.cpp's gguf-split and gguf-py's ``GGUFWriter(split_max_tensors=..., split_max_size=...)``
write them. Every shard is a whole GGUF file with its own header; the first holds the model's
metadata, and every shard holds

    split.no             UINT16  this shard's index, 0-based
    split.count          UINT16  how many shards there are
    split.tensors.count  INT32   tensors in all shards together

Shard file names follow llama.cpp's ``llama_split_path``: ``prefix + "-%05d-of-%05d.gguf" %
(no + 1, count)``. llama.cpp must be given the first shard; here any shard finds the others
next to it. A file without ``split.count``, or with a count of 1, is an ordinary GGUF.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from forma_gui.errors import FormatError
from forma_gui.formats.gguf import GGUFFile

SPLIT_NO = "split.no"
SPLIT_COUNT = "split.count"
SPLIT_TENSORS = "split.tensors.count"
#: split key -> the GGUF type llama.cpp reads it as (its getters refuse any other)
SPLIT_KEY_TYPES: dict[str, str] = {SPLIT_NO: "UINT16", SPLIT_COUNT: "UINT16",
                                   SPLIT_TENSORS: "INT32"}
#: a shard's file name; UINT16 counts always fit the five digits of "%05d"
SHARD_NAME = re.compile(r"(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")


@dataclass(frozen=True)
class SplitKeys:
    """The split.* values of one shard (`tensors` is None where the shard omits it)."""

    no: int
    count: int
    tensors: int | None


# -- names ---------------------------------------------------------------------------------

def split_path(prefix: str, no: int, count: int) -> str:
    """llama_split_path: the file of shard `no` (0-based) of `count`.

    >>> split_path("/models/m-q4_0", 1, 4)
    '/models/m-q4_0-00002-of-00004.gguf'
    """
    return f"{prefix}-{no + 1:05d}-of-{count:05d}.gguf"


def split_prefix(path: str, no: int, count: int) -> str | None:
    """llama_split_prefix: `path` without its suffix, if the suffix names shard `no` of `count`.

    >>> split_prefix("/models/m-00002-of-00004.gguf", 1, 4), split_prefix("/m/m.gguf", 0, 2)
    ('/models/m', None)
    """
    suffix = split_path("", no, count)
    if len(path) > len(suffix) and path.endswith(suffix):
        return path[:-len(suffix)]
    return None


def parse_shard_name(name: str) -> tuple[str, int, int] | None:
    """(prefix, 0-based no, count) of a shard's file name; None if it is not one.

    >>> parse_shard_name("m-00002-of-00003.gguf"), parse_shard_name("m-00004-of-00003.gguf")
    (('m', 1, 3), None)
    """
    m = SHARD_NAME.fullmatch(name)
    if m is None or not 1 <= int(m["no"]) <= int(m["count"]):
        return None
    return m["prefix"], int(m["no"]) - 1, int(m["count"])


def is_one_split_model(names: list[str]) -> bool:
    """Whether every name is a different shard of one split model (some may be missing).

    >>> is_one_split_model(["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"])
    True
    >>> is_one_split_model(["m-00001-of-00002.gguf", "n-00002-of-00002.gguf"])
    False
    """
    parsed = [parse_shard_name(n) for n in names]
    if not parsed or None in parsed:
        return False
    return len({(p[0], p[2]) for p in parsed}) == 1 and len({p[1] for p in parsed}) == len(names)


# -- keys ----------------------------------------------------------------------------------

def split_keys(g: GGUFFile) -> SplitKeys | None:
    """The shard's split.* values; None for an ordinary file (no split.count, or 1)."""
    count = _key(g, SPLIT_COUNT, required=False)
    if count is None or count <= 1:
        return None
    no = _key(g, SPLIT_NO, required=True)
    if no >= count:
        raise _fail(g, SPLIT_NO, f"split.no {no} is not below split.count {count}")
    return SplitKeys(no, count, _key(g, SPLIT_TENSORS, required=False))


def _key(g: GGUFFile, key: str, *, required: bool) -> int | None:
    if key not in g.metadata:
        if required:
            raise FormatError(f"expected {key} ({SPLIT_KEY_TYPES[key]}) in this shard of a "
                              "split model", path=g.path)
        return None
    if g.metadata_types[key] != SPLIT_KEY_TYPES[key]:
        raise _fail(g, key, f"expected {key} of type {SPLIT_KEY_TYPES[key]}, found "
                            f"{g.metadata_types[key]}")
    return g.metadata[key]


def _fail(g: GGUFFile, key: str, message: str) -> FormatError:
    return FormatError(message, path=g.path, offset=g.metadata_offsets.get(key))


# -- shards --------------------------------------------------------------------------------

def first_shard_path(g: GGUFFile) -> str | None:
    """The first shard's file when `g` is a later shard of a split model, else None."""
    keys = split_keys(g)
    if keys is None or keys.no == 0:
        return None
    return split_path(_prefix(g, keys), 0, keys.count)


def open_shards(g: GGUFFile) -> list[GGUFFile]:
    """Every shard of the split model `g` is part of, in order, `g` among them; ``[g]`` for
    an ordinary file. Shards opened here are closed again on any error (`g` stays open)."""
    keys = split_keys(g)
    if keys is None:
        return [g]
    prefix = _prefix(g, keys)
    shards: list[GGUFFile] = []
    try:
        for no in range(keys.count):
            shards.append(g if no == keys.no else _open_shard(split_path(prefix, no, keys.count),
                                                              no, keys.count))
        _check_tensor_counts(shards)
    except BaseException:
        for shard in shards:
            if shard is not g:
                shard.close()
        raise
    return shards


def _prefix(g: GGUFFile, keys: SplitKeys) -> str:
    prefix = split_prefix(g.path, keys.no, keys.count)
    if prefix is None:
        raise _fail(g, SPLIT_NO, f"split.no {keys.no} and split.count {keys.count} make this "
                                 f"shard {keys.no + 1} of {keys.count}, so its name should end "
                                 f"in {split_path('', keys.no, keys.count)} (the others are "
                                 "found by that name)")
    return prefix


def _open_shard(path: str, no: int, count: int) -> GGUFFile:
    """Shard `no`, checked to say so in its split.no and split.count."""
    if not os.path.isfile(path):
        raise FormatError(f"shard {no + 1} of {count} of this split model is missing "
                          "(expected this file)", path=path)
    shard = GGUFFile(path)
    try:
        found = (_key(shard, SPLIT_NO, required=False), _key(shard, SPLIT_COUNT, required=False))
        if found != (no, count):
            raise _fail(shard, SPLIT_NO if found[0] != no else SPLIT_COUNT,
                        f"its name makes it shard {no + 1} of {count} (split.no {no}, "
                        f"split.count {count}), but it holds split.no {_shown(found[0])}, "
                        f"split.count {_shown(found[1])}")
    except BaseException:
        shard.close()
        raise
    return shard


def _shown(value: int | None) -> str:
    return "(none)" if value is None else str(value)


def _check_tensor_counts(shards: list[GGUFFile]) -> None:
    """split.tensors.count, the same in every shard that states it, counts all their tensors."""
    first = shards[0]
    expected = _key(first, SPLIT_TENSORS, required=True)
    for shard in shards[1:]:
        found = _key(shard, SPLIT_TENSORS, required=False)
        if found is not None and found != expected:
            raise _fail(shard, SPLIT_TENSORS, f"split.tensors.count is {found} here but "
                                              f"{expected} in the first shard {first.path}")
    held = sum(len(s.tensors) for s in shards)
    if held != expected:
        raise _fail(first, SPLIT_TENSORS, f"split.tensors.count says {expected} tensors, but "
                                          f"the {len(shards)} shards hold {held}")
