"""C-speed passes over huge sequences, cut into slices that let other threads run in between.

``list(map(f, xs))`` or ``dict(zip(keys, values))`` over a 262,144-entry vocabulary is one
C-level call: it holds Python's global lock for 50-150 ms, and while a worker thread loads a
vocabulary that way the GUI thread, which needs the lock for every Python slot, freezes as
long. The same passes over slices of `SLICE` items cost the same in total, and between two
slices a thread waiting for the lock gets it (the interpreter hands it over at the loop).
Between two slices `pause()` also calls the function given to `set_pause`: the app uses it
to hold a worker back while the GUI thread is handling events.

>>> sliced_map(str.upper, ["a", "b"])
['A', 'B']
>>> sliced_dict(["a", "b", "a"], range(3))
{'a': 2, 'b': 1}
>>> sliced_join("-", ["a", "b", "c"])
'a-b-c'
>>> sliced_array(map(len, ["ab", "", "c"]), "int64").tolist()
[2, 0, 1]
>>> from array import array
>>> sliced_concat([array("i", [1, 2]), array("i"), array("i", [3])], array("i")).tolist()
[1, 2, 3]
"""
from __future__ import annotations

from array import array
from itertools import islice
from typing import Any, Callable, Iterable, Iterator, Sequence

#: items per C-level pass: about a millisecond (a thread waiting for the GIL waits as long)
SLICE = 1 << 12

_pause: Callable[[], None] | None = None


def set_pause(fn: Callable[[], None] | None) -> None:
    """Call `fn` between two slices (e.g. to let a busy GUI thread run first); None: nothing."""
    global _pause
    _pause = fn


def pause() -> None:
    """The point between two slices: calls the function given to `set_pause`, if any."""
    if _pause is not None:
        _pause()


def sliced_map(fn: Callable[..., Any], *columns: Iterable[Any]) -> list[Any]:
    """``list(map(fn, *columns))``, `SLICE` items per C-level pass (columns may be iterators)."""
    iterators = [iter(c) for c in columns]
    out: list[Any] = []
    while True:
        pause()
        before = len(out)
        out += map(fn, *(islice(it, SLICE) for it in iterators))
        if len(out) - before < SLICE:
            return out


def sliced_all(fn: Callable[[Any], Any], items: list[Any]) -> bool:
    """``all(map(fn, items))``, `SLICE` items per C-level pass."""
    for i in range(0, len(items), SLICE):
        pause()
        if not all(map(fn, items[i:i + SLICE])):
            return False
    return True


def sliced_set(fn: Callable[[Any], Any] | None, items: list[Any]) -> set[Any]:
    """``set(map(fn, items))`` (``set(items)`` when fn is None), `SLICE` items per C-level pass."""
    out: set[Any] = set()
    for i in range(0, len(items), SLICE):
        pause()
        chunk = items[i:i + SLICE]
        out.update(chunk if fn is None else map(fn, chunk))
    return out


def sliced_replace(text: str, old: str, new: str) -> str:
    """``text.replace(old, new)`` for a one-character `old`, 16 * `SLICE` characters a pass."""
    if len(old) != 1:  # a longer one could straddle two slices
        raise ValueError(f"sliced_replace needs a one-character old, not {old!r}")
    step = SLICE * 16
    if len(text) <= step:
        return text.replace(old, new)
    parts = []
    for i in range(0, len(text), step):
        pause()
        parts.append(text[i:i + step].replace(old, new))
    return "".join(parts)


def sliced_dict(keys: Iterable[Any], values: Iterable[Any]) -> dict[Any, Any]:
    """``dict(zip(keys, values))``, `SLICE` items per C-level pass: a repeated key keeps its
    last value, as in dict()."""
    keys = keys if isinstance(keys, (list, range)) else sliced_list(keys)
    values = values if isinstance(values, (list, range)) else sliced_list(values)
    out: dict[Any, Any] = {}
    for i in range(0, min(len(keys), len(values)), SLICE):  # no list of pairs in between
        pause()
        out.update(zip(keys[i:i + SLICE], values[i:i + SLICE]))
    return out


def sliced_list(items: Iterable[Any]) -> list[Any]:
    """``list(items)``, `SLICE` items per C-level pass."""
    it = iter(items)
    out: list[Any] = []
    while True:
        pause()
        before = len(out)
        out += islice(it, SLICE)
        if len(out) - before < SLICE:
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
        pause()
        cut = text.find(sep, start + step) if start + step < len(text) else -1
        if cut < 0:
            parts += text[start:].split(sep)
            return parts
        parts += text[start:cut].split(sep)
        start = cut + len(sep)


def cut_slices(text, cut, size: int, shift: int = 0) -> Iterator[tuple[int, int]]:
    """(start, end) slices of `text` (str or bytes) of about `size` each, every one but the
    last ending where the compiled pattern `cut` next matches (its start plus `shift`), so a
    caller's regex pass over each slice can equal one pass over the whole text; `pause()`
    comes before each slice.

    >>> import re
    >>> list(cut_slices("aa bb cc dd", re.compile(" "), 3))
    [(0, 5), (5, 8), (8, 11)]
    """
    lo = 0
    while len(text) - lo > size:
        found = cut.search(text, lo + size)
        if found is None:
            break
        hi = found.start() + shift
        pause()
        yield lo, hi
        lo = hi
    pause()
    yield lo, len(text)


def sliced_join(sep: Any, items: list[Any]) -> Any:
    """``sep.join(items)`` for str or bytes, joined `SLICE` items at a time, then the joins."""
    if len(items) <= SLICE:
        return sep.join(items)
    parts = []
    for i in range(0, len(items), SLICE):
        pause()
        parts.append(sep.join(items[i:i + SLICE]))
    return sep.join(parts)


def sliced_array(values: Iterable[int], dtype: Any):
    """``np.fromiter(values, dtype)``, `SLICE` items per pass (values may be an iterator)."""
    import numpy as np

    it = iter(values)
    parts = []
    while True:
        pause()
        part = np.fromiter(islice(it, SLICE), dtype=dtype)
        parts.append(part)
        if len(part) < SLICE:
            return np.concatenate(parts) if len(parts) > 1 else part


def release(*lists: list[Any]) -> None:
    """Empty huge lists `SLICE` items at a time: freeing a few hundred thousand objects in one
    `del` (or when the last reference goes) is one C call that holds the GIL for ~50 ms."""
    for items in lists:
        while items:
            pause()
            del items[-SLICE:]


def sliced_concat(parts: Sequence[Any], empty: array | bytearray) -> array | bytearray:
    """The parts (arrays of `empty`'s type code, or bytes-likes for a bytearray) joined into
    one, allocated once at its final size and filled a part per step.

    Growing an array part by part (``extend``, ``+=``) reallocates it every ~6% of growth,
    and a move copies all of it into memory nothing has touched yet, in one C call that holds
    the GIL. On a VM that hands freed memory back to its host, a first touch costs ~15 µs a
    page (0.5 µs once the host backs it): the last moves of a 10 MB column then held the GIL
    for 60-130 ms each. Here the allocation touches the final size once (on such cold pages
    that one call still took 100-160 ms for 10 MB; on backed ones a few ms), and each part's
    copy lands on pages already touched.
    """
    out = _zeros(empty, sum(map(len, parts)))
    pos = 0
    for part in parts:
        pause()
        out[pos:pos + len(part)] = part
        pos += len(part)
    return out


def sliced_copy(column: array | bytes | bytearray, step: int = SLICE * 64) -> array | bytearray:
    """A copy of an array (or of any bytes-like, as a bytearray), allocated once at its size
    (see `sliced_concat`) and filled `step` items per pass."""
    out = _zeros(column if isinstance(column, array) else bytearray(), len(column))
    for lo in range(0, len(column), step):
        pause()
        out[lo:lo + step] = column[lo:lo + step]
    return out


def _zeros(like: array | bytearray, n: int) -> array | bytearray:
    """n zeros of `like`'s kind, in one allocation."""
    return array(like.typecode, [0]) * n if isinstance(like, array) else bytearray(n)
