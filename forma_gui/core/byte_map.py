"""GPT-2's byte <-> unicode bijection, the alphabet of every byte-level BPE vocabulary.

The 188 printable bytes (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) stand for themselves; the
other 68 (controls, space, DEL, NBSP, soft hyphen) take U+0100 upward in byte order, so
space (0x20) becomes ``Ġ`` U+0120 and newline (0x0A) ``Ċ`` U+010A.

Conversion is byte by byte, never through UTF-8: a vocabulary piece such as ``"âĢ"`` stands
for the bytes ``E2 80``, which are not valid UTF-8 on their own and must survive unchanged.
"""
from __future__ import annotations

import codecs
import functools
from itertools import accumulate

from forma_gui.core.byte_split import split_at_slots
from forma_gui.core.slices import SLICE, pause
from forma_gui.errors import FormatError


def _printable_bytes() -> list[int]:
    """The bytes GPT-2 keeps as their own latin-1 character."""
    return [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]


def _build() -> dict[int, str]:
    printable = set(_printable_bytes())
    mapping = {b: chr(b) for b in printable}
    shifted = (b for b in range(256) if b not in printable)
    for n, b in enumerate(shifted):
        mapping[b] = chr(0x100 + n)
    return dict(sorted(mapping.items()))


#: byte value -> the one-character string that stands for it in a vocabulary
BYTE_TO_UNICODE: dict[int, str] = _build()
#: the inverse: vocabulary character -> byte value
UNICODE_TO_BYTE: dict[str, int] = {c: b for b, c in BYTE_TO_UNICODE.items()}

# str.translate table for one piece: mapped char -> latin-1 char, and every other char below
# U+0144 -> U+FFFF so that the final .encode("latin-1") rejects it (chars above U+0143 are
# rejected by latin-1 already).
_DECODE_TABLE = {cp: "\uffff" for cp in range(0x144)}
_DECODE_TABLE.update({ord(c): chr(b) for c, b in UNICODE_TO_BYTE.items()})
# byte -> char as a 256-char string, the form codecs.charmap_decode takes
_CHARMAP = "".join(BYTE_TO_UNICODE[b] for b in range(256))


@functools.cache
def _code_table():
    """Code point -> byte (-1 where the char is not in the map) for U+0000..U+0143 (numpy, on first use)."""
    import numpy as np

    table = np.full(0x144, -1, dtype=np.int16)
    for c, b in UNICODE_TO_BYTE.items():
        table[ord(c)] = b
    return table


def bytes_to_unicode_str(data: bytes) -> str:
    """Raw bytes -> the vocabulary string that stands for them.

    >>> bytes_to_unicode_str(b" world\\n")
    'ĠworldĊ'
    """
    return codecs.charmap_decode(data, "strict", _CHARMAP)[0]


def unicode_str_to_bytes(piece: str) -> bytes:
    """A vocabulary string -> the raw bytes it stands for; ValueError on a char outside the map.

    >>> unicode_str_to_bytes("Ġworld")
    b' world'
    """
    try:
        return piece.translate(_DECODE_TABLE).encode("latin-1")
    except UnicodeEncodeError as e:
        bad = piece[e.start]
        raise ValueError(f"{bad!r} (U+{ord(bad):04X}) at index {e.start} of {piece!r} is not a "
                         "byte-level BPE character") from None


def pieces_to_bytes(pieces: list[str]) -> list[bytes]:
    """Many vocabulary strings -> their bytes in a few vectorized passes (vocabulary loading).

    Every map character is one byte, so the joined text converts as a whole (code points
    through a lookup table) and is cut at the same offsets. ValueError names the first bad piece.
    A slice of pieces at a time: one pass over a 262k vocabulary held the GIL for ~30 ms.
    """
    out: list[bytes] = []
    for lo in range(0, len(pieces), SLICE):
        pause()
        out += _pieces_to_bytes(pieces[lo:lo + SLICE])
    return out


def _pieces_to_bytes(pieces: list[str]) -> list[bytes]:
    import numpy as np

    if not pieces:
        return []
    joined = "\n".join(pieces) + "\n"  # "\n" is no map character: it marks where each piece ends
    table = _code_table()
    codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)  # (n_chars,)
    ends = np.flatnonzero(codes == ord("\n"))
    mapped = table[np.minimum(codes, len(table) - 1)]
    bad = (codes >= len(table)) | (mapped < 0)
    bad[ends] = False
    if len(ends) != len(pieces) or bad.any():
        for piece in pieces:
            unicode_str_to_bytes(piece)  # raises, naming the piece
    return split_at_slots(mapped.astype(np.uint8), ends)


def bytes_to_pieces(datas: list[bytes]) -> list[str]:
    """Many byte strings -> vocabulary strings (tiktoken rank files), decoded by a C charmap."""
    joined = codecs.charmap_decode(b"".join(datas), "strict", _CHARMAP)[0]
    ends = list(accumulate(map(len, datas)))
    return [joined[a:b] for a, b in zip([0, *ends], ends)]


def check_piece(piece: str, *, path: str | None = None, line: int | None = None) -> bytes:
    """Like unicode_str_to_bytes, but raises FormatError naming the file and line."""
    try:
        return unicode_str_to_bytes(piece)
    except ValueError as e:
        raise FormatError(str(e), path=path, line=line) from None
