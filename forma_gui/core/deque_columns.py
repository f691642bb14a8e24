"""Columns of equal length that splice in place by moving their shorter side.

A one-character edit in a long document replaces a few tokens. In an ``array.array`` every
column's tail then moves: half the document on average when edits land anywhere. These
columns keep room at both ends of one buffer, so a splice moves the part before it or the
part after it, whichever is shorter (a quarter of the document on average). The move is a
memmove (``memoryview`` slice assignment: numpy copies overlapping slices through a
temporary, at about a third of the speed).
"""

from __future__ import annotations

from array import array
from typing import Sequence

import numpy as np

#: room kept at each end when the buffer is (re)allocated: at least this many slots ...
MIN_ROOM = 4096
#: ... or this fraction of the length
ROOM_FRACTION = 8


class DequeColumns:
    """Named columns of 4-byte values (``"f"`` float32, ``"i"`` int32), `splice`d in place.

    Each column reads as a numpy view (`column` by name, `views` in the order of the names); a
    view taken before a splice still points at the old place of the values, so take it again
    after one.

    >>> cols = DequeColumns({"x": "i", "y": "f"})
    >>> cols.set([[1, 2, 3, 4], [0.5, 1.5, 2.5, 3.5]])
    >>> cols.splice(1, 3, [[7], [9.0]])
    >>> cols.column("x").tolist(), cols.column("y").tolist()
    ([1, 7, 4], [0.5, 9.0, 3.5])
    """

    def __init__(self, kinds: dict[str, str]) -> None:
        self._names = {name: k for k, name in enumerate(kinds)}
        self._codes = list(kinds.values())
        self._dtypes = [np.dtype({"f": np.float32, "i": np.int32}[kind]) for kind in kinds.values()]
        self._place(np.zeros((len(kinds), 0), dtype=np.int32), 0)

    def __len__(self) -> int:
        return self._hi - self._lo

    def set(self, columns: Sequence[Sequence]) -> None:
        """Replace every column (in the order of the names) by these values, all of one length."""
        rows = self._rows(columns)
        self._place(rows, rows.shape[1])

    def column(self, name: str) -> np.ndarray:
        """The live values of a column (a view into the buffer)."""
        return self.views[self._names[name]]

    def splice(self, i0: int, j0: int, columns: Sequence[Sequence]) -> None:
        """Replace positions i0..j0 of every column by the new values (one sequence per column,
        all of one length); the rest keep their values and order."""
        n = len(self)
        if not 0 <= i0 <= j0 <= n:
            raise IndexError(f"splice [{i0}, {j0}) outside the {n} values")
        m = self._length(columns)
        d = m - (j0 - i0)
        lo, hi, cap = self._lo, self._hi, self._buf.shape[1]
        if d:
            head_fits, tail_fits = lo - d >= 0, hi + d <= cap
            if head_fits and (i0 < n - j0 or not tail_fits):
                self._move(lo, lo + i0, lo - d)
                lo -= d
            elif tail_fits:
                self._move(lo + j0, hi, lo + j0 + d)
                hi += d
            else:
                rows = self._rows(columns)
                whole = np.concatenate([self._buf[:, lo:lo + i0], rows, self._buf[:, lo + j0:hi]], axis=1)
                self._place(whole, n + d)
                return
            self._lo, self._hi = lo, hi
        a = lo + i0
        for typed, code, values in zip(self._typed, self._codes, columns):
            # (a memoryview in the column's type: an array of it assigns at C speed, and an
            # edit's few values skip numpy's cost per call)
            typed[a:a + m] = values if isinstance(values, array) and values.typecode == code \
                else array(code, values)
        self._refresh()

    # ---- inside --------------------------------------------------------------------------
    def _length(self, columns: Sequence[Sequence]) -> int:
        """The common length of one sequence per column (ValueError otherwise)."""
        if len(columns) != len(self._dtypes):
            raise ValueError(f"{len(columns)} columns given, {len(self._dtypes)} expected")
        lengths = {len(c) for c in columns}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths {sorted(lengths)}")
        return lengths.pop() if lengths else 0

    def _rows(self, columns: Sequence[Sequence]) -> np.ndarray:
        """The values as one int32 block (ncols, m): each column in its type, its bytes kept."""
        rows = np.empty((len(self._dtypes), self._length(columns)), dtype=np.int32)
        for row, dtype, values in zip(rows, self._dtypes, columns):
            row.view(dtype)[:] = np.asarray(values, dtype=dtype)
        return rows

    def _place(self, rows: np.ndarray, n: int) -> None:
        """A new buffer with room at both ends around these (ncols, n) values."""
        room = max(MIN_ROOM, n // ROOM_FRACTION)
        self._buf = np.empty((len(self._dtypes), n + 2 * room), dtype=np.int32)
        self._buf[:, room:room + n] = rows
        self._memory = [memoryview(row) for row in self._buf]
        self._typed = [memoryview(row.view(dtype)) for row, dtype in zip(self._buf, self._dtypes)]
        self._lo, self._hi = room, room + n
        self._refresh()

    def _move(self, a: int, b: int, to: int) -> None:
        """Buffer slots a..b of every column to start at `to` (overlap allowed)."""
        if b > a:
            for memory in self._memory:
                memory[to:to + b - a] = memory[a:b]  # (memmove)

    def _refresh(self) -> None:
        lo, hi = self._lo, self._hi
        #: the live values of every column, in the order of the names (views: taken again on
        #: every splice)
        self.views = [self._buf[k, lo:hi].view(dtype) for k, dtype in enumerate(self._dtypes)]
