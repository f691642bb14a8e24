"""Exact lookup of many short byte strings at numpy speed, without a Python object per string.

Checking that each of a GGUF's 262k merges names two tokens of its vocabulary means half a
million lookups; as Python strings that is ~200 ms of creating, hashing and freeing str
objects. Here each string becomes a fixed-size key: its first `WIDTH` bytes, zero-padded,
as `WORDS` uint64 words, then its length. Two strings of at most `WIDTH` bytes are equal
exactly when their keys are. `KeyIndex` puts the keys in an open-addressing hash table
(linear probing, filled and probed for all keys at once, a round per probe step) and
confirms every candidate by comparing whole keys: a hit is always exact. Longer strings
(rare in a vocabulary) are never found, and the caller looks those up the ordinary way.

>>> import numpy as np
>>> data = np.frombuffer(b"abcab", dtype=np.uint8)
>>> index = KeyIndex(byte_keys(data, np.array([0, 1, 2]), np.array([2, 2, 1])))  # ab bc c
>>> index.find(byte_keys(data, np.array([3, 1, 0]), np.array([2, 1, 3]))).tolist()  # ab b abc
[0, -1, -1]
"""
from __future__ import annotations

import numpy as np

from forma_gui.core.slices import pause

#: bytes of a string that go into its key; longer strings are never found
WIDTH = 32
WORDS = WIDTH // 8
#: strings per numpy pass (about a millisecond each: a thread waiting for the GIL waits as long)
KEY_SLICE = 1 << 16
#: a length no string has: keys with it never match (see `KeyIndex.__init__`)
NEVER = np.uint64(2**64 - 1)
#: odd multipliers for hashing the key words (any odd 64-bit constants spread the bits)
MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD], dtype=np.uint64)
#: the low k bytes of a little-endian word, for k = 0..8
LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
#: hash table slots per key, at least (a quarter full: probes are short)
SPREAD = 4
EMPTY = -1


def byte_keys(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(n, WORDS + 1) uint64 keys of the strings data[start:start + length]: the first WIDTH
    bytes zero-padded, then the length. `data` is a uint8 array; strings may overlap."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    padded = np.concatenate([data, np.zeros(WIDTH + 8, dtype=np.uint8)])  # words past the end
    # every 8 bytes from every offset, as one little-endian word (a view: nothing is copied)
    words = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    keys = np.zeros((len(starts), WORDS + 1), dtype=np.uint64)
    for lo in range(0, len(starts), KEY_SLICE):
        pause()
        at, size, rows = starts[lo:lo + KEY_SLICE], lengths[lo:lo + KEY_SLICE], keys[lo:lo + KEY_SLICE]
        rows[:, 0] = words[at] & LOW_BYTES[np.minimum(size, 8)]
        for w in range(1, WORDS):  # later words only for the strings that reach them
            longer = np.flatnonzero(size > 8 * w)
            rows[longer, w] = words[at[longer] + 8 * w] & LOW_BYTES[np.minimum(size[longer] - 8 * w, 8)]
    keys[:, WORDS] = lengths
    return keys


def _hashes(keys: np.ndarray) -> np.ndarray:
    """One uint64 per key (wrapping arithmetic: numpy integer arrays do not check overflow)."""
    out = np.empty(len(keys), dtype=np.uint64)
    for lo in range(0, len(keys), KEY_SLICE):
        pause()
        part = keys[lo:lo + KEY_SLICE]
        h = part[:, 0] * MIX[0]
        for word in range(1, WORDS + 1):
            h += part[:, word] * MIX[word]
        h ^= h >> np.uint64(29)
        h *= MIX[1]
        h ^= h >> np.uint64(32)
        out[lo:lo + KEY_SLICE] = h
    return out


class KeyIndex:
    """Keys to look up by position: `find` gives, per query key, the position of the equal
    indexed key, or -1 (not there, or longer than WIDTH). Of equal indexed keys, any one."""

    def __init__(self, keys: np.ndarray, exclude: np.ndarray | None = None) -> None:
        """`exclude`: positions that must never be found (their keys are made unmatchable)."""
        if exclude is not None and len(exclude):
            keys = keys.copy()
            keys[exclude, WORDS] = NEVER
        self._keys = keys
        #: some two indexed keys of at most WIDTH bytes are equal
        self.repeats = False
        self._bits = max(SPREAD * len(keys) - 1, 1).bit_length()   # 2**bits >= SPREAD * n
        self._table = np.full(1 << self._bits, EMPTY, dtype=np.int32 if len(keys) < 2**31 else np.int64)
        self._fill(np.arange(len(keys), dtype=np.int64), self._slots(keys))

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        return (_hashes(keys) >> np.uint64(64 - self._bits)).astype(np.int64)

    def _fill(self, pending: np.ndarray, slots: np.ndarray) -> None:
        """Linear probing for all keys at once: each round, of the keys whose slot is free,
        one per slot takes it (whichever numpy's fancy assignment writes last); the rest
        move on a slot. A key meets its equal on the way (equal keys probe the same slots,
        and every slot before the free one is taken): that sets `repeats`."""
        mask = len(self._table) - 1
        keys = self._keys
        while len(pending):
            pause()
            free = self._table[slots] == EMPTY
            self._table[slots[free]] = pending[free]
            taken = self._table[slots]
            later = taken != pending
            pending, slots, taken = pending[later], slots[later], taken[later]
            if len(pending) and not self.repeats:
                self.repeats = bool(((keys[taken] == keys[pending]).all(axis=1)
                                     & (keys[pending, WORDS] <= WIDTH)).any())
            slots = (slots + 1) & mask

    def find(self, keys: np.ndarray) -> np.ndarray:
        """int64 (n,): for each key the position of the indexed key equal to it, or -1."""
        out = np.full(len(keys), -1, dtype=np.int64)
        if not len(keys) or not len(self._keys):
            return out
        slots = self._slots(keys)
        probing = []
        for lo in range(0, len(keys), KEY_SLICE):  # the first probe, for every key
            pause()
            part, found = keys[lo:lo + KEY_SLICE], self._table[slots[lo:lo + KEY_SLICE]]
            hit = (self._keys[found] == part).all(axis=1) & (found != EMPTY)
            short = part[:, WORDS] <= WIDTH               # a longer key's words are a prefix
            hit &= short
            out[lo:lo + KEY_SLICE] = np.where(hit, found, -1)
            probing.append(np.flatnonzero((found != EMPTY) & ~hit & short) + lo)
        self._probe_on(keys, np.concatenate(probing), slots, out)
        return out

    def _probe_on(self, keys: np.ndarray, active: np.ndarray, slots: np.ndarray,
                  out: np.ndarray) -> None:
        """Later probes for the keys whose slot held a different key (few: the table is sparse)."""
        mask = len(self._table) - 1
        slots = (slots[active] + 1) & mask
        while len(active):
            pause()
            found = self._table[slots]
            hit = found != EMPTY
            hit[hit] = (self._keys[found[hit]] == keys[active[hit]]).all(axis=1)
            out[active[hit]] = found[hit]
            going = (found != EMPTY) & ~hit                  # a different key: probe on
            active, slots = active[going], (slots[going] + 1) & mask
