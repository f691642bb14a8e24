"""C-speed passes over huge sequences, cut into slices that let other threads run in between.

``list(map(f, xs))`` or ``dict(zip(keys, values))`` over a 262,144-entry vocabulary is one
C-level call: it holds Python's global lock for 50-150 ms, and while a worker thread loads a
vocabulary that way the GUI thread, which needs the lock for every Python slot, freezes as
long. The same passes over slices of `SLICE` items cost the same in total, and between two
slices a thread waiting for the lock gets it (the interpreter hands it over at the loop).

>>> sliced_map(str.upper, ["a", "b"])
['A', 'B']
>>> sliced_dict(["a", "b", "a"], range(3))
{'a': 2, 'b': 1}
"""
from __future__ import annotations

from itertools import islice
from typing import Any, Callable, Iterable

#: items per C-level pass: a few milliseconds
SLICE = 1 << 14


def sliced_map(fn: Callable[..., Any], *columns: Iterable[Any]) -> list[Any]:
    """``list(map(fn, *columns))``, `SLICE` items per C-level pass (columns may be iterators)."""
    iterators = [iter(c) for c in columns]
    out: list[Any] = []
    while True:
        before = len(out)
        out += map(fn, *(islice(it, SLICE) for it in iterators))
        if len(out) - before < SLICE:
            return out


def sliced_dict(keys: Iterable[Any], values: Iterable[Any]) -> dict[Any, Any]:
    """``dict(zip(keys, values))``, `SLICE` items per C-level pass: a repeated key keeps its
    last value, as in dict()."""
    key_it, value_it = iter(keys), iter(values)
    out: dict[Any, Any] = {}
    while True:
        pairs = list(zip(islice(key_it, SLICE), islice(value_it, SLICE)))
        out.update(pairs)
        if len(pairs) < SLICE:
            return out


def sliced_split(text: str, sep: str) -> list[str]:
    """``text.split(sep)`` for a one-character `sep`, split between separators about
    16 * `SLICE` characters apart (a 3 MB merges list splits into half a million strings).

    >>> sliced_split("a b  c", " ")
    ['a', 'b', '', 'c']
    """
    if len(sep) != 1:  # longer separators can overlap, and a cut might not be one split's
        raise ValueError(f"sliced_split needs a one-character separator, not {sep!r}")
    step = SLICE * 16
    parts: list[str] = []
    start = 0
    while True:
        cut = text.find(sep, start + step) if start + step < len(text) else -1
        if cut < 0:
            parts += text[start:].split(sep)
            return parts
        parts += text[start:cut].split(sep)
        start = cut + len(sep)
