"""split_at_slots against slicing, with pieces that hold the separator candidates."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core.byte_split import SEPARATORS, split_at_slots
from tests.conftest import MAX_EXAMPLES

#: bytes drawn mostly from the separator candidates, so that pieces hold them often
PIECE = st.binary(max_size=6) | st.lists(st.sampled_from(b"\xff\xfe\xc0a\x00"), max_size=6).map(bytes)


def _laid(pieces: list[bytes], filler: int) -> tuple[np.ndarray, np.ndarray]:
    laid = np.frombuffer(b"".join(p + bytes([filler]) for p in pieces), np.uint8).copy()
    slots = np.cumsum([len(p) + 1 for p in pieces]) - 1
    return laid, slots


@settings(max_examples=MAX_EXAMPLES)
@given(st.lists(PIECE, min_size=1, max_size=40), st.integers(0, 255))
def test_pieces_come_back_whatever_they_hold(pieces, filler):
    laid, slots = _laid(pieces, filler)
    assert split_at_slots(laid, slots) == pieces


def test_a_file_of_separator_bytes_uses_the_rarest_candidate():
    """Every piece holds 0xFF: each candidate is counted, and the one no piece holds is used."""
    pieces = [bytes([0xFF, c]) for c in range(256) if bytes([c]) != SEPARATORS[3]] * 2
    laid, slots = _laid(pieces, 0)
    assert split_at_slots(laid, slots) == pieces
