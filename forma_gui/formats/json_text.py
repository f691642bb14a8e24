"""`parse_json`: JSON text -> Python objects, with every failure a FormatError.

`json.loads` fails in more ways than `JSONDecodeError`: bytes that are not UTF-8
(`UnicodeDecodeError`), nesting deeper than the interpreter's recursion limit (about 1,000
levels: `RecursionError`), and integers longer than Python's 4,300-digit conversion limit
(a bare `ValueError`). Each becomes a FormatError naming the byte offset and line.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

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


def check_text(strings: list[str], where: str, path: str | os.PathLike) -> None:
    """FormatError naming the first string with a lone surrogate, as HF refuses the file
    (serde_json); `where` is formatted with the string's index `n` and `s`, how it is shown.

    >>> check_text(["a", "b\\udc80"], "vocab[{s}]", "v.json")
    Traceback (most recent call last):
    ...
    forma_gui.errors.FormatError: v.json: vocab['b\\udc80']: a lone UTF-16 surrogate (\\uD800-\\uDFFF) is not text
    """
    if _SURROGATE.search("".join(strings)):
        n, bad = next((n, t) for n, t in enumerate(strings) if _SURROGATE.search(t))
        raise FormatError(f"{where.format(n=n, s=shown(bad))}: a lone UTF-16 surrogate "
                          "(\\uD800-\\uDFFF) is not text", path=path)
