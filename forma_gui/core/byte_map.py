"""GPT-2's byte <-> unicode bijection, the alphabet of every byte-level BPE vocabulary.

The 188 printable bytes (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) stand for themselves; the
other 68 (controls, space, DEL, NBSP, soft hyphen) take U+0100 upward in byte order, so
space (0x20) becomes ``Ġ`` U+0120 and newline (0x0A) ``Ċ`` U+010A.

Conversion is byte by byte, never through UTF-8: a vocabulary piece such as ``"âĢ"`` stands
for the bytes ``E2 80``, which are not valid UTF-8 on their own and must survive unchanged.
"""
from __future__ import annotations

from itertools import repeat

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

# str.translate tables. Encoding: latin-1 char -> mapped char. Decoding: mapped char ->
# latin-1 char, and every other char below U+0144 -> U+FFFF so that the final
# .encode("latin-1") rejects it (chars above U+0143 are rejected by latin-1 already).
_ENCODE_TABLE = {b: c for b, c in BYTE_TO_UNICODE.items()}
_DECODE_TABLE = {cp: "\uffff" for cp in range(0x144)}
_DECODE_TABLE.update({ord(c): chr(b) for c, b in UNICODE_TO_BYTE.items()})
_SEPARATOR = "\u0144"


def bytes_to_unicode_str(data: bytes) -> str:
    """Raw bytes -> the vocabulary string that stands for them.

    >>> bytes_to_unicode_str(b" world\\n")
    'ĠworldĊ'
    """
    return data.decode("latin-1").translate(_ENCODE_TABLE)


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
    """Many vocabulary strings -> their bytes in a few C-level passes (vocabulary loading).

    The pieces are joined with U+0144, the first character after the map's range: translation
    leaves it alone, so the translated text splits back into the pieces. ValueError names the
    first bad piece.
    """
    joined = _SEPARATOR.join(pieces)
    if joined.count(_SEPARATOR) == len(pieces) - 1:
        try:
            parts = joined.translate(_DECODE_TABLE).split(_SEPARATOR)
            return list(map(str.encode, parts, repeat("latin-1")))
        except UnicodeEncodeError:
            pass
    return [unicode_str_to_bytes(piece) for piece in pieces]


def bytes_to_pieces(datas: list[bytes]) -> list[str]:
    """Many byte strings -> vocabulary strings in one C-level pass (tiktoken rank files)."""
    joined = b"".join(datas).decode("latin-1").translate(_ENCODE_TABLE)
    out: list[str] = []
    pos = 0
    for data in datas:
        end = pos + len(data)
        out.append(joined[pos:end])
        pos = end
    return out


def check_piece(piece: str, *, path: str | None = None, line: int | None = None) -> bytes:
    """Like unicode_str_to_bytes, but raises FormatError naming the file and line."""
    try:
        return unicode_str_to_bytes(piece)
    except ValueError as e:
        raise FormatError(str(e), path=path, line=line) from None
