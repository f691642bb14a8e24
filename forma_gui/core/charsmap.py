"""SentencePiece's precompiled character map: a darts-clone double-array trie plus a blob.

A normalizer spec such as ``nmt_nfkc`` is compiled into one byte string (normalizer.cc,
``DecodePrecompiledCharsMap``)::

    u32 little-endian  trie_size
    trie_size bytes    darts-clone double array: u32 units, little-endian
    the rest           NUL-terminated replacement strings (UTF-8), one after another

The trie's keys are UTF-8 byte strings of the input, its values byte offsets into the blob.
Normalizing a prefix means: walk the trie over the input bytes, keep the *longest* key that
is a prefix (``commonPrefixSearch``), and emit the blob string at its value. A darts-clone
unit packs (darts.h ``DoubleArrayUnit``)::

    has_leaf = (unit >> 8) & 1
    value    = unit & 0x7FFFFFFF                  (on a leaf unit)
    label    = unit & (0x80000000 | 0xFF)         (a leaf unit has bit 31 set: never a byte)
    offset   = (unit >> 10) << ((unit & 0x200) >> 6)

and the child of node ``p`` along byte ``c`` is ``p ^ offset(p) ^ c``, valid when its label
is ``c``; a node with ``has_leaf`` has a value stored at ``p ^ offset(p)``. llama.cpp's UGM
normalizer walks the same structure (its "XCDA"), but stops at a NUL input byte.
"""
from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right

from forma_gui.errors import FormatError


def _offset(unit: int) -> int:
    return (unit >> 10) << ((unit & 0x200) >> 6)


def validate_units(units: array, max_value: int) -> str:
    """darts.h ``DoubleArray::validate``: every child index stays inside the array, every
    leaf points at a value unit, every value is below `max_value`. Returns "" when valid,
    else what is wrong. After this, lookups never index out of bounds.
    """
    import numpy as np

    u = np.frombuffer(units, dtype=np.uint32).astype(np.int64) if len(units) else None
    if u is None:
        return "empty"
    size = len(u)
    offset = (u >> 10) << ((u & 0x200) >> 6)
    label = u & 0x800000FF
    leaf = (u >> 8) & 1
    if label[0] != 0 or leaf[0] or offset[0] == 0 or (offset[0] | 0xFF) >= size:
        return "bad root unit"
    idx = np.arange(size, dtype=np.int64)
    inner = (label <= 0xFF) & (idx > 0)
    child = (idx ^ offset) | 0xFF
    if np.any(inner & (child >= size)):
        return f"unit {int(np.flatnonzero(inner & (child >= size))[0])} points past the end"
    target = np.where(inner & (leaf == 1), idx ^ offset, 0)
    if np.any(inner & (leaf == 1) & (label[target] <= 0xFF)):
        return "a leaf unit does not point at a value"
    values = ~inner & (idx > 0)
    if np.any(values & ((u & 0x7FFFFFFF) >= max_value)):
        return f"a value points past the {max_value}-byte string table"
    return ""


class CharsMap:
    """The decoded precompiled charsmap: longest-prefix lookups over UTF-8 bytes.

    >>> CharsMap(b"").longest_prefix(b"abc", 0)  # an empty map matches nothing
    (0, b'')
    """

    def __init__(self, blob: bytes, *, path: str | None = None, strict: bool = True,
                 stop_at_nul: bool = False, offset: int | None = None) -> None:
        self.units: array = array("I")
        self.normalized = b""
        self.stop_at_nul = stop_at_nul  # llama.cpp's walk ends at a 0x00 input byte
        self._strings: dict[int, bytes] = {}
        self._first: bytes | None = None  # lazily: which first bytes can start a match
        self._children: tuple[list[int], list[tuple[int, int]]] | None = None  # `children`
        self._labelled: list[int] | None = None  # units per byte label (`in_longer_key`)
        if blob:
            self._decode(bytes(blob), path, strict, offset)

    def _decode(self, blob: bytes, path: str | None, strict: bool, at: int | None) -> None:
        """Split and check the blob (normalizer.cc DecodePrecompiledCharsMap and darts
        ``validate``; `strict` adds sentencepiece's size and termination rules, which
        llama.cpp does not make). `at`: the blob's offset in its file, for the errors."""
        def fail(message: str, where: int) -> FormatError:
            return FormatError(f"precompiled charsmap: {message}", path=path,
                               offset=None if at is None else at + where)

        if len(blob) <= 4:
            raise fail("expected a 4-byte trie size and a trie", 0)
        (size,) = struct.unpack_from("<I", blob, 0)
        if size >= len(blob) - 4 or size % 4:
            raise fail(f"trie size {size} does not fit the {len(blob)}-byte blob", 0)
        normalized = blob[4 + size:]
        if strict and (size < 1024 or size % 1024):
            raise fail(f"trie size {size} is not a multiple of 1024", 0)
        if strict and not normalized.endswith(b"\0"):
            raise fail("the normalized strings must end with NUL", len(blob) - 1)
        units = array("I")
        units.frombytes(blob[4:4 + size])
        if struct.pack("=I", 1) != struct.pack("<I", 1):
            units.byteswap()  # the blob is little-endian on every platform
        problem = validate_units(units, len(normalized))
        if problem:
            raise fail(f"invalid double array ({problem})", 4)
        self.units = units
        self.normalized = normalized

    def longest_prefix(self, data: bytes, pos: int) -> tuple[int, bytes]:
        """(length, replacement) of the longest key that prefixes ``data[pos:]``; (0, b"")."""
        units = self.units
        n_units = len(units)
        if not n_units:
            return 0, b""
        node = _offset(units[0])
        best_len, best_value = 0, -1
        for i in range(pos, len(data)):
            c = data[i]
            if c == 0 and self.stop_at_nul:
                break
            node ^= c
            if node >= n_units:
                break
            unit = units[node]
            if unit & 0x800000FF != c:
                break
            node ^= _offset(unit)
            if unit & 0x100:  # has_leaf: the value sits in the unit at `node`
                best_len, best_value = i - pos + 1, units[node] & 0x7FFFFFFF
        if not best_len:
            return 0, b""
        return best_len, self.replacement(best_value)

    def replacement(self, value: int) -> bytes:
        """The NUL-terminated blob string at offset `value` (cached)."""
        s = self._strings.get(value)
        if s is None:
            stop = self.normalized.find(b"\0", value)
            s = self.normalized[value:stop if stop >= 0 else len(self.normalized)]
            self._strings[value] = s
        return s

    def child(self, node: int, byte: int) -> int:
        """The trie node after `byte` from `node` (0 is the root), or -1: the step
        `longest_prefix` takes. Nodes are unit indices.

        >>> CharsMap(b"").child(0, 0x41)
        -1
        """
        units = self.units
        if not units or (byte == 0 and self.stop_at_nul):
            return -1
        nxt = node ^ _offset(units[node]) ^ byte
        return nxt if nxt < len(units) and units[nxt] & 0x800000FF == byte else -1

    def value(self, node: int) -> bytes | None:
        """The replacement of the key that ends at `node` (from `child`), or None."""
        unit = self.units[node]
        if not unit & 0x100:
            return None
        return self.replacement(self.units[node ^ _offset(unit)] & 0x7FFFFFFF)

    def followers(self, node: int) -> bytes:
        """The bytes `child` can take from `node` (which bytes may continue a key), in order."""
        return bytes(b for b, _ in self.children(node))

    def children(self, node: int) -> list[tuple[int, int]]:
        """(byte, `child(node, byte)`) for every byte that has a child, in byte order."""
        if not self.units:
            return []
        if self._children is None:
            self._children = self._child_table()
        bases, pairs = self._children
        base = node ^ _offset(self.units[node])
        found = pairs[bisect_left(bases, base):bisect_right(bases, base)]
        return found[1:] if self.stop_at_nul and found[:1] and found[0][0] == 0 else found

    def _child_table(self) -> tuple[list[int], list[tuple[int, int]]]:
        """Every unit labelled with a byte is the child along that byte of the node whose
        base is ``index ^ label`` (what `child` checks): those bases sorted, and
        (label, index) pairs in the same order."""
        import numpy as np

        units = np.frombuffer(self.units, dtype=np.uint32).astype(np.int64)
        label = units & 0x800000FF
        index = np.flatnonzero(label <= 0xFF)
        label = label[index]
        base = index ^ label
        order = np.lexsort((label, base))
        return base[order].tolist(), list(zip(label[order].tolist(), index[order].tolist()))

    def in_longer_key(self, byte: int) -> bool:
        """Whether `byte` is a byte of some key longer than one byte: a unit labelled with it
        other than the root's child along it, or that child has children (a stray unit
        labelled with it, which no lookup reaches, only makes the answer True).

        >>> CharsMap(b"").in_longer_key(0x20)
        False
        """
        if not self.units:
            return False
        if self._labelled is None:
            import numpy as np

            units = np.frombuffer(self.units, dtype=np.uint32)
            labels = units[(units & 0x800000FF) <= 0xFF] & 0xFF
            self._labelled = np.bincount(labels.astype(np.int64), minlength=256).tolist()
        root = self.child(0, byte)
        return self._labelled[byte] > (root >= 0) or (root >= 0 and bool(self.children(root)))

    def replacements_from(self, prefix: bytes) -> list[bytes]:
        """The replacements of every key that is a prefix of `prefix` or starts with it: what
        `longest_prefix` may emit at a place where `prefix` begins, whatever follows it."""
        found: list[bytes] = []
        node = 0
        for c in prefix:
            node = self.child(node, c)
            if node < 0:
                return found
            value = self.value(node)
            if value is not None:
                found.append(value)
        below = [node]
        while below:
            for _, child in self.children(below.pop()):
                value = self.value(child)
                if value is not None:
                    found.append(value)
                below.append(child)
        return found

    def can_start(self, byte: int) -> bool:
        """Whether some key begins with `byte` (a fast path for text that needs no mapping)."""
        if self._first is None:
            self._first = bytes(self._child_exists(c) for c in range(256))
        return bool(self._first[byte])

    def _child_exists(self, c: int) -> bool:
        units = self.units
        if not units:
            return False
        node = _offset(units[0]) ^ c
        return node < len(units) and units[node] & 0x800000FF == c

    def __bool__(self) -> bool:
        return bool(self.units)
