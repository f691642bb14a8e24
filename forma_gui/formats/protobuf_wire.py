"""A small, bounds-checked reader for the protobuf wire format.

Why our own reader and not the `protobuf` package: a SentencePiece `.model` is one
`ModelProto` message, and we need a handful of its fields. The wire format is tiny (a tag
varint, then a varint, a fixed 32/64-bit value or a length-prefixed byte string), so ~100
lines read it without a runtime dependency, without generated `_pb2` modules that must match
the installed protobuf version, and with errors that name the byte offset. `protobuf` stays a
test-only dependency: the tests build malformed models with it and compare.

Layout of one field: ``tag = (field_number << 3) | wire_type`` as a varint, then

    wire type 0 VARINT  a base-128 varint (int32/int64/uint/bool/enum)
    wire type 1 I64     8 bytes little-endian (fixed64, sfixed64, double)
    wire type 2 LEN     a varint length, then that many bytes (string, bytes, sub-message)
    wire type 3/4       start/end of a (deprecated) group, skipped with its contents
    wire type 5 I32     4 bytes little-endian (fixed32, sfixed32, float)

>>> [(f.number, f.value) for f in iter_fields(b"\\x08\\x96\\x01\\x12\\x02hi")]
[(1, 150), (2, b'hi')]
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

from forma_gui.errors import FormatError

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5
MAX_VARINT_BYTES = 10  # a 64-bit value needs at most 10 groups of 7 bits
MAX_GROUP_DEPTH = 64

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class Field:
    """One decoded field: `value` is an int (VARINT/I32/I64 raw bits) or bytes (LEN)."""

    number: int
    wire_type: int
    value: int | bytes
    offset: int  # byte offset of the field's tag, for error messages
    value_at: int = -1  # byte offset of a LEN field's first value byte (else the tag's)


def read_varint(buf: bytes | memoryview, pos: int, end: int, *,
                path: str | None = None) -> tuple[int, int]:
    """The varint at `pos` and the position after it.

    >>> read_varint(b"\\xac\\x02", 0, 2)
    (300, 2)
    """
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise FormatError("expected a varint, but the message ends inside it",
                              path=path, offset=start)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if pos - start >= MAX_VARINT_BYTES:
            raise FormatError("expected a varint of at most 10 bytes", path=path, offset=start)


def iter_fields(buf: bytes | memoryview, start: int = 0, end: int | None = None, *,
                path: str | None = None, base: int = 0) -> Iterator[Field]:
    """The fields of the message in ``buf[start:end]``; offsets are ``base + position``."""
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        tag_at = pos
        tag, pos = read_varint(buf, pos, end, path=path)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise FormatError("expected a field number >= 1, found 0", path=path,
                              offset=base + tag_at)
        value, pos = read_value(buf, pos, end, wire_type, number, path, base, tag_at)
        if wire_type != SGROUP:
            yield Field(number, wire_type, value, base + tag_at, base + value_start(value, pos, tag_at))


def value_start(value: int | bytes, after: int, tag_at: int) -> int:
    """Where a field's value begins, from the position after it: a LEN value's first byte,
    else the tag."""
    return after - len(value) if isinstance(value, bytes) else tag_at


def read_value(buf: bytes | memoryview, pos: int, end: int, wire_type: int, number: int,
                path: str | None, base: int, tag_at: int) -> tuple[int | bytes, int]:
    """The value of one field whose tag was just read; groups are skipped (value 0)."""
    if wire_type == VARINT:
        return read_varint(buf, pos, end, path=path)
    if wire_type in (I32, I64):
        size = 4 if wire_type == I32 else 8
        if pos + size > end:
            raise FormatError(f"expected {size} bytes for field {number}, but the message "
                              f"ends after {end - pos}", path=path, offset=base + tag_at)
        codec = _U32 if wire_type == I32 else _U64
        return codec.unpack_from(buf, pos)[0], pos + size
    if wire_type == LEN:
        length, pos = read_varint(buf, pos, end, path=path)
        if length > end - pos:
            raise FormatError(f"field {number} claims {length} bytes, but only {end - pos} are "
                              "left in the message", path=path, offset=base + tag_at)
        return bytes(buf[pos:pos + length]), pos + length
    if wire_type == SGROUP:
        return 0, _skip_group(buf, pos, end, number, path, base, 1)
    raise FormatError(f"unexpected wire type {wire_type} for field {number} (expected 0, 1, "
                      "2, 3 or 5)", path=path, offset=base + tag_at)


def _skip_group(buf: bytes | memoryview, pos: int, end: int, number: int, path: str | None,
                base: int, depth: int) -> int:
    """The position after the END_GROUP that closes group `number` (nested groups too)."""
    if depth > MAX_GROUP_DEPTH:
        raise FormatError(f"groups nested deeper than {MAX_GROUP_DEPTH}", path=path,
                          offset=base + pos)
    while pos < end:
        tag_at = pos
        tag, pos = read_varint(buf, pos, end, path=path)
        inner, wire_type = tag >> 3, tag & 7
        if wire_type == EGROUP:
            if inner != number:
                raise FormatError(f"group {number} closed by END_GROUP of field {inner}",
                                  path=path, offset=base + tag_at)
            return pos
        if wire_type == SGROUP:
            pos = _skip_group(buf, pos, end, inner, path, base, depth + 1)
        else:
            _, pos = read_value(buf, pos, end, wire_type, inner, path, base, tag_at)
    raise FormatError(f"group {number} is not closed before the end of the message",
                      path=path, offset=base + pos)


# ---- interpreting raw values -------------------------------------------------------------

def as_int32(raw: int) -> int:
    """A VARINT as protobuf int32/enum: negatives travel as 64-bit two's complement.

    >>> as_int32(0xFFFFFFFFFFFFFFFF)
    -1
    """
    raw &= 0xFFFFFFFF
    return raw - (1 << 32) if raw & 0x80000000 else raw


def as_float(raw: int) -> float:
    """The I32 bits of a protobuf float, as the exact float32 value.

    >>> as_float(0x3F800000)
    1.0
    """
    return _F32.unpack(_U32.pack(raw))[0]


def as_text(raw: bytes) -> str:
    """A protobuf string; proto2 does not validate UTF-8, so bad bytes survive as surrogates.

    >>> as_text(b"\\xe2\\x96\\x81a")
    '▁a'
    """
    return raw.decode("utf-8", "surrogateescape")
