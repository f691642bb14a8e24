"""Cutting one long byte array into many `bytes` objects with a single C-level `bytes.split`.

Making a vocabulary's 200k token strings with ``[data[a:b] for a, b in ...]`` costs a Python
step each (~25 ms for 150k). `split_at_slots` instead takes the bytes laid out with a spare
byte after each piece (a *slot*), writes a separator into every slot and splits once. The
separator is a byte valid UTF-8 never holds (0xFF first), so few pieces hold it: usually only
the byte's own token. Those are cut at it too, and put back together afterwards.
"""
from __future__ import annotations

from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: separator candidates, in order of preference: bytes that never occur in valid UTF-8
SEPARATORS = tuple(bytes([b]) for b in (0xFF, 0xFE, 0xC0, 0xC1, *range(0xF5, 0xFE)))


def split_at_slots(laid: "np.ndarray", slots: "np.ndarray") -> list[bytes]:
    """The pieces of uint8 `laid` between its `slots` (ascending; the last at the end).

    The slots' bytes are overwritten.

    >>> import numpy as np
    >>> laid = np.frombuffer(b"ab.\\xff.\\xffc\\xff.", np.uint8).copy()
    >>> split_at_slots(laid, np.array([2, 4, 8]))
    [b'ab', b'\\xff', b'\\xffc\\xff']
    """
    import numpy as np

    laid[slots] = 0
    plain = laid.tobytes()
    sep = SEPARATORS[0]
    if plain.count(sep) > len(slots) >> 6:  # mostly not UTF-8: take the rarest candidate
        sep = min(SEPARATORS, key=plain.count)
    holders = np.unique(np.searchsorted(slots, np.flatnonzero(laid == sep[0]))).tolist()
    laid[slots] = sep[0]
    pieces = laid.tobytes().split(sep)
    pieces.pop()  # after the last slot
    starts = [int(slots[i - 1]) + 1 if i else 0 for i in holders]
    cuts = [plain.count(sep, start, int(slots[i])) for i, start in zip(holders, starts)]
    for i, start, extra, before in reversed(list(zip(holders, starts, cuts, accumulate([0] + cuts)))):
        pieces[i + before:i + before + extra + 1] = [plain[start:int(slots[i])]]
    return pieces
