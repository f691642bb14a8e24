"""Length-prefixed string arrays (GGUF's ``ARRAY[STRING]``) found fast and decoded on access.

A GGUF vocabulary is 10^5 strings, each a u64 byte length followed by that many bytes.
Decoding them one by one costs ~1 us each and ~60 bytes of str object; listing a model's
tensors needs none of them. `string_bounds` finds where every string starts without a
Python step per string, and `LazyStrings` keeps a copy of the bytes and decodes an item
only when it is asked for (`tolist` decodes everything in a few C-level passes).

The fast walk relies on what vocabularies look like: almost every string is shorter than
256 bytes, so its length field is one byte followed by seven zero bytes. Every such place
in a window of the buffer is a candidate; starting from a known string, the strings
follow each other as long as each one ends exactly where the next candidate begins (a
candidate that falls inside a string, or a string of 256 bytes or more, breaks that
chain). Breaks are walked one string at a time, so the result never depends on guessing.
`string_bounds_reference` is the plain loop that tests compare it with.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any, overload

import numpy as np

from forma_gui.core.slices import pause

#: arrays shorter than this are walked by the plain loop (numpy's per-call cost dominates)
MIN_FAST_ITEMS = 64
#: first and largest window scanned at once, in bytes; a window grows while the chain runs
#: through it and shrinks back after a break, so odd strings cost little rescanning
FIRST_WINDOW = 1 << 16
MAX_WINDOW = 1 << 20
#: strings walked one at a time after a break before scanning again
SCALAR_BURST = 256
#: items decoded per C-level pass when iterating
ITER_CHUNK = 1 << 14
SEPARATOR = "\x00"
#: bytes decoded per call when many strings are decoded at once (~2 ms of the GIL each)
DECODE_SLICE = 1 << 18


def string_bounds(buf: Any, pos: int, n: int, end: int, order: str = "<") -> np.ndarray | None:
    """Where `n` length-prefixed strings from `pos` start, plus where the last one ends.

    Returns int64 positions (n + 1,), or None if a length runs past `end` (the caller
    then names the bad offset). `buf` is any buffer (bytes, mmap); `order` "<" or ">".

    >>> string_bounds(b"\\x01\\0\\0\\0\\0\\0\\0\\0a\\0\\0\\0\\0\\0\\0\\0\\0", 0, 2, 17).tolist()
    [0, 9, 17]
    """
    bounds = np.empty(n + 1, dtype=np.int64)
    unpack = struct.Struct(order + "Q").unpack_from
    i, window, first = 0, FIRST_WINDOW, pos
    while i < n:
        got, broken = (0, True) if n - i < MIN_FAST_ITEMS else \
            _chain(buf, pos, min(window, end - pos), n - i, order, bounds[i:])
        if got:
            i, pos = i + got, int(bounds[i + got])
        # grow while the chain runs, but not far past the array's likely end: what
        # follows may be zeros (a scores array), where every byte is a candidate
        likely = (pos - first) * (n - i) // i + FIRST_WINDOW if i else MAX_WINDOW
        window = FIRST_WINDOW if broken else min(2 * window, MAX_WINDOW, likely)
        if broken:
            burst = n - i if n - i < MIN_FAST_ITEMS else min(SCALAR_BURST, n - i)
            pos = _walk(buf, pos, end, unpack, bounds, i, burst)
            if pos < 0:
                return None
            i += burst
    bounds[n] = pos
    return bounds


def _chain(buf: Any, pos: int, size: int, limit: int, order: str,
           out: np.ndarray) -> tuple[int, bool]:
    """Strings that follow each other from `pos` within `size` bytes (at most `limit`).

    Writes their starts and the end of the last into `out`; returns (count, whether the
    chain broke before the window's end).
    """
    if size < 8:
        return 0, True
    fields = np.ndarray((size - 7,), dtype=order + "u8", buffer=buf, offset=pos, strides=(1,))
    starts = np.flatnonzero(fields < 256)          # (candidates,) one-byte lengths
    if not len(starts) or starts[0]:
        return 0, True
    stops = starts + 8 + fields[starts].astype(np.int64)
    breaks = np.flatnonzero(stops[:-1] != starts[1:])
    k = int(breaks[0]) + 1 if len(breaks) else len(starts)
    broken = bool(len(breaks))
    if k > limit:
        k, broken = limit, False
    elif stops[k - 1] > size:                      # the last string runs out of the window
        k, broken = k - 1, False
    out[:k] = starts[:k] + pos
    if k:
        out[k] = stops[k - 1] + pos
    return k, broken or not k  # nothing found: the plain loop takes the next string


def _walk(buf: Any, pos: int, end: int, unpack: Any, bounds: np.ndarray, i: int,
          count: int) -> int:
    """The plain loop over `count` strings, filling bounds[i:]; -1 on a bad length."""
    for j in range(i, i + count):
        if pos + 8 > end:
            return -1
        (length,) = unpack(buf, pos)
        bounds[j] = pos
        if length > end - pos - 8:
            return -1
        pos += 8 + length
    return pos


def string_bounds_reference(buf: Any, pos: int, n: int, end: int,
                            order: str = "<") -> np.ndarray | None:
    """Slow readable twin of `string_bounds`."""
    bounds = []
    for _ in range(n):
        if pos + 8 > end:
            return None
        length = int.from_bytes(buf[pos:pos + 8], "little" if order == "<" else "big")
        if pos + 8 + length > end:
            return None
        bounds.append(pos)
        pos += 8 + length
    return np.array(bounds + [pos], dtype=np.int64)


class LazyStrings(Sequence[str]):
    """A read-only sequence of length-prefixed UTF-8 strings, decoded when accessed.

    Decoding uses ``errors="surrogateescape"``, like the GGUF reader's other strings.
    Equal to any list or tuple of the same strings; a slice is a list.

    >>> s = LazyStrings.from_buffer(b"\\x01\\0\\0\\0\\0\\0\\0\\0a\\0\\0\\0\\0\\0\\0\\0\\0", 0, 2, 17)
    >>> len(s), s[0], s[1:], s == ["a", ""]
    (2, 'a', [''], True)
    """

    __slots__ = ("_blob", "_bounds", "_order")
    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __init__(self, blob: bytes, bounds: np.ndarray, order: str = "<") -> None:
        self._blob = blob          # the array's bytes, length fields included
        self._bounds = bounds      # (n + 1,) int64: each string's length field, then the end
        self._order = order

    @classmethod
    def from_buffer(cls, buf: Any, pos: int, n: int, end: int,
                    order: str = "<") -> LazyStrings | None:
        """The `n` strings at `pos` (their bytes copied), or None if a length runs past `end`."""
        bounds = string_bounds(buf, pos, n, end, order)
        if bounds is None:
            return None
        start, stop = int(bounds[0]), int(bounds[-1])
        bounds -= start
        return cls(bytes(buf[start:stop]), bounds, order)

    @property
    def end(self) -> int:
        """Bytes the array takes (where the next value starts, relative to the first)."""
        return int(self._bounds[-1])

    def __len__(self) -> int:
        return len(self._bounds) - 1

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return self._decode(start, stop)
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"string index {index} out of range ({n} strings)")
        start, stop = self._bounds[i:i + 2].tolist()
        return self._blob[start + 8:stop].decode("utf-8", "surrogateescape")

    def __iter__(self) -> Iterator[str]:
        n = len(self)  # chunk by chunk: no Python step per string, no whole list up front
        return chain.from_iterable(self._decode(start, min(start + ITER_CHUNK, n))
                                   for start in range(0, n, ITER_CHUNK))

    def __reversed__(self) -> Iterator[str]:
        return reversed(self.tolist())

    def tolist(self) -> list[str]:
        """Every string, decoded in a few C-level passes."""
        return self._decode(0, len(self))

    def spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, starts, lengths): the strings' bytes as a uint8 array (length fields
        included) and where each string's bytes start in it and how many there are.

        >>> s = LazyStrings.from_buffer(bytes([1, 0, 0, 0, 0, 0, 0, 0, 97]) + bytes(8), 0, 2, 17)
        >>> [part.tolist() for part in s.spans()[1:]]
        [[8, 17], [1, 0]]
        """
        data = np.frombuffer(self._blob, dtype=np.uint8)
        return data, self._bounds[:-1] + 8, np.diff(self._bounds) - 8

    def only_byte(self, value: int) -> np.ndarray | None:
        """Where the byte `value` sits in each string (positions in `spans`' data), or None
        unless every string holds it exactly once.

        >>> s = LazyStrings.from_buffer(bytes([3, 0, 0, 0, 0, 0, 0, 0]) + b"a b", 0, 1, 11)
        >>> s.only_byte(32).tolist(), s.only_byte(97).tolist(), s.only_byte(120)
        ([9], [8], None)
        """
        region = np.frombuffer(self._blob, dtype=np.uint8)
        found = []
        for lo in range(0, len(region), DECODE_SLICE):  # in slices: a few ms of the GIL each
            pause()
            hits = np.flatnonzero(region[lo:lo + DECODE_SLICE] == value) + lo
            owner = np.searchsorted(self._bounds, hits, side="right") - 1
            found.append(hits[hits - self._bounds[owner] >= 8])  # not in a length field
        hits = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        if len(hits) != len(self):
            return None
        # one hit per string and hits ascending: the i-th hit must lie in the i-th string
        inside = (hits >= self._bounds[:-1] + 8) & (hits < self._bounds[1:])
        return hits if inside.all() else None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyStrings) and other._order == self._order:
            return len(self) == len(other) and self._blob == other._blob
        if isinstance(other, LazyStrings):
            return self.tolist() == other.tolist()
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and self.tolist() == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        head = ", ".join(map(repr, self[:3]))
        return f"LazyStrings([{head}{', ...' if len(self) > 3 else ''}], n={len(self)})"

    def _decode(self, start: int, stop: int) -> list[str]:
        """Strings start..stop: one decode of their bytes joined by NULs, then one split.

        A NUL is ASCII, so no UTF-8 sequence spans it and each string decodes (and each
        undecodable byte escapes) exactly as it would alone; a string holding a NUL
        itself makes the split count wrong, and then the strings are decoded one by one.
        """
        if stop - start < 8:
            return [self[i] for i in range(start, stop)]
        parts = self._joined(start, stop).split(SEPARATOR)
        if len(parts) == stop - start + 1:
            return parts[1:]
        return [self[i] for i in range(start, stop)]

    def _joined(self, start: int, stop: int) -> str:
        """The bytes of strings start..stop, a NUL in front of each, decoded at once."""
        bounds = self._bounds[start:stop + 1]
        region = np.frombuffer(self._blob, dtype=np.uint8, count=int(bounds[-1] - bounds[0]),
                               offset=int(bounds[0]))
        keep = np.ones(len(region), dtype=bool)
        # drop 7 of each length field's 8 bytes, keeping its high byte: a zero (lengths
        # are far below 2**56), which becomes the separator in front of each string
        fields = bounds[:-1] - bounds[0]
        for k in range(7) if self._order == "<" else range(1, 8):
            keep[fields + k] = False
        data = region[keep].tobytes()
        # decoded in slices cut in front of a NUL (ASCII: no UTF-8 sequence spans it, so each
        # slice decodes as its part of the whole): decoding 3 MB of merges in one call held
        # the GIL for ~25 ms while a worker loaded a 262k vocabulary
        parts, pos = [], 0
        while pos < len(data):
            pause()
            cut = data.find(b"\0", pos + DECODE_SLICE) if pos + DECODE_SLICE < len(data) else -1
            cut = len(data) if cut < 0 else cut
            parts.append(data[pos:cut].decode("utf-8", "surrogateescape"))
            pos = cut
        return "".join(parts)
