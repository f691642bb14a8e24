"""Checks shared by the incremental-encoding tests of the llama.cpp, SentencePiece and
WordPiece families: after every edit the encoder equals a from-scratch `encode` and `segment`."""
from __future__ import annotations

from hypothesis import HealthCheck, settings, strategies as st

from forma_gui.core import incremental as inc
from tests.conftest import MAX_EXAMPLES

EDIT_SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def records(tokens) -> list[tuple]:
    return [(t.id, t.piece, t.data, t.start, t.end, t.partial, t.special) for t in tokens]


def check(enc, tok, text: str, library=None) -> None:
    """The encoder's text, ids, tokens and byte count equal a fresh encode/segment of `text`;
    with `library` (a sentencepiece processor), its ids too (ordinary text, no lone surrogate)."""
    assert enc.text == text
    assert list(enc.ids) == tok.encode(text, special=enc.special)
    want = tok.segment(text, special=enc.special)
    assert records(enc.tokens()) == records(want)
    assert enc.nbytes == sum(len(t.data) for t in want)  # as the view's TokenStore counts them
    if library is not None and not enc.special and not inc._count_barriers(text):
        assert list(enc.ids) == library.encode(text)


def random_edits(enc, tok, text: str, data, inserts, n: int = 8, library=None, *,
                 max_removed: int = 6, checker=check) -> str:
    """Apply n random edits (inserts, deletes of up to max_removed characters, replacements),
    checking each with ``checker(enc, tok, text, library)`` and that the splice kept the
    tokens around it; returns the final text."""
    for _ in range(n):
        start = data.draw(st.integers(0, len(text)), label="start")
        removed = data.draw(st.integers(0, min(max_removed, len(text) - start)), label="removed")
        inserted = data.draw(inserts, label="inserted")
        old = list(enc.ids)
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        checker(enc, tok, text, library)
        first, gone, added = enc.last_splice
        new = list(enc.ids)
        assert new[:first] == old[:first] and new[first + added:] == old[first + gone:]
    return text
