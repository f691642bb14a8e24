"""Bounds shared by the tokenizer readers, so that memory follows the size of the file.

Token ids index dense tables (pieces, bytes, merge ranks), so a table is as long as the
largest id. Real vocabularies are dense or nearly so (tiktoken's o200k leaves 2 ids unused,
tokenizer.json files put added tokens right after the vocabulary); a file that gives one
piece the id 4,000,000,000 would make a 32 GB table. Ids must stay below
``2 * entries + MAX_ID_GAP``, which bounds the unused ids by the used ones plus 65,536.
"""
from __future__ import annotations

import os

from forma_gui.errors import FormatError

MAX_ID_GAP = 1 << 16


def id_limit(n_entries: int) -> int:
    """The first id not accepted for a vocabulary of `n_entries` entries.

    >>> id_limit(50257)
    166050
    """
    return 2 * n_entries + MAX_ID_GAP


def check_id_space(max_id: int, n_entries: int, what: str, path: str | os.PathLike, *,
                   line: int | None = None) -> None:
    """FormatError unless `max_id` (the largest id, or rank, of `n_entries`) is below the limit."""
    limit = id_limit(n_entries)
    if max_id >= limit:
        raise FormatError(f"{what} {max_id} is far past the {n_entries} entries: ids index dense "
                          f"tables, so they must stay below {limit}", path=path, line=line)


#: numpy's limit on an array's bytes (and on each of its dimensions): intp's largest value
MAX_ARRAY_BYTES = 2**63 - 1


def shape_fits(shape, itemsize: int = 8) -> bool:
    """Whether arrays of `shape` (with `itemsize`-byte elements: 8 covers every float32 and
    float64 view the app makes) can exist, even when a zero dimension leaves them empty: numpy
    refuses a (0, 2**62) array, so a file that declares one is refused at open instead.

    >>> shape_fits((4096, 32000)), shape_fits((0, 2**62)), shape_fits((0, 5))
    (True, False, True)
    """
    size = itemsize
    for dim in shape:
        if dim:
            size *= dim
    return size <= MAX_ARRAY_BYTES
