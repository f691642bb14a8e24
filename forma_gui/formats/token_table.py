"""A GGUF vocabulary's token texts looked up by their bytes, in numpy: checks and merge ids
without a Python string per token or per merge.

Loading a 262k-token GPT-2-family GGUF has to check that no token text repeats and that both
sides of each of its 262k merges are tokens, and its first encode needs each merge's left,
right and result as token ids. Done on Python strings that is a million str objects created,
hashed, looked up and freed (~0.2 s at load, ~0.9 s at the first encode). `TokenTable` does
it on the undecoded bytes (`core.byte_keys`); texts longer than byte_keys.WIDTH go through a
small dict of bytes. Equal bytes are equal texts: GGUF strings decode with surrogateescape,
which maps different bytes to different texts.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from forma_gui.core.byte_keys import WIDTH, KeyIndex, byte_keys
from forma_gui.formats.lazy_strings import LazyStrings

#: the byte between a merge's two sides
SPACE = ord(" ")


class TokenTable:
    """The token texts of a vocabulary, by bytes. Empty texts are never found (llama.cpp
    renames them "[EMPTY_<id>]", a text the bytes do not spell)."""

    def __init__(self, tokens: LazyStrings) -> None:
        data, starts, lengths = tokens.spans()
        self._index = KeyIndex(byte_keys(data, starts, lengths),
                               exclude=np.flatnonzero(lengths == 0))
        long = np.flatnonzero(lengths > WIDTH)
        self._long = {data[s:s + n].tobytes(): i for i, s, n in
                      zip(long.tolist(), starts[long].tolist(), lengths[long].tolist())}
        self.has_empty = bool((lengths == 0).any())
        #: no text appears twice
        self.unique = not self._index.repeats and len(self._long) == len(long)

    def find(self, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """int64 (n,): the id of the token spelled by each data[start:start + length], or -1."""
        found = self._index.find(byte_keys(data, starts, lengths))
        for k in np.flatnonzero(lengths > WIDTH).tolist():
            start = int(starts[k])
            found[k] = self._long.get(data[start:start + int(lengths[k])].tobytes(), -1)
        return found


    def ids_of(self, texts: Sequence[str]) -> dict[str, int]:
        """{text: id} for those of `texts` that are token texts.

        >>> from forma_gui.formats.lazy_strings import LazyStrings
        >>> blob = b"".join(len(t).to_bytes(8, "little") + t for t in (b"ab", b"c"))
        >>> TokenTable(LazyStrings.from_buffer(blob, 0, 2, len(blob))).ids_of(["c", "x", "ab"])
        {'c': 1, 'ab': 0}
        """
        texts = list(dict.fromkeys(texts))
        raw = [t.encode("utf-8", "surrogateescape") for t in texts]
        lengths = np.array([len(r) for r in raw], dtype=np.int64)
        starts = np.cumsum(lengths) - lengths
        found = self.find(np.frombuffer(b"".join(raw), dtype=np.uint8), starts, lengths)
        return {t: i for t, i in zip(texts, found.tolist()) if i >= 0}


def merge_ids(merges: LazyStrings, table: TokenTable) -> np.ndarray | None:
    """(3, n) int64: each merge's left and right token id and the id of their concatenation
    (-1 when that is not a token); None unless every merge holds exactly one space and both
    its sides are tokens (then llama.cpp's split at the first space after position 0 cuts
    there, and the left side is not empty)."""
    spaces = merges.only_byte(SPACE)
    if spaces is None or table.has_empty:
        return None
    data, starts, lengths = merges.spans()
    ends = starts + lengths
    sides = table.find(data, np.concatenate([starts, spaces + 1]),
                       np.concatenate([spaces - starts, ends - spaces - 1]))
    if (sides < 0).any():
        return None
    keep = np.ones(len(data), dtype=bool)  # the merged texts back to back:
    for k in range(1, 9):                   # without the length fields in front of them
        keep[starts - k] = False
    keep[spaces] = False                    # and without the spaces
    merged = data[keep]
    merged_lengths = lengths - 1
    merged_starts = np.cumsum(merged_lengths) - merged_lengths
    result = table.find(merged, merged_starts, merged_lengths)
    n = len(starts)
    return np.stack([sides[:n], sides[n:], result])
