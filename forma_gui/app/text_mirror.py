"""A Python copy of a QTextDocument's text, kept current edit by edit.

Two reasons not to call `toPlainText()` after each keystroke:
* it rewrites the text: U+00A0 NO-BREAK SPACE becomes a space and U+2028 a newline, and
  a tokenizer inspector must see exactly what was typed (`toRawText()` does not rewrite);
* converting a 10 MB document costs ~100 ms on the GUI thread, every time.

So the mirror applies each `contentsChange(position, removed, added)` to its own str,
reading only the added characters from the document. Qt counts positions in UTF-16 code
units and Python in code points; the mirror keeps the UTF-16 positions of the (usually
few) astral characters, such as emoji, to convert between the two. `edits` records each
change in Python indices, for an incremental re-tokenizer. Whenever the bookkeeping and
the document disagree on the length, the mirror re-reads the whole document.
"""
from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from typing import NamedTuple

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QTextCursor, QTextDocument

BLOCK_SEP = "\u2029"        # how QTextDocument stores a newline
ASTRAL = re.compile("[\U00010000-\U0010FFFF]")


class Edit(NamedTuple):
    """`text[start:start + removed]` was replaced by `added` characters (Python indices)."""

    start: int
    removed: int
    added: int


def raw_text(doc: QTextDocument) -> str:
    """The document's text exactly as typed, newlines as "\\n"."""
    return doc.toRawText().replace(BLOCK_SEP, "\n")


def astral_offsets(text: str, base: int = 0) -> array:
    """UTF-16 offsets (plus base) of the characters above U+FFFF in text.

    >>> list(astral_offsets("a😀b😀"))
    [1, 4]
    """
    if text.isascii():
        return array("q")
    # each earlier astral character adds one more UTF-16 unit than Python counts
    return array("q", [base + m.start() + j for j, m in enumerate(ASTRAL.finditer(text))])


def _shifted(offsets: array, delta: int) -> array:
    """offsets + delta, at C speed (an emoji-heavy 10 MB text has ~10^5 of them)."""
    if not delta or not offsets:
        return offsets
    import numpy as np  # not at import: launch does not need it

    return array("q", (np.frombuffer(offsets, dtype=np.int64) + delta).tobytes())


class TextMirror(QObject):
    """`mirror.text` equals the document's raw text after every change; emits `changed`."""

    changed = Signal()

    def __init__(self, doc: QTextDocument, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.doc = doc
        self.edits: list[Edit] = []
        self.resyncs = 0
        self._batch: dict | None = None
        self._resync()
        doc.documentLayout()  # Qt emits contentsChange only for a document with a layout
        doc.contentsChange.connect(self._on_change)

    def _resync(self) -> None:
        self.text = raw_text(self.doc)
        self._astral = astral_offsets(self.text)
        self.resyncs += 1

    def python_index(self, unit: int) -> int:
        """A document position (UTF-16 code units) as an index into `text`."""
        return unit - bisect_left(self._astral, unit)

    def begin_batch(self) -> None:
        """Removals at one place, then insertions each right after the previous, follow (a
        selection replaced in slices: its text removed a slice at a time from its start,
        then the new text inserted a slice at a time).

        Each insertion's characters are read back as usual, but the splice into the copy of
        a 10 MB text happens once, in end_batch, instead of once per slice.
        """
        self._batch = {"start": None, "end": None, "removed": 0, "pieces": [], "astral": array("q"),
                       "ok": True}

    def end_batch(self) -> None:
        batch, self._batch = self._batch, None
        if batch["start"] is not None:
            if batch["ok"]:
                self._splice_batch(batch)
            else:
                self._resync()
                self.edits.append(Edit(0, -1, len(self.text)))
        self.changed.emit()

    def _batch_insert(self, position: int, removed: int, added: int) -> None:
        batch = self._batch
        if removed and not added and not batch["pieces"] and batch["start"] in (None, position):
            batch["start"], batch["removed"] = position, batch["removed"] + removed
            return  # (a slice of the selection, removed from its start)
        if removed or (batch["end"] is not None and position != batch["end"]):
            batch["ok"] = False
        if batch["start"] is None:
            batch["start"] = position
        batch["end"] = position + added
        if batch["ok"]:
            piece = self._read(position, added)
            batch["pieces"].append(piece)
            batch["astral"] += astral_offsets(piece, position)

    def _splice_batch(self, batch: dict) -> None:
        position, removed = batch["start"], batch["removed"]
        start, stop = self.python_index(position), self.python_index(position + removed)
        shift = (position if batch["end"] is None else batch["end"]) - position - removed
        lo = bisect_left(self._astral, position)
        hi = bisect_left(self._astral, position + removed)
        self._astral[lo:] = batch["astral"] + _shifted(self._astral[hi:], shift)
        added = sum(map(len, batch["pieces"]))
        self.text = "".join([self.text[:start], *batch["pieces"], self.text[stop:]])  # one copy
        self.edits.append(Edit(start, stop - start, added))
        if len(self.text) + len(self._astral) != self.doc.characterCount() - 1:
            self._resync()
            self.edits.append(Edit(0, -1, len(self.text)))

    def _read(self, position: int, length: int) -> str:
        """The document's characters in [position, position + length) (UTF-16 units)."""
        cursor = QTextCursor(self.doc)
        cursor.setPosition(position)
        cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
        return cursor.selectedText().replace(BLOCK_SEP, "\n")

    def _on_change(self, position: int, removed: int, added: int) -> None:
        if self._batch is not None:
            self._batch_insert(position, removed, added)
            return
        if not self._apply(position, removed, added):
            self._resync()
            self.edits.append(Edit(0, -1, len(self.text)))  # everything may have changed
        del self.edits[:-64]
        self.changed.emit()

    def _apply(self, position: int, removed: int, added: int) -> bool:
        """Apply one change; False if it does not fit (the caller re-reads everything)."""
        expected = self.doc.characterCount() - 1  # UTF-16 units, without the final separator
        old_units = len(self.text) + len(self._astral)
        if expected - old_units != added - removed or position + removed > old_units:
            return False  # e.g. Qt counting the final block separator in a whole-text change
        new = self._read(position, added)
        start, end = self.python_index(position), self.python_index(position + removed)
        lo, hi = bisect_left(self._astral, position), bisect_left(self._astral, position + removed)
        shift = added - removed
        self._astral[lo:] = astral_offsets(new, position) + _shifted(self._astral[hi:], shift)
        self.text = self.text[:start] + new + self.text[end:]
        self.edits.append(Edit(start, end - start, len(new)))
        return len(self.text) + len(self._astral) == expected
