"""`parse_json`: JSON text -> Python objects, with every failure a FormatError.

`located` gives an error about a value's meaning (an id that is not an integer, an
unsupported section) the byte offset and line of that value, from the JSON path the reader
named it by: the file is scanned again only then.

`json.loads` fails in more ways than `JSONDecodeError`: bytes that are not UTF-8
(`UnicodeDecodeError`), nesting deeper than the interpreter's recursion limit (about 1,000
levels: `RecursionError`), and integers longer than Python's 4,300-digit conversion limit
(a bare `ValueError`). Each becomes a FormatError naming the byte offset and line.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Callable

from forma_gui.errors import FormatError, shown

#: a UTF-8 byte order mark, as Windows editors write before JSON (and merges.txt)
BOM = b"\xef\xbb\xbf"

#: a UTF-16 surrogate: JSON's \\uD800-style escapes can spell one alone, which is no text
_SURROGATE = re.compile("[\ud800-\udfff]")

#: longer digit runs cannot be converted (sys.get_int_max_str_digits(), 4300 by default)
_LONG_NUMBER = re.compile(rb"[0-9]{4301,}")


def parse_json(data: bytes, path: str | os.PathLike, *, base: int = 0) -> Any:
    """Parse UTF-8 JSON `data`; `base` is the file offset of its first byte.

    >>> parse_json(b'{"a": [1, 2]}', "t.json")
    {'a': [1, 2]}
    >>> parse_json(b'[1, 2', "t.json")
    Traceback (most recent call last):
    ...
    forma_gui.errors.FormatError: t.json: at byte 5: line 1: invalid JSON: Expecting ',' delimiter
    """
    if data.startswith(BOM):
        data, base = data[len(BOM):], base + len(BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError("expected UTF-8 text", path=path, offset=base + e.start,
                          line=data.count(b"\n", 0, e.start) + 1) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        at = len(text[:e.pos].encode("utf-8"))
        raise FormatError(f"invalid JSON: {e.msg}", path=path, offset=base + at,
                          line=e.lineno) from None
    except RecursionError:
        raise FormatError("JSON nested too deeply (about 1,000 levels at most)", path=path,
                          offset=base) from None
    except ValueError as e:  # an integer too long to convert
        hit = _LONG_NUMBER.search(data)
        at = hit.start() if hit else 0
        raise FormatError(f"invalid JSON: {e}".split(";")[0], path=path, offset=base + at,
                          line=data.count(b"\n", 0, at) + 1) from None


def check_text(strings: list[str], where: str, path: str | os.PathLike,
               json_path: Callable[[int, str], tuple] | None = None) -> None:
    """FormatError naming the first string with a lone surrogate, as HF refuses the file
    (serde_json); `where` is formatted with the string's index `n` and `s`, how it is shown,
    and `json_path(n, string)` gives the error's JSON path (`located`).

    >>> check_text(["a", "b\\udc80"], "vocab[{s}]", "v.json")
    Traceback (most recent call last):
    ...
    forma_gui.errors.FormatError: v.json: vocab['b\\udc80']: a lone UTF-16 surrogate (\\uD800-\\uDFFF) is not text
    """
    if _SURROGATE.search("".join(strings)):
        n, bad = next((n, t) for n, t in enumerate(strings) if _SURROGATE.search(t))
        raise FormatError(f"{where.format(n=n, s=shown(bad))}: a lone UTF-16 surrogate "
                          "(\\uD800-\\uDFFF) is not text", path=path,
                          json_path=json_path(n, bad) if json_path else None)


#: members a lookup steps over at most (~1 µs each): a hostile file with millions of entries
#: gets its error without an offset rather than a long wait
MAX_LOCATE_MEMBERS = 2_000_000
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def locate(text: str, keys: tuple[str | int, ...]) -> int | None:
    """Character offset in JSON `text` of the value reached by `keys` (object keys, array
    indices), or None when there is none. A key given twice means its last value, as
    `json.loads` keeps. Values on the way are skipped by the C decoder.

    >>> text = '{"a": [10, {"b": "x"}], "a": [7, 8]}'
    >>> text[locate(text, ("a", 1)):]
    '8]}'
    >>> locate(text, ("a", 2)) is None
    True
    """
    try:
        pos = _WS.match(text, 0).end()
        budget = [MAX_LOCATE_MEMBERS]
        for key in keys:
            pos = _member(text, pos, key, budget)
            if pos is None:
                return None
        return pos
    except (ValueError, IndexError):  # (not expected: the text parsed)
        return None


def _member(text: str, pos: int, key: str | int, budget: list[int]) -> int | None:
    """The offset of `key`'s value in the object or array starting at `pos` (None past the
    budget of members stepped over)."""
    opener = text[pos]
    if not (opener == "{" and isinstance(key, str) or opener == "[" and isinstance(key, int)):
        return None
    pos = _WS.match(text, pos + 1).end()
    if text[pos] in "}]":
        return None
    found, n = None, 0
    while True:
        if opener == "{":
            name, pos = _DECODER.raw_decode(text, pos)
            pos = _WS.match(text, _WS.match(text, pos).end() + 1).end()  # past the ':'
            if name == key:
                found = pos
        elif n == key:
            return pos
        budget[0] -= 1
        if budget[0] < 0:
            return None
        _, pos = _DECODER.raw_decode(text, pos)
        pos = _WS.match(text, pos).end()
        if text[pos] != ",":
            return found
        pos, n = _WS.match(text, pos + 1).end(), n + 1


def located(error: FormatError, data: bytes, *, base: int = 0) -> FormatError:
    """`error` with the byte offset and line of the JSON value its `json_path` names in
    `data` (the file's bytes from `base`; a BOM is skipped), when it has no offset yet."""
    if error.offset is not None or error.json_path is None:
        return error
    if data.startswith(BOM):
        data, base = data[len(BOM):], base + len(BOM)
    text = data.decode("utf-8")  # (it parsed, so it decodes)
    keys = error.json_path
    at = locate(text, keys)
    while at is None and keys:  # (a missing value: where it belongs)
        keys = keys[:-1]
        at = locate(text, keys)
    if at is None:
        return error
    return FormatError(error.message, path=error.path, offset=base + len(text[:at].encode("utf-8")),
                       line=text.count("\n", 0, at) + 1, json_path=error.json_path)
