"""Map each token's bytes onto character offsets of the input (`Tokenizer.segment`).

The usual case, byte-level BPE without a normalizer: the tokens' bytes concatenate to
``text.encode()``. Each token then spans the characters its bytes touch; a token that covers
only part of a character spans that whole character and is marked ``partial``; the spans tile
the input (neighbours share a character only when both are partial there).

When the bytes differ from the text (a normalizer changed it: NFC, NFKC, lower-casing, a
SentencePiece ``▁`` prefix; lone surrogates replaced; added tokens that swallowed spaces;
unknown bytes dropped), the two byte strings are aligned: equal runs map character by
character, and each differing stretch becomes one unit, found by resynchronising on the
next few characters (for example NFKC's ``ﬁ`` -> ``fi`` is one unit of one character and two
bytes). A token inside a unit spans the whole unit, and is partial unless it covers it
exactly. Characters that produced no bytes join the unit before them (the first unit if they
come first); bytes that stand for no character join the unit after them. The spans tile the
input in every case, and the function never raises on a mismatch.
"""
from __future__ import annotations

import weakref
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence

from forma_gui.core.gc_pause import gc_paused
from forma_gui.core.tokenizer import Token

if TYPE_CHECKING:  # pragma: no cover
    from forma_gui.core.tokenizer import Tokenizer

#: how far (characters / bytes) the aligner looks ahead to resynchronise after a difference
RESYNC_CHARS = 32
RESYNC_BYTES = 128
#: bytes that must agree after a resynchronisation point
RESYNC_CONFIRM = 8
_REPLACEMENT = "\ufffd".encode()
#: token byte length per id, per tokenizer (built as ids turn up, for vectorized spans)
_BYTE_LENGTHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def align_tokens(tokenizer: "Tokenizer", text: str, ids: Sequence[int]) -> list[Token]:
    """Tokens with character spans for `ids`, the encoding of `text` (see module docstring)."""
    ids = list(ids)
    datas = list(map(tokenizer.token_bytes, ids))
    ends = list(accumulate(map(len, datas)))
    starts = [0, *ends[:-1]] if ids else []
    spans = _spans(text, b"".join(datas), starts, ends)
    columns = (ids, list(map(tokenizer.piece, ids)), datas, *zip(*spans),
               list(map(tokenizer.special_ids.__contains__, ids)))
    # Hundreds of thousands of records for a large paste: pause the cyclic collector, which
    # would otherwise rescan them over and over while they are built (they hold no cycles).
    with gc_paused(settle=False):
        return list(map(Token, *columns)) if ids else []


class Columns(NamedTuple):
    """A segmentation as the GUI's TokenStore holds it: one entry per token."""

    ids: array        # "i"
    starts: array     # "i", character offsets
    ends: array       # "i"
    flags: bytearray  # 1: partial, 2: special
    nbytes: int       # the tokens' bytes, all together


def segment_columns(tokenizer: "Tokenizer", text: str, special: bool = False) -> Columns | None:
    """``tokenizer.segment(text, special=special)`` as Columns, token for token, when the
    tokenizer computes them without a Token object per token (a ``segment_columns`` method,
    llama.cpp's tokenizers); else None."""
    columns = getattr(tokenizer, "segment_columns", None)
    found = columns(text, special=special) if columns is not None else None
    if found is None:
        return None
    ids, starts, ends, flags = found
    nbytes = int(token_lengths(tokenizer, ids).sum()) if len(ids) else 0
    return Columns(_int_array(ids), _int_array(starts), _int_array(ends),
                   bytearray(flags.tobytes()), nbytes)


def _int_array(column) -> array:
    """A numpy int32 column as an array("i") (a copy of its bytes)."""
    out = array("i")
    out.frombytes(column.astype("int32", copy=False).tobytes())
    return out


def byte_count(tokenizer: "Tokenizer", ids: Iterable[int]) -> int:
    """sum(len(token_bytes(id))) over a few ids (an edit's), in Python from `token_lengths`'
    table: its numpy calls cost more than the lookups for a handful of ids."""
    table = memoryview(_length_table(tokenizer))
    total = 0
    for i in ids:
        n = table[i]
        if n < 0:
            n = table[i] = len(tokenizer.token_bytes(i))
        total += n
    return total


def token_lengths(tokenizer: "Tokenizer", tok):
    """len(token_bytes(id)) for each id of the int array `tok`, from a per-tokenizer table filled
    as ids turn up (all 128k of a GGUF vocabulary at once would take ~0.4 s)."""
    import numpy as np

    table = _length_table(tokenizer)
    lengths = table[tok]                                   # (n_tokens,)
    unknown = lengths < 0
    if unknown.any():
        new = np.unique(tok[unknown])
        lengths_of_new = map(len, map(tokenizer.token_bytes, new.tolist()))
        table[new] = np.fromiter(lengths_of_new, dtype=np.int64, count=len(new))
        lengths = table[tok]
    return lengths


def _length_table(tokenizer: "Tokenizer"):
    """The tokenizer's (vocab_size,) int64 table of token byte lengths, -1 where not looked up yet."""
    import numpy as np

    table = _BYTE_LENGTHS.get(tokenizer)
    if table is None or len(table) != tokenizer.vocab_size:
        table = np.full(tokenizer.vocab_size, -1, dtype=np.int64)
        _BYTE_LENGTHS[tokenizer] = table
    return table


def _spans(text: str, data: bytes, starts: list[int], ends: list[int]) -> list[tuple[int, int, bool]]:
    """(start char, end char, partial) per token byte range."""
    if text.isascii() and data == text.encode("ascii"):
        return [(s, e, False) for s, e in zip(starts, ends)]
    encoded = _encodable(text)
    if encoded == data:
        return _identity_spans(data, starts, ends)
    return _aligned_spans(text, data, starts, ends)


def _encodable(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _identity_spans(data: bytes, starts: list[int], ends: list[int]) -> list[tuple[int, int, bool]]:
    """Spans when the token bytes are exactly the text's UTF-8 (vectorized)."""
    import numpy as np

    raw = np.frombuffer(data, dtype=np.uint8)
    lead = np.append((raw & 0xC0) != 0x80, True)  # (n + 1,): byte starts a char (or is the end)
    char_at = np.cumsum(lead) - 1                  # (n + 1,): index of the char holding byte p
    b0 = np.asarray(starts, dtype=np.int64)
    b1 = np.asarray(ends, dtype=np.int64)
    first = char_at[b0]
    last = np.where(b1 > b0, char_at[np.maximum(b1 - 1, 0)] + 1, first)
    partial = ~lead[b0] | ~lead[b1]
    return list(zip(first.tolist(), last.tolist(), partial.tolist()))


# ---- the general case: align differing byte strings --------------------------------------------

@dataclass(slots=True)
class _Unit:
    """Token bytes [d0, d1) standing for characters [c0, c1).

    Identity units (t0 >= 0) equal the text bytes from t0 on, character by character; other
    units are opaque. c0 == c1 for bytes that stand for no character.
    """

    d0: int
    d1: int
    c0: int
    c1: int
    t0: int = -1


class _Text:
    """The text as bytes (lone surrogates as U+FFFD) with char <-> byte offset tables."""

    def __init__(self, text: str) -> None:
        encoded = [c.encode("utf-8") if not 0xD800 <= ord(c) < 0xE000 else _REPLACEMENT for c in text]
        self.bytes = b"".join(encoded)
        self.n_chars = len(text)
        self.char_start = [0, *accumulate(map(len, encoded))]       # (n_chars + 1,) byte offsets
        self.char_of = [c for c, b in enumerate(encoded) for _ in b] + [len(text)]  # per byte, + end

    def char_start_before(self, pos: int) -> int:
        """The start of the character holding byte `pos` (pos itself at a boundary)."""
        return self.char_start[self.char_of[pos]]


def _aligned_spans(text: str, data: bytes, starts: list[int], ends: list[int]) -> list[tuple[int, int, bool]]:
    t = _Text(text)
    units = _fold_empty(_align(t, data))
    unit_starts = [u.d0 for u in units]
    return [_token_span(units, unit_starts, t, b0, b1) for b0, b1 in zip(starts, ends)]


def _align(t: _Text, data: bytes) -> list[_Unit]:
    """Units covering all of `data` and all characters, in order."""
    units: list[_Unit] = []
    i = j = 0  # positions in data and in t.bytes; j is always on a character start
    while i < len(data) or j < len(t.bytes):
        k = _common_prefix(data, i, t.bytes, j)
        k = t.char_start_before(j + k) - j  # equal runs end on a character boundary
        if k:
            units.append(_Unit(i, i + k, t.char_of[j], t.char_of[j + k], j))
            i, j = i + k, j + k
            continue
        di, dc = _resync(data, i, t, t.char_of[j])
        c0 = t.char_of[j]
        units.append(_Unit(i, i + di, c0, c0 + dc))
        i, j = i + di, t.char_start[c0 + dc]
    return units


def _common_prefix(a: bytes, i: int, b: bytes, j: int) -> int:
    """Length of the common prefix of a[i:] and b[j:], by doubling then bisecting slices."""
    limit = min(len(a) - i, len(b) - j)
    if limit <= 0 or a[i] != b[j]:
        return 0
    if a[i:i + limit] == b[j:j + limit]:
        return limit
    good, step = 1, 1
    while good + step < limit and a[i:i + good + step] == b[j:j + good + step]:
        good += step
        step *= 2
    bad = min(good + step, limit)  # a[i:i+bad] != b[j:j+bad]
    while bad - good > 1:
        mid = (good + bad) // 2
        if a[i:i + mid] == b[j:j + mid]:
            good = mid
        else:
            bad = mid
    return good


def _resync(data: bytes, i: int, t: _Text, c: int) -> tuple[int, int]:
    """(bytes of data, chars of text from char c) to skip until both agree again.

    The cheapest skip (fewest bytes + chars) after which the next RESYNC_CONFIRM bytes agree;
    failing that, after which the next character agrees; failing that, everything left.
    """
    for confirm in (RESYNC_CONFIRM, 1):
        best: tuple[int, int] | None = None
        for dc in range(0, min(RESYNC_CHARS, t.n_chars - c) + 1):
            di = _find_after(data, i, t, c + dc, confirm)
            if di is not None and (di or dc) and (best is None or di + dc < sum(best)):
                best = (di, dc)
        if best is not None:
            return best
    return len(data) - i, t.n_chars - c


def _find_after(data: bytes, i: int, t: _Text, c: int, confirm: int) -> int | None:
    """Bytes from i to where data continues like the text from char c (None if not near)."""
    if c == t.n_chars:  # the rest of the data stands for the skipped characters (last resort)
        return len(data) - i if confirm == 1 and len(data) - i <= RESYNC_CONFIRM else None
    tb = t.char_start[c]
    needle = t.bytes[tb:max(tb + confirm, t.char_start[c + 1])] if confirm == 1 else t.bytes[tb:tb + confirm]
    found = data.find(needle, i, i + RESYNC_BYTES + len(needle))
    return None if found < 0 else found - i


def _fold_empty(units: list[_Unit]) -> list[_Unit]:
    """Give characters that produced no bytes to the unit before them (or the first unit)."""
    out: list[_Unit] = []
    carried: int | None = None  # first char of leading byte-less characters
    for u in units:
        if u.d1 > u.d0:
            if carried is not None:
                u.c0, carried = carried, None
            out.append(u)
        elif out:
            out[-1].c1 = u.c1
        elif carried is None:
            carried = u.c0
    if carried is not None and out:
        out[0].c0 = carried
    return out


def _token_span(units: list[_Unit], unit_starts: list[int], t: _Text, b0: int, b1: int) -> tuple[int, int, bool]:
    """(start char, end char, partial) of the token bytes [b0, b1)."""
    if not units:
        return 0, t.n_chars, bool(b1 > b0 and t.n_chars)
    u0 = units[max(bisect_right(unit_starts, b0) - 1, 0)]
    start, lead_ok = _boundary(u0, b0, t)
    if b1 <= b0:
        return start, start, False
    u1 = units[max(bisect_right(unit_starts, b1 - 1) - 1, 0)]
    if b1 == u1.d1:
        end, tail_ok = u1.c1, True
    elif u1.t0 >= 0:
        tb = u1.t0 + (b1 - u1.d0)
        end, tail_ok = t.char_of[tb - 1] + 1, t.char_start_before(tb) == tb
    else:
        end, tail_ok = u1.c1, False
    if u0.c0 == u0.c1 and u1 is u0:  # bytes that stand for no character
        return start, start, False
    return start, end, not (lead_ok and tail_ok)


def _boundary(u: _Unit, b: int, t: _Text) -> tuple[int, bool]:
    """(char at which data byte b starts, whether b is on a character boundary)."""
    if b == u.d0:
        return u.c0, True
    if u.t0 < 0:
        return u.c0, False
    tb = u.t0 + (b - u.d0)
    return t.char_of[tb], t.char_start_before(tb) == tb
