"""A segmentation kept as flat arrays instead of a list of Token objects.

A 10 MB paste is ~2.5 million tokens. As Token objects that is ~200 MB, and every one of
them is tracked by Python's cyclic garbage collector, whose full passes then stall the
GUI thread for hundreds of milliseconds. Here a segmentation is four arrays (id, start,
end, flags: ~13 bytes a token, invisible to the collector); a Token is rebuilt on demand
for the few that are painted or clicked.
"""
from __future__ import annotations

from array import array
from typing import Iterator, Sequence

from forma_gui.core.slices import sliced_copy
from forma_gui.core.tokenizer import Token

PARTIAL = 1
SPECIAL = 2
SLICE = 1 << 16  # tokens packed per step


class TokenStore(Sequence):
    """Token k is `store[k]`; `ids`, `starts`, `ends`, `flags` are the raw columns."""

    def __init__(self, tokenizer=None) -> None:
        self.tokenizer = tokenizer
        self.ids = array("i")
        self.starts = array("i")
        self.ends = array("i")
        self.flags = bytearray()
        self.nbytes = 0
        self._odd: dict[int, Token] = {}  # tokens whose piece/data differ from the vocabulary's
        self._known: dict[int, tuple[str, bytes]] = {}  # id -> the vocabulary's piece and bytes

    @classmethod
    def from_tokens(cls, tokens: list[Token], tokenizer) -> "TokenStore":
        """Pack a segment() result (~0.4 µs a token), in slices.

        Slices keep each C-level step short: a worker thread holding the GIL for one long
        call would stall the GUI thread for as long.
        """
        store = cls(tokenizer)
        for lo in range(0, len(tokens), SLICE):
            store._extend(tokens[lo:lo + SLICE], lo)
        return store

    @classmethod
    def from_columns(cls, tokenizer, ids: array, starts: array, ends: array, flags: bytearray,
                     nbytes: int, *, copy: bool = True) -> "TokenStore":
        """A store over copies of ready-made columns (an IncrementalEncoder's), every token
        spelled as the vocabulary spells it; copy=False takes columns no one else holds."""
        store = cls(tokenizer)
        if copy:
            ids, starts, ends, flags = (sliced_copy(c) for c in (ids, starts, ends, flags))
        store.ids, store.starts, store.ends, store.flags = ids, starts, ends, flags
        store.nbytes = nbytes
        return store

    def _extend(self, tokens: list[Token], offset: int) -> None:
        self.ids.extend(array("i", [t.id for t in tokens]))
        self.starts.extend(array("i", [t.start for t in tokens]))
        self.ends.extend(array("i", [t.end for t in tokens]))
        self.flags.extend([t.partial | (t.special << 1) for t in tokens])
        self.nbytes += sum([len(t.data) for t in tokens])
        if self.tokenizer is None:
            self._odd.update(enumerate(tokens, offset))
            return
        known, tokenizer = self._known, self.tokenizer
        for k, t in enumerate(tokens):
            ref = known.get(t.id)
            if ref is None:
                ref = known[t.id] = (tokenizer.piece(t.id), tokenizer.token_bytes(t.id))
            if t.special or t.data != ref[1] or t.piece != ref[0]:
                self._odd[offset + k] = t

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        odd = self._odd.get(k if k >= 0 else k + len(self))
        if odd is not None:
            return odd
        tid, flags = self.ids[k], self.flags[k]
        return Token(tid, self.tokenizer.piece(tid), self.tokenizer.token_bytes(tid),
                     self.starts[k], self.ends[k], bool(flags & PARTIAL), bool(flags & SPECIAL))

    def __iter__(self) -> Iterator[Token]:
        return (self[k] for k in range(len(self)))

    def count_id(self, token_id: int) -> int:
        """How often `token_id` occurs (C speed)."""
        return self.ids.count(token_id)

    def find_id(self, token_id: int, start: int = 0) -> int | None:
        """The first index >= start holding `token_id`, or None."""
        try:
            return self.ids.index(token_id, start)
        except ValueError:
            return None
