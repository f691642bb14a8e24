"""The protobuf wire reader: the spec's own examples, the `protobuf` library as oracle for
every wire type, and bounds checks that raise FormatError with an offset."""
from __future__ import annotations

import struct

import pytest
from google.protobuf.internal import encoder
from hypothesis import given, settings
from hypothesis import strategies as st
from sentencepiece import sentencepiece_model_pb2 as pb

from forma_gui.errors import FormatError
from forma_gui.formats.protobuf_wire import (I32, I64, LEN, VARINT, as_float, as_int32,
                                             as_text, iter_fields, read_varint)
from tests.conftest import MAX_EXAMPLES


def test_spec_examples():
    # protobuf.dev/programming-guides/encoding: 150 is 96 01, field 1 = 150 is 08 96 01,
    # field 2 = "testing" is 12 07 74 65 73 74 69 6e 67
    assert read_varint(b"\x96\x01", 0, 2) == (150, 2)
    assert [(f.number, f.wire_type, f.value) for f in iter_fields(b"\x08\x96\x01")] == [
        (1, VARINT, 150)]
    fields = list(iter_fields(bytes.fromhex("120774657374696e67")))
    assert (fields[0].number, fields[0].wire_type, fields[0].value) == (2, LEN, b"testing")


@given(st.integers(min_value=0, max_value=2**64 - 1))
@settings(max_examples=MAX_EXAMPLES)
def test_varint_matches_protobuf(value):
    data = encoder._VarintBytes(value)
    assert read_varint(data, 0, len(data)) == (value, len(data))


@given(st.integers(min_value=-2**31, max_value=2**31 - 1))
@settings(max_examples=MAX_EXAMPLES)
def test_int32_roundtrip_through_protobuf(value):
    m = pb.TrainerSpec(pad_id=value)
    (field,) = list(iter_fields(m.SerializeToString()))
    assert field.number == 43 and as_int32(field.value) == value


@given(st.floats(width=32, allow_nan=False))
@settings(max_examples=MAX_EXAMPLES)
def test_float_matches_protobuf(value):
    m = pb.ModelProto.SentencePiece(piece="a", score=value)
    fields = {f.number: f for f in iter_fields(m.SerializeToString())}
    assert fields[2].wire_type == I32 and as_float(fields[2].value) == value


def test_all_wire_types_and_groups():
    data = (b"\x08\x05"                                 # 1: varint 5
            + b"\x11" + struct.pack("<Q", 2**63 + 1)    # 2: fixed64
            + b"\x1d" + struct.pack("<I", 7)            # 3: fixed32
            + b"\x22\x02hi"                             # 4: bytes
            + b"\x2b\x08\x01\x33\x08\x02\x34\x2c"       # 5: a group holding a nested group
            + b"\x30\x09")                              # 6: varint 9
    got = [(f.number, f.wire_type, f.value) for f in iter_fields(data)]
    assert got == [(1, VARINT, 5), (2, I64, 2**63 + 1), (3, I32, 7), (4, LEN, b"hi"),
                   (6, VARINT, 9)]


def test_text_keeps_invalid_bytes():
    assert as_text(b"\xe2\x96\x81x") == "\u2581x"
    assert as_text(b"\xff").encode("utf-8", "surrogateescape") == b"\xff"


@pytest.mark.parametrize("data, offset, words", [
    (b"\x08", 1, "varint"),                    # value missing
    (b"\x08\x80\x80", 1, "varint"),            # varint runs off the end
    (b"\x08" + b"\xff" * 11, 1, "10 bytes"),  # varint too long
    (b"\x12\x05ab", 0, "claims 5 bytes"),      # length past the end
    (b"\x1d\x01\x02", 0, "expected 4 bytes"),  # truncated fixed32
    (b"\x09\x01", 0, "expected 8 bytes"),      # truncated fixed64
    (b"\x0e", 0, "wire type 6"),               # no such wire type
    (b"\x00\x01", 0, "field number"),          # field 0
    (b"\x0b\x08\x01", 3, "not closed"),        # group without its end
    (b"\x0b\x14", 1, "closed by"),             # group closed by another field's end
])
def test_malformed_raises_with_offset(data, offset, words):
    with pytest.raises(FormatError) as info:
        list(iter_fields(data, path="x.model"))
    assert info.value.offset == offset and words in str(info.value)
    assert "x.model" in str(info.value)
