"""GPT-2's byte <-> unicode map: a bijection, byte by byte, never through UTF-8."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from forma_gui.core.byte_map import (
    BYTE_TO_UNICODE, UNICODE_TO_BYTE, bytes_to_pieces, bytes_to_unicode_str, pieces_to_bytes,
    unicode_str_to_bytes,
)
from tests.conftest import MAX_EXAMPLES, data_file


def test_bijection_over_all_256_bytes():
    assert sorted(BYTE_TO_UNICODE) == list(range(256))
    assert len(set(BYTE_TO_UNICODE.values())) == 256
    assert all(UNICODE_TO_BYTE[c] == b for b, c in BYTE_TO_UNICODE.items())


def test_known_characters_from_gpt2():
    # The GPT-2 release spells space as Ġ (U+0120) and newline as Ċ (U+010A).
    assert BYTE_TO_UNICODE[0x20] == "Ġ" and BYTE_TO_UNICODE[0x0A] == "Ċ"
    assert BYTE_TO_UNICODE[ord("A")] == "A"
    assert sum(BYTE_TO_UNICODE[b] == chr(b) for b in range(256)) == 188


def test_matches_tiktoken_data_gym_alphabet():
    # tiktoken.load rebuilds the same alphabet to read GPT-2's encoder.json.
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    others = [b for b in range(256) if b not in printable]
    assert all(BYTE_TO_UNICODE[b] == chr(b) for b in printable)
    assert [BYTE_TO_UNICODE[b] for b in others] == [chr(256 + n) for n in range(len(others))]


def test_gpt2_encoder_json_single_bytes_cover_the_map():
    vocab = json.loads(data_file("gpt2", "encoder.json").read_text("utf-8"))
    assert all(BYTE_TO_UNICODE[b] in vocab for b in range(256))


def test_invalid_utf8_survives():
    assert unicode_str_to_bytes("âĢ") == b"\xe2\x80"  # half of an em dash
    assert bytes_to_unicode_str(b"\xe2\x80") == "âĢ"


@pytest.mark.parametrize("bad", [" ", "\x00", "€", "Ġ x", "\uffff"])
def test_chars_outside_the_map_raise(bad):
    with pytest.raises(ValueError, match="not a byte-level BPE character"):
        unicode_str_to_bytes(bad)


@settings(max_examples=MAX_EXAMPLES)
@given(st.binary())
def test_round_trip_bytes(data):
    assert unicode_str_to_bytes(bytes_to_unicode_str(data)) == data


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(st.binary(max_size=8)))
def test_batch_conversions_equal_one_at_a_time(datas):
    pieces = bytes_to_pieces(datas)
    assert pieces == [bytes_to_unicode_str(d) for d in datas]
    assert pieces_to_bytes(pieces) == datas


def test_batch_conversion_names_the_bad_piece():
    with pytest.raises(ValueError, match="'a b'"):
        pieces_to_bytes(["ok", "a b"])
