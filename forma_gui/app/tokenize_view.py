"""The Tokenize view: type text, watch it split into tokens, live.

Layout: a toolbar (toggles and counts) over a splitter holding the input editor
(`tokenInput`), the chip rendering (`tokenView`, see token_canvas) and the token table
(`tokenTable`); on the right, the selected token's details, its merge steps and (if that
view exists) the embedding row of the selected token.

Re-tokenization is debounced. Small inputs are encoded inline (a few ms); large ones go
to a LatestRunner, so a 1 MB paste never blocks the window and only the newest text's
result is ever shown. Every encode goes through `TokenizeView._segment`. For every
tokenizer that core.incremental can follow (byte-level BPE, SentencePiece BPE and unigram
.model files, llama.cpp's SentencePiece BPE, WordPiece and unigram) that builds an
IncrementalEncoder, which then follows the editor edit by edit (`_follow_edit`), so a
keystroke in a 1 MB document re-encodes only around itself. The others re-segment the whole
text in the worker, as columns (core.segment.segment_columns), not a Token object per token.

The token canvas and table follow the editor's caret (`_follow_caret`): a caret move, or an
edit once its tokens are in, scrolls them to the token at the caret when it is out of view.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import zlib
from bisect import bisect_left, bisect_right
from time import perf_counter
from typing import NamedTuple

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (QColor, QFont, QFontDatabase, QKeySequence, QPainter, QPen, QTextCharFormat,
                           QTextCursor)
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QHeaderView, QLabel,
                               QPlainTextEdit, QSizePolicy, QSplitter, QStyledItemDelegate,
                               QTableView, QTextEdit, QVBoxLayout, QWidget)

from forma_gui.app import configure_pyqtgraph
from forma_gui.app.item_models import Headed
from forma_gui.app.palette import hue_index, token_color
from forma_gui.app.row_table import RowPaintedTable
from forma_gui.app.text_mirror import TextMirror
from forma_gui.app.token_canvas import CONTROL_PICTURES, VISIBLE_WS, TokenCanvas, hex_bytes
from forma_gui.app.token_store import TokenStore
from forma_gui.core.slices import release
from forma_gui.app.workers import LatestRunner, gc_paused, mark_gui_busy
from forma_gui.core.chunked import encode_steps
from forma_gui.core.incremental import IncrementalEncoder, local_edits, supports_edits
from forma_gui.core.segment import segment_columns

#: item-data roles as plain ints: data() runs for every visible cell and role, and
#: comparing against the enum members costs ~1 µs each in PySide6
DISPLAY, DECORATION, ALIGNMENT, FONT, TOOLTIP, USER = (int(r) for r in (
    Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.DecorationRole, Qt.ItemDataRole.TextAlignmentRole,
    Qt.ItemDataRole.FontRole, Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.UserRole))
ALIGN_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

log = logging.getLogger(__name__)

#: what a new user sees first: prose with a contraction, code, CJK, ZWJ emoji, Cyrillic
DEFAULT_TEXT = (
    "Tokenizers don't see words: they see pieces. Here's how GPT-2 splits text.\n"
    "def greet(name: str) -> str:\n"
    "    return f\"Hello, {name}!\"  # 4 spaces, 1234567 digits\n"
    "東京は日本の首都です。\n"
    "Emoji: 👩‍💻 and 👨‍👩‍👧 are ZWJ sequences; ☕ costs 3€.\n"
    "Привет, мир! Токенизация.\n"
)

INLINE_CHARS = 8_000            # up to this many characters, encode on the GUI thread
DEBOUNCE_MS = 30
DEBOUNCE_LARGE_MS = 150         # a big document: wait for a pause in typing
FULL_PRETOKENIZE_CHARS = 200_000  # beyond this, merge steps pre-tokenize a window only
PRETOKEN_WINDOW = 4_096
MAX_TRACE_CHARS = 256           # a longer pre-token (no pre-tokenizer) is traced word by word
EMBEDDING_VIEW = "forma_gui.app.embedding_view:EmbeddingPanel"
LARGE_PASTE = 256 * 1024        # characters (or UTF-8 bytes); a bigger paste is inserted in slices
PASTE_CHUNK = 32 * 1024         # first slice; later ones are sized to take ~10 ms
REMOVE_CHUNK = 256 * 1024       # the same, for a big selection removed in slices (UTF-16 units)
PASTE_SLICE_SECONDS = 0.01
#: cuts of a word a unigram model's panel lists: its choice and the next best
CUTS_SHOWN = 6


def _mono_font() -> QFont:
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)


class TokenTableModel(Headed, QAbstractTableModel):
    """index, id, piece, bytes, span of each token; cells computed on demand."""

    HEADERS = ("#", "id", "piece", "bytes", "span")

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.tokens = TokenStore()
        self.mono_font = _mono_font()

    def set_tokens(self, tokens: TokenStore) -> None:
        self.beginResetModel()
        self.tokens = tokens
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt override
        return 0 if parent.isValid() else len(self.tokens)

    def cells(self, row: int) -> tuple[list[str], int]:
        """(every column's text, the token's id) of a row: what `TokenTable` paints."""
        tok = self.tokens[row]
        return [self._cell(row, tok, col) for col in range(len(self.HEADERS))], tok.id

    def data(self, index, role=DISPLAY):
        col = index.column()
        if role == DISPLAY:
            return self._cell(index.row(), self.tokens[index.row()], col)
        if role == FONT and col == 3:
            return self.mono_font
        if role == ALIGNMENT and col in (0, 1):
            return ALIGN_RIGHT
        if role == DECORATION and col == 1:
            return token_color(hue_index(self.tokens.ids[index.row()]))
        return None

    @staticmethod
    def _cell(row: int, tok, col: int) -> str:
        if col == 0:
            return str(row)
        if col == 1:
            return str(tok.id)
        if col == 2:
            return tok.piece.translate(CONTROL_PICTURES)
        if col == 3:
            return hex_bytes(tok.data)
        return f"{tok.start}–{tok.end}" + (" partial" if tok.partial else "")


class TokenTable(RowPaintedTable):
    """The token table: it paints its visible rows itself (`RowPaintedTable`), each from one
    `TokenTableModel.cells` call; through QTableView's own paint a 500 px table took ~13 ms
    per scroll step. The id column has the token's colour swatch, the bytes are monospaced."""

    right_columns = frozenset((0, 1))
    swatch_column = 1

    def row_texts(self, row: int) -> tuple[list[str], QColor | None, str | None]:
        cells, token_id = self.model().cells(row)
        return cells, token_color(hue_index(token_id)), None

    def column_fonts(self) -> dict[int, QFont]:
        return {3: self.model().mono_font}


#: the side panel's title for what explains a token (`Tokenizer.explains`)
EXPLAINER_TITLES = {"merges": "Merge steps", "cuts": "Segmentations", "matches": "Longest matches"}


class MergeStepsModel(QAbstractTableModel):
    """Rows: the pre-token's starting symbols, then one row per merge (BPE); or, for a model
    that picks the best-scoring cut of a word (unigram), its cut and the next best ones."""

    HEADERS = ("rank", "merge", "symbols")
    CUT_HEADERS = ("#", "score", "pieces")
    MATCH_HEADERS = ("#", "longest match", "pieces")

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[tuple[str, str, tuple[str, ...], int]] = []  # rank, merge, symbols, hot
        self.slots: dict[str, int] = {}  # symbol -> hue slot of its token id (as in the chips)
        self.headers = self.HEADERS

    def set_steps(self, steps: list, tokenizer=None) -> None:
        self._set_rows(_merge_rows(steps), self.HEADERS, tokenizer)

    def set_segmentations(self, alternatives: list, tokenizer=None, hot: int = -1) -> None:
        """Rows of `Tokenizer.segmentations`: the chosen cut (its `hot`-th piece outlined),
        then the others by score."""
        self._set_rows(_cut_rows(alternatives, hot), self.CUT_HEADERS, tokenizer)

    def set_matches(self, steps: list, tokenizer=None) -> None:
        """Rows of `Tokenizer.longest_matches`: each piece taken, the word's pieces so far."""
        self._set_rows(_match_rows(steps), self.MATCH_HEADERS, tokenizer)

    def clear(self, explains: str = "merges") -> None:
        """No rows, under the headers of what explains a token (`Tokenizer.explains`)."""
        headers = {"cuts": self.CUT_HEADERS, "matches": self.MATCH_HEADERS}.get(explains, self.HEADERS)
        self._set_rows([], headers, None)

    def _set_rows(self, rows: list, headers: tuple[str, ...], tokenizer) -> None:
        self.beginResetModel()
        self.rows, self.headers = rows, headers
        symbols = {sym for row in self.rows for sym in row[2]}
        self.slots = {sym: _symbol_slot(sym, tokenizer) for sym in symbols}
        self.endResetModel()
        self.headerDataChanged.emit(Qt.Orientation.Horizontal, 0, 2)  # (the titles may have changed)

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else 3

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation == Qt.Orientation.Horizontal and role == DISPLAY:
            return self.headers[section]
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        rank, merge, symbols, hot = self.rows[index.row()]
        if role == DISPLAY:
            return (rank, merge, " ".join(symbols))[index.column()]
        if role == USER:
            return symbols, hot, self.slots
        if role == TOOLTIP and index.column() == 2:  # the whole list, which the chips may elide
            return " ".join(symbols)
        if role == ALIGNMENT and index.column() == 0:
            return ALIGN_RIGHT
        return None


def _symbol_slot(symbol: str, tokenizer) -> int:
    """The colour slot of a merge symbol: its token's, so it matches the chips."""
    token_id = tokenizer.id_of(symbol) if tokenizer is not None else None
    return hue_index(token_id if token_id is not None else zlib.crc32(symbol.encode()))


def _merge_rows(steps: list) -> list[tuple[str, str, tuple[str, ...], int]]:
    """Table rows for a list of MergeStep: the initial symbols, then each merge."""
    if not steps:
        return []
    first = steps[0]
    initial = first.symbols[:first.position] + (first.left, first.right) + first.symbols[first.position + 1:]
    rows = [("", "start", tuple(initial), -1)]
    for step in steps:
        rows.append((str(step.rank), f"{step.left} + {step.right}", tuple(step.symbols), step.position))
    return rows


def _cut_rows(alternatives: list, hot: int = -1) -> list[tuple[str, str, tuple[str, ...], int]]:
    """Table rows for `Tokenizer.segmentations`: "chosen" or the rank, the summed score (and
    how far below the chosen cut), the pieces (the chosen cut's `hot`-th one outlined)."""
    if not alternatives:
        return []
    best = alternatives[0].score
    rows = []
    for k, a in enumerate(alternatives):
        score = f"{a.score:.3f}" if a.chosen else f"{a.score:.3f} ({a.score - best:+.3f})"
        rows.append(("chosen" if a.chosen else str(k + 1), score, a.pieces, hot if a.chosen else -1))
    return rows


def _match_rows(steps: list) -> list[tuple[str, str, tuple[str, ...], int]]:
    """Table rows for `Tokenizer.longest_matches`: the step, the piece taken (or where none
    was found), the word's pieces so far and the rest of it, the new piece outlined."""
    rows: list[tuple[str, str, tuple[str, ...], int]] = []
    taken: list[str] = []
    word = None
    for k, step in enumerate(steps, 1):
        if step.word != word or step.start == 0:
            word, taken = step.word, []
        data = step.word.encode("utf-8", "surrogatepass")
        if step.token_id < 0:
            rows.append((str(k), f"none at byte {step.start}: the word is {step.piece}", (step.piece,), 0))
            continue
        taken.append(step.piece)
        rest = data[step.end:].decode("utf-8", "surrogatepass")
        rows.append((str(k), step.piece, tuple(taken) + ((rest,) if rest else ()), len(taken) - 1))
    return rows


class SymbolsDelegate(QStyledItemDelegate):
    """Draws a symbol list as small chips, the just-merged symbol emphasised."""

    def paint(self, painter: QPainter, option, index) -> None:
        if index.column() != 2:
            super().paint(painter, option, index)
            return
        symbols, hot, slots = index.data(Qt.ItemDataRole.UserRole)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = option.fontMetrics
        x, rect = option.rect.left() + 4.0, option.rect
        for i, sym in enumerate(symbols):
            w = fm.horizontalAdvance(sym) + 8.0
            if x + w > rect.right():
                painter.setPen(option.palette.text().color())
                painter.drawText(QRectF(x, rect.top(), 20, rect.height()), Qt.AlignmentFlag.AlignVCenter, "…")
                break
            chip = QRectF(x, rect.top() + 3, w, rect.height() - 6)
            painter.setBrush(token_color(slots[sym], 0))
            painter.setPen(QPen(option.palette.text().color(), 1.5) if i == hot else Qt.PenStyle.NoPen)
            painter.drawRoundedRect(chip, 3, 3)
            painter.setPen(Qt.GlobalColor.black)
            painter.drawText(chip, Qt.AlignmentFlag.AlignCenter, sym)
            x += w + 3
        painter.restore()


class PasteSource:
    """The text of a big paste, handed out a slice at a time.

    Either a str, or the clipboard's UTF-8 bytes, decoded slice by slice: converting a
    10 MB clipboard text to a Python str in one call (QMimeData.text()) blocks the GUI
    thread for over 100 ms; a slice never splits a character or a CRLF pair.
    """

    def __init__(self, data: str | memoryview) -> None:
        self.data = data
        self.is_text = isinstance(data, str)

    @classmethod
    def from_mime(cls, source) -> "PasteSource":
        """The mime data's text: its UTF-8 bytes when it has them plainly, else text()."""
        raw = source.data("text/plain")
        view = memoryview(raw)  # no copy; keeps `raw` alive
        if not view.nbytes or bytes(view[:4]).startswith(BOMS):
            return cls(source.text())
        return cls(view)

    def __len__(self) -> int:
        return len(self.data) if self.is_text else self.data.nbytes

    def take(self, start: int, size: int) -> tuple[str, int]:
        """(the text from `start` on, about `size` long; where it ends)."""
        data, n = self.data, len(self)
        end = min(n, start + max(size, 1))
        if not self.is_text:
            while start < end < n and data[end] & 0xC0 == 0x80:  # inside a character: back off
                end -= 1
            while end == start or (end < n and data[end] & 0xC0 == 0x80):  # or take it whole
                end += 1
        if end < n and data[end - 1] in CR and data[end] in LF:  # Qt makes CRLF one newline
            end += 1
        bom = ZWNBSP if self.is_text else ZWNBSP_UTF8
        while data[end:end + len(bom)] == bom:  # Qt drops U+FEFF from the start of an insertion
            end += len(bom)
        piece = data[start:end] if self.is_text else str(data[start:end], "utf-8", "replace")
        return piece, end


BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")
ZWNBSP, ZWNBSP_UTF8 = "\ufeff", b"\xef\xbb\xbf"
CR = ("\r", 13)
LF = ("\n", 10)


class _Replacing(NamedTuple):
    """A selection being replaced in slices (`TokenInput.paste_in_slices`)."""

    cursor: QTextCursor
    source: "PasteSource"
    done: int       # of the source, inserted
    left: int       # UTF-16 units of the selection still to remove, at the cursor
    removing: int   # units of the selection at first (0: removed at once, or none)
    first: bool     # the next slice opens the undo step (later ones join it)


def _next_size(size: int, took: float, most: int) -> int:
    """The next slice's size: the one that would take PASTE_SLICE_SECONDS at this one's pace,
    at most double this one and `most`, at least 16384."""
    return int(min(max(size * PASTE_SLICE_SECONDS / max(took, 1e-4), 16384), 2 * size, most))


def _low_surrogate(char: str) -> bool:
    return "\udc00" <= char[:1] <= "\udfff"


class TokenInput(QPlainTextEdit):
    """The input editor.

    A dropped file goes to the window (to open it), not into the text. A huge paste is
    inserted in slices of ~10 ms, one per event-loop turn, as a single undo step, so a
    10 MB paste never blocks the window (Qt inserts 1 MB in ~150 ms in one go); a huge
    selection that a paste, Delete, Backspace or a typed character replaces is removed in
    slices first.
    """

    paste_progressed = Signal(float)  # fraction inserted; 1.0 when done

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.mirror = TextMirror(self.document(), self)
        self._paste: _Replacing | None = None
        self._chunk, self._cut = PASTE_CHUNK, REMOVE_CHUNK

    @property
    def pasting(self) -> bool:
        return self._paste is not None

    @property
    def replacing(self) -> str:
        """What the sliced replacement does, for a progress line: "pasting", or "deleting"
        when it inserts nothing."""
        return "deleting" if self._paste is not None and not len(self._paste.source) else "pasting"

    def insertFromMimeData(self, source) -> None:  # noqa: N802 - Qt override
        if source.hasText() and not source.hasUrls():
            text = PasteSource.from_mime(source)
            if len(text) > LARGE_PASTE:
                self.paste_in_slices(text)
                return
        super().insertFromMimeData(source)

    def paste_in_slices(self, text: str | PasteSource) -> None:
        """Replace the selection with `text`, a slice per event-loop turn: a selection of
        over LARGE_PASTE characters is removed a slice at a time too (Qt removes a 10 MB one
        in ~125 ms in one go), all of it one undo step."""
        source = text if isinstance(text, PasteSource) else PasteSource(text)
        cursor = self.textCursor()
        start, left = cursor.selectionStart(), cursor.selectionEnd() - cursor.selectionStart()
        if left > LARGE_PASTE:
            cursor.setPosition(start)
            self._paste = _Replacing(cursor, source, 0, left, left, True)
        else:  # removed at once; the insertion joins that step (or opens one: no selection)
            if left:
                cursor.beginEditBlock()
                cursor.removeSelectedText()
                cursor.endEditBlock()
            self._paste = _Replacing(cursor, source, 0, 0, 0, not left)
        self._chunk, self._cut = PASTE_CHUNK, REMOVE_CHUNK
        self.setReadOnly(True)  # typing into a half-inserted paste would interleave
        self.mirror.begin_batch()  # one splice at the end instead of a copy per slice
        QTimer.singleShot(0, self._paste_slice)

    def _paste_slice(self) -> None:
        cursor, source, done, left, removing, first = self._paste
        mark_gui_busy()  # a worker meanwhile waits for this slice (see workers)
        started = perf_counter()
        if first:
            cursor.beginEditBlock()
        else:
            cursor.joinPreviousEditBlock()
        cutting = bool(left)
        if cutting:  # the selection's next slice, from its start
            n = min(left, self._cut)
            position = cursor.position()
            if n < left and _low_surrogate(self.document().characterAt(position + n)):
                n += 1  # (never between the two halves of an astral character)
            cursor.setPosition(position + n, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            left -= n
        else:
            piece, done = source.take(done, self._chunk)
            cursor.insertText(piece)
        cursor.endEditBlock()
        took = perf_counter() - started
        # aim at PASTE_SLICE_SECONDS, but never more than double: one fast slice says little
        if cutting:
            self._cut = _next_size(self._cut, took, REMOVE_CHUNK << 4)
        else:
            self._chunk = _next_size(self._chunk, took, 1 << 19)
        self._paste = _Replacing(cursor, source, done, left, removing, False)
        if left or done < len(source):
            self.paste_progressed.emit((removing - left + done) / (removing + len(source)))
            QTimer.singleShot(0, self._paste_slice)
        else:  # the mirror's one splice of the whole text gets an event-loop turn of its own
            QTimer.singleShot(0, self._end_paste)

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Delete, Backspace or a typed character over a selection of over LARGE_PASTE
        characters replaces it in slices (`paste_in_slices`), not in one ~125 ms call."""
        cursor, typed = self.textCursor(), event.text()
        if (not self.isReadOnly() and cursor.selectionEnd() - cursor.selectionStart() > LARGE_PASTE
                and not event.matches(QKeySequence.StandardKey.Cut)  # (Shift+Delete: Qt's cut)
                and (event.key() in (Qt.Key.Key_Delete, Qt.Key.Key_Backspace)
                     or typed and typed.isprintable())):
            self.paste_in_slices(typed if typed.isprintable() else "")
            event.accept()
            return
        super().keyPressEvent(event)

    def _end_paste(self) -> None:
        cursor = self._paste[0]
        self._paste = None
        self.setReadOnly(False)
        self.setTextCursor(cursor)
        self.mirror.end_batch()
        self.paste_progressed.emit(1.0)

    def _is_file_drop(self, event) -> bool:
        mime = event.mimeData()
        return mime.hasUrls() and any(u.isLocalFile() for u in mime.urls())

    def dragEnterEvent(self, event) -> None:  # noqa: N802 - Qt override
        if self._is_file_drop(event):
            event.ignore()
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        if self._is_file_drop(event):
            event.ignore()
        else:
            super().dragMoveEvent(event)

    def dropEvent(self, event) -> None:  # noqa: N802 - Qt override
        if self._is_file_drop(event):
            event.ignore()
        else:
            super().dropEvent(event)


class TokenizeView(QWidget):
    """Input editor, live segmentation, token table and merge steps for one Session."""

    def __init__(self, session, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("tokenizeView")
        self.session = session
        self.text = ""
        self.tokens = TokenStore()
        self.tokenizer = None          # the tokenizer `tokens` came from
        self.selected_index: int | None = None
        self.special = False
        self._generation = 0
        self._pretokens: list[tuple[int, int]] | None = None
        self._emitting = False
        self._embedding = None          # the panel; False when its module is missing
        self._live: IncrementalEncoder | None = None  # tokens of mirror.text, kept edit by edit
        # what the live encoder's edits since the tokens shown changed (a Splice), for the canvas
        self._changed = None
        self._embedding_box: QWidget | None = None
        self._caret_pending = False  # the caret moved while the tokens lagged behind the text
        self._runner = LatestRunner(self)
        self._runner.finished.connect(self._on_result)
        self._runner.failed.connect(self._on_failure)
        self._runner.progressed.connect(self._on_progress)
        self._debounce = QTimer(self, singleShot=True, timeout=self._retokenize)
        self._build()
        session.tokenizer_changed.connect(self._on_tokenizer_changed)
        session.token_selected.connect(self._on_token_selected)
        session.weights_changed.connect(self._on_weights_changed)
        self.editor.setPlainText(session.text or DEFAULT_TEXT)
        if session.tokenizer is not None:
            self._on_tokenizer_changed(session.tokenizer)

    # ---- construction -----------------------------------------------------------------
    def _build(self) -> None:
        self.editor = TokenInput(self)
        self.editor.setObjectName("tokenInput")
        self.editor.setPlaceholderText("Type or paste text to tokenize…")
        font = self.editor.font()
        font.setPointSizeF(font.pointSizeF() + 1.5)
        self.editor.setFont(font)
        self.mirror = self.editor.mirror
        self.mirror.changed.connect(self._follow_edit)
        self.mirror.changed.connect(self._schedule)
        self.editor.cursorPositionChanged.connect(self._on_caret_moved)
        self.editor.paste_progressed.connect(self._on_paste_progress)
        self.canvas = TokenCanvas(self)
        self.canvas.token_clicked.connect(self.select_index)
        self.model = TokenTableModel(self)
        self.table = self._make_table("tokenTable", self.model, stretch=3, kind=TokenTable)
        for col, width in enumerate((64, 90, 220)):
            self.table.horizontalHeader().resizeSection(col, width)
        # the span column holds a 10 MB document's offsets whole ("500016–500022" was elided)
        self.table.horizontalHeader().resizeSection(
            4, self.table.fontMetrics().horizontalAdvance("00000000–00000000") + 16)
        self.table.clicked.connect(lambda index: self.select_index(index.row()))
        self.table.activated.connect(lambda index: self.select_index(index.row()))

        left = QSplitter(Qt.Orientation.Vertical, self)
        left.setChildrenCollapsible(False)
        hints = {"Tokens": "click a token to see how it was built · dashed: bytes of a split character"}
        for widget, label in ((self.editor, "Text"), (self.canvas, "Tokens"), (self.table, "Table")):
            left.addWidget(_titled(label, widget, self, hints.get(label, "")))
        left.setStretchFactor(0, 2)
        left.setStretchFactor(1, 4)
        left.setStretchFactor(2, 2)

        main = QSplitter(Qt.Orientation.Horizontal, self)
        main.addWidget(left)
        main.addWidget(self._build_side())
        main.setStretchFactor(0, 3)
        main.setStretchFactor(1, 1)
        main.setSizes([900, 340])

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(4)
        layout.addLayout(self._build_toolbar())
        layout.addWidget(main, 1)

    def _build_toolbar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.stored_box = self._toggle("showStored", "Pieces as stored",
                                       "Show vocabulary strings as stored (Ġ, Ċ, ▁, <0xNN>) instead of text",
                                       lambda on: self.canvas.set_options(as_stored=on))
        self.ws_box = self._toggle("showWhitespace", "Visible whitespace",
                                   "Draw spaces as ·, tabs as ⇥ and newlines as ↵",
                                   lambda on: self.canvas.set_options(visible_ws=on))
        self.ids_box = self._toggle("showIds", "Show ids", "Print each token's id under it",
                                    lambda on: self.canvas.set_options(show_ids=on))
        self.special_box = self._toggle("matchSpecial", "Match special tokens",
                                        "Treat special-token strings such as <|endoftext|> as "
                                        "special tokens instead of plain text.\nAdded tokens not "
                                        "marked special (such as Qwen's <think>) match either "
                                        "way, as in HF tokenizers.", self._set_special)
        for box in (self.stored_box, self.ws_box, self.ids_box, self.special_box):
            bar.addWidget(box)
        bar.addStretch(1)
        self.stats = QLabel(self)
        self.stats.setObjectName("tokenStats")
        self.stats.setTextFormat(Qt.TextFormat.RichText)
        bar.addWidget(self.stats)
        return bar

    def _toggle(self, name: str, text: str, tip: str, slot) -> QCheckBox:
        box = QCheckBox(text, self)
        box.setObjectName(name)
        box.setToolTip(tip)
        box.toggled.connect(slot)
        return box

    def _build_side(self) -> QWidget:
        side = QWidget(self)
        side.setMinimumWidth(260)
        layout = QVBoxLayout(side)
        layout.setContentsMargins(0, 0, 0, 0)
        self.details = QLabel(side)
        self.details.setObjectName("tokenDetails")
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setWordWrap(True)
        self.details.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setText(_hint("Click a token to see its bytes and how it was built."))
        self.details.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        layout.addWidget(_titled("Selected token", self.details, side))
        self.merge_note = QLabel(side)
        self.merge_note.setWordWrap(True)
        self.merge_note.setTextFormat(Qt.TextFormat.RichText)
        self.merge_model = MergeStepsModel(self)
        self.merge_table = self._make_table("mergeSteps", self.merge_model, stretch=2)
        self.merge_table.setItemDelegate(SymbolsDelegate(self.merge_table))
        merges = QWidget(side)
        box = QVBoxLayout(merges)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.merge_note)
        box.addWidget(self.merge_table, 1)
        self.side_split = QSplitter(Qt.Orientation.Vertical, side)
        self.merge_box = _titled(EXPLAINER_TITLES["merges"], merges, side)
        self.side_split.addWidget(self.merge_box)
        layout.addWidget(self.side_split, 1)
        return side

    def _make_table(self, name: str, model, stretch: int, kind: type[QTableView] = QTableView) -> QTableView:
        table = kind(self)
        table.setObjectName(name)
        table.setModel(model)
        table.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QTableView.SelectionMode.SingleSelection)
        table.setAlternatingRowColors(True)
        table.setWordWrap(False)
        table.verticalHeader().hide()
        rows = table.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(table.fontMetrics().height() + 8)
        header = table.horizontalHeader()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
        header.setHighlightSections(False)
        return table

    # ---- tokenization -------------------------------------------------------------------
    def _tokenize(self, text: str) -> list:
        """The one place text becomes tokens (runs on the GUI thread or a worker)."""
        return self.session.tokenizer.segment(text, special=self.special)

    def _segment(self, text: str, tokenizer) -> TokenStore | IncrementalEncoder:
        """_tokenize, packed into arrays; the GC is paused while the Token objects exist.

        A tokenizer that can re-encode edits locally gets an IncrementalEncoder instead,
        which _apply keeps for the edits that follow (see _follow_edit). One that computes
        segment()'s columns itself (llama.cpp's and SentencePiece's: core.segment.
        segment_columns) fills the store without a Token object per token (a 1 MB document
        with a Llama-2 GGUF, before its edits were local, re-segmented so in ~0.15 s after
        every keystroke instead of ~1.5 s).
        """
        if local_edits(tokenizer, self.special):
            return IncrementalEncoder(tokenizer, text, special=self.special)
        columns = segment_columns(tokenizer, text, self.special)
        if columns is not None:
            return TokenStore.from_columns(tokenizer, *columns, copy=False)
        with gc_paused():
            tokens = self._tokenize(text)
            store = TokenStore.from_tokens(tokens, tokenizer)
            release(tokens)
            return store

    def _segment_steps(self, text: str, tokenizer, special: bool):
        """_segment for the worker: a generator yielding progress between slices of the text.

        One encode of 10 MB would hold the GIL for seconds at a time (the window freezes)
        and could not be stopped; in slices every step is short, and the worker stops at the
        next one when a newer edit supersedes the text. The copy of the columns the view
        shows is made here too (5 million tokens: ~80 ms), and the GC waits meanwhile (a
        full pass over the tokenizer's grown caches holds the GIL for ~50 ms).
        """
        if not supports_edits(tokenizer, special):
            return self._segment(text, tokenizer)
        with gc_paused():
            encoder = yield from encode_steps(tokenizer, text, special=special)
            return Encoded(encoder, _store_of(encoder))

    def _schedule(self) -> None:
        if self.editor.pasting:
            return  # the last slice schedules the one re-tokenization
        # a big document waits for a pause in typing, unless the live encoder has the edit
        slow = len(self.mirror.text) > INLINE_CHARS and self._live is None
        self._debounce.start(DEBOUNCE_LARGE_MS if slow else DEBOUNCE_MS)

    def _on_paste_progress(self, fraction: float) -> None:
        if fraction < 1.0:
            self.stats.setText(f"{self.editor.replacing}… {fraction:.0%}")
        else:
            self._schedule()

    def _retokenize(self) -> None:
        """Encode the editor's text now: inline when small, else in the worker."""
        self._debounce.stop()
        text = self.mirror.text
        self.session.set_text(text)
        self._generation += 1
        tokenizer = self.session.tokenizer
        if tokenizer is None:
            self._apply(text, TokenStore(), None)
            return
        live = self._live
        if live is not None and live.tokenizer is tokenizer and live.special == self.special:
            self._runner.cancel()
            self._apply(text, live, tokenizer)  # every edit is in it already: nothing to encode
            return
        if len(text) <= INLINE_CHARS:
            self._runner.cancel()
            try:
                tokens = self._segment(text, tokenizer)
            except Exception as e:  # noqa: BLE001 - a tokenizer bug must not take the view down
                self._on_failure(None, e)
                return
            self._apply(text, tokens, tokenizer)
            return
        self._set_stats_busy(len(text))
        self._runner.submit(self._segment_steps, text, tokenizer, self.special,
                            tag=(self._generation, text, tokenizer))

    def _on_result(self, tag, tokens: TokenStore) -> None:
        generation, text, tokenizer = tag
        if generation == self._generation:
            self._apply(text, tokens, tokenizer)

    def _on_failure(self, _tag, error: BaseException) -> None:
        log.error("tokenization failed: %s", getattr(error, "__traceback_text__", error))
        self.stats.setText(f"<span style='color:#c0392b'>tokenizer error: {_esc(str(error))}</span>")

    def _follow_edit(self) -> None:
        """Apply the editor's latest edit to the live encoder now (well under a millisecond).

        The encoder is dropped, and the next re-tokenization encodes afresh (in the worker for
        a large document), when the edit is unknown (the mirror re-read the document), too big
        to re-encode on the GUI thread, or not local (EditNotLocal: e.g. it made an NFC
        tokenizer's text not NFC, or it falls in a long run without a cut).
        """
        edits, live = self.mirror.edits[:], self._live
        self.mirror.edits.clear()  # this view is their only reader
        if live is None:
            return
        edit = edits[0] if len(edits) == 1 else None
        if edit is None or edit.removed < 0 or max(edit.removed, edit.added) > INLINE_CHARS:
            self._live = self._changed = None
            return
        try:
            live.apply_edit(edit.start, edit.removed, self.mirror.text[edit.start:edit.start + edit.added],
                            local_only=True)
        except ValueError:  # out of step with the editor, or EditNotLocal: the worker re-encodes
            self._live = self._changed = None
            return
        if live.n_chars != len(self.mirror.text):
            self._live = self._changed = None
            return
        self._changed = live.last_splice if self._changed is None else self._changed.then(live.last_splice)

    def _apply(self, text: str, tokens: TokenStore | IncrementalEncoder | Encoded, tokenizer) -> None:
        # the live encoder's own tokens after its edits: the canvas keeps the rest of its layout
        # by their splice (else it compares the two segmentations token by token)
        changed = self._changed if tokens is self._live and tokens is not None else None
        self._live = self._changed = None
        if isinstance(tokens, IncrementalEncoder):
            tokens = Encoded(tokens, _store_of(tokens))
        if isinstance(tokens, Encoded):
            if text is self.mirror.text:  # the same str object: no edit since it was encoded
                self._live = tokens.encoder
            tokens = tokens.store
        self.text, self.tokens, self.tokenizer = text, tokens, tokenizer
        self.selected_index = None
        self._pretokens = None
        self.model.set_tokens(tokens)
        self.canvas.set_segmentation(text, tokens, changed)
        self.canvas.set_highlight_id(self.session.selected_token)
        self.editor.setExtraSelections([])
        self._update_stats()
        if self._caret_pending:
            self._follow_caret()

    def _on_caret_moved(self) -> None:
        """The user typed or moved in the text: the token panes follow the caret (now, or
        once the tokens have caught up with the text)."""
        if self.editor.pasting:
            return
        self._caret_pending = True
        if self.mirror.text is self.text:
            self._follow_caret()

    def _follow_caret(self) -> None:
        """Scroll the token canvas and table to the token at the caret (when it is out of
        view: typing inside what is shown scrolls nothing)."""
        self._caret_pending = False
        n = len(self.tokens)
        if not n or self.mirror.text is not self.text:
            return
        at = self.mirror.python_index(self.editor.textCursor().position())
        k = max(0, min(n - 1, bisect_right(self.tokens.starts, at) - 1))
        self.canvas.scroll_to_token(k)
        self.table.scrollTo(self.model.index(k, 0))

    def _update_stats(self) -> None:
        if self.session.tokenizer is None:
            self.stats.setText("<span style='color:gray'>waiting for a tokenizer…</span>")
            return
        n, chars = len(self.tokens), len(self.text)
        per = f"{chars / n:.2f}" if n else "–"
        nbytes = self.tokens.nbytes
        extra = ""
        sel = self.session.selected_token
        if sel is not None and n:
            count = self.tokens.count_id(sel)
            extra = f" &nbsp;·&nbsp; id {sel} occurs {count}×"
        self.stats.setText(f"<b>{n:,}</b> tokens &nbsp;·&nbsp; {chars:,} chars &nbsp;·&nbsp; "
                           f"{nbytes:,} bytes &nbsp;·&nbsp; <b>{per}</b> chars/token{extra}")

    def _set_stats_busy(self, chars: int) -> None:
        self.stats.setText(f"tokenizing {chars:,} chars…")

    def _on_progress(self, fraction: float) -> None:
        if fraction >= 0 and self._runner.busy:
            self.stats.setText(f"tokenizing {len(self.mirror.text):,} chars… {fraction:.0%}")

    def _set_special(self, on: bool) -> None:
        self.special = on
        self._retokenize()

    def _on_tokenizer_changed(self, tokenizer) -> None:
        # an empty panel already titled as the model explains its tokens
        explains = getattr(tokenizer, "explains", "merges")
        self.merge_model.clear(explains)
        self._show_merge_table("", EXPLAINER_TITLES.get(explains, EXPLAINER_TITLES["merges"]))
        self.details.setText(_hint("Click a token to see its bytes and how it was built."))
        self._retokenize()

    # ---- selection ------------------------------------------------------------------------
    def select_index(self, k: int) -> None:
        """Select token k: highlight it everywhere, show its merges, tell the session."""
        if not 0 <= k < len(self.tokens):
            return
        self.selected_index = k
        tok = self.tokens[k]
        self.canvas.set_selected(k)
        self._select_table_row(k)
        self._highlight_span(tok)
        self._show_details(tok, k)
        self._show_merges(tok)
        self._emitting = True
        try:
            self.session.select_token(tok.id)
        finally:
            self._emitting = False

    def _select_table_row(self, k: int) -> None:
        index = self.model.index(k, 0)
        self.table.selectionModel().blockSignals(True)
        self.table.selectRow(k)
        self.table.selectionModel().blockSignals(False)
        self.table.scrollTo(index)

    def _highlight_span(self, tok) -> None:
        doc_len = self.editor.document().characterCount() - 1
        if tok.end > doc_len or self.mirror.text != self.text:
            return  # the editor moved on; the next result will be in sync
        cursor = QTextCursor(self.editor.document())
        cursor.setPosition(_qt_pos(self.text, tok.start))
        cursor.setPosition(_qt_pos(self.text, tok.end), QTextCursor.MoveMode.KeepAnchor)
        selection = QTextEdit.ExtraSelection()
        selection.cursor = cursor
        fmt = QTextCharFormat()
        fmt.setBackground(token_color(hue_index(tok.id), 1))
        selection.format = fmt
        self.editor.setExtraSelections([selection])
        caret = QTextCursor(self.editor.document())
        caret.setPosition(cursor.selectionStart())
        self.editor.blockSignals(True)
        self.editor.setTextCursor(caret)
        self.editor.blockSignals(False)
        self.editor.ensureCursorVisible()

    def _show_details(self, tok, k: int | None) -> None:
        tokenizer = self.session.tokenizer
        kind = tokenizer.token_type(tok.id) if tokenizer is not None else ""
        score = tokenizer.token_score(tok.id) if tokenizer is not None else None
        rows = [("id", f"<b>{tok.id}</b>"), ("piece", f"<code>{_esc(tok.piece)}</code>"),
                ("bytes", f"<code>{hex_bytes(tok.data) or '—'}</code>"),
                ("text", f"<code>{_esc(_show_bytes(tok.data))}</code>"), ("type", kind)]
        if score is not None:
            rows.append(("score" if tokenizer.piece_style == "sentencepiece" else "rank", f"{score:g}"))
        if k is not None:
            rows.insert(0, ("token", f"#{k} of {len(self.tokens):,}"))
            rows.append(("chars", f"{tok.start}–{tok.end}" + (" (partial character)" if tok.partial else "")))
        body = "".join(f"<tr><td style='color:gray;padding-right:8px'>{a}</td><td>{b}</td></tr>"
                       for a, b in rows)
        self.details.setText(f"<table>{body}</table>")

    def _show_merges(self, tok) -> None:
        tokenizer = self.session.tokenizer
        if tokenizer is None or tok.special:
            self._set_merges([], "A special token is matched whole; no merges.")
            return
        span = self._pretoken_of(tok)
        word = self.text[span[0]:span[1]] if span else ""
        # the whitespace-delimited word: what a unigram model cuts (its pieces never cross a
        # space) and WordPiece matches, and what is traced when the pre-token is too long
        around = _word_around(self.text, tok.start, tok.end)
        own = self.text[around]
        narrowed = len(word) > MAX_TRACE_CHARS
        if narrowed:  # no pre-tokenizer (SentencePiece): trace the word around the token
            word = own
        try:
            steps, cuts, matches = _how_built(tokenizer, word, own)
        except Exception as e:  # noqa: BLE001 - show the problem, keep the view alive
            self._set_merges([], f"merge steps failed: {_esc(str(e))}")
            return
        if cuts:
            self._show_cuts(cuts, own, self._piece_in_cut(cuts[0].ids, around.start))
            return
        if matches:
            self._show_matches(matches, own)
            return
        shown = _show_ws(word)
        what = "word" if narrowed else "pre-token"
        if steps:
            note = f"{what} <code>{shown}</code>: {len(steps)} merge{'s' * (len(steps) != 1)}"
        else:
            note = f"{what} <code>{shown}</code>: no merges ({_esc(tokenizer.kind)})"
        self._set_merges(steps, note)

    def _set_merges(self, steps: list, note: str) -> None:
        self.merge_model.set_steps(steps, self.session.tokenizer)
        self._show_merge_table(note)

    def _show_cuts(self, cuts: list, word: str, hot: int = -1) -> None:
        """A unigram token's word: the cut encoding picked (its `hot`-th piece outlined) and
        the next best ones."""
        tokenizer = self.session.tokenizer
        others = len(cuts) - 1
        note = (f"word <code>{_show_ws(word)}</code>: the cut {_esc(tokenizer.kind)} scores best"
                + (f", then the next {others}, by the sum of their pieces' scores" if others
                   else ", the only one"))
        self.merge_model.set_segmentations(cuts, tokenizer, hot)
        self._show_merge_table(note, EXPLAINER_TITLES["cuts"])

    def _show_matches(self, steps: list, word: str) -> None:
        """A WordPiece token's word: each piece greedy longest-match took."""
        tokenizer = self.session.tokenizer
        taken = sum(step.token_id >= 0 for step in steps)
        parts = [f"{taken} piece{'s' * (taken != 1)}, each the longest the vocabulary has at the start of "
                 f"what is left"] if taken else []
        parts += [f"no piece starts at byte {step.start} of {_show_ws(step.word)}: that word is {_esc(step.piece)}"
                  for step in steps if step.token_id < 0]
        note = f"word <code>{_show_ws(word)}</code>: {'; '.join(parts)} ({_esc(tokenizer.kind)})"
        self.merge_model.set_matches(steps, tokenizer)
        self._show_merge_table(note, EXPLAINER_TITLES["matches"])

    def _piece_in_cut(self, chosen: tuple[int, ...], start: int) -> int:
        """The selected token's place in the chosen cut of the word from `start` in the text,
        when the word's tokens in the text are that cut, else -1."""
        first, k = bisect_left(self.tokens.starts, start), self.selected_index
        if k is None or not first <= k < first + len(chosen):
            return -1
        return k - first if tuple(self.tokens.ids[first:first + len(chosen)]) == chosen else -1

    def _show_merge_table(self, note: str, title: str = EXPLAINER_TITLES["merges"]) -> None:
        self.merge_box.caption.setText(f"<b>{_esc(title)}</b>")
        self.merge_note.setText(note)
        self.merge_table.resizeColumnToContents(0)
        self.merge_table.resizeColumnToContents(1)

    def _pretoken_of(self, tok) -> tuple[int, int] | None:
        """The pre-token span (characters) that contains token `tok`."""
        tokenizer, text = self.session.tokenizer, self.text
        if len(text) <= FULL_PRETOKENIZE_CHARS:
            if self._pretokens is None:
                self._pretokens = tokenizer.pre_tokenize(text)
            spans, lo, hi = self._pretokens, 0, len(text)
        else:  # a window: pre-token boundaries re-synchronise within a few characters
            lo = max(0, tok.start - PRETOKEN_WINDOW)
            hi = min(len(text), tok.end + PRETOKEN_WINDOW)
            spans = [(a + lo, b + lo) for a, b in tokenizer.pre_tokenize(text[lo:hi])]
        i = bisect_right(spans, (tok.start, len(text) + 1)) - 1
        if i >= 0 and spans[i][0] <= tok.start < spans[i][1]:
            return spans[i]
        return None

    def _on_token_selected(self, token_id: int) -> None:
        """Another view picked a token: outline its occurrences and show its details."""
        self.canvas.set_highlight_id(token_id)
        self._update_stats()
        if self.session.weights is not None:
            self._ensure_embedding()
        if self._emitting or self.session.tokenizer is None:
            return
        start = 0 if self.selected_index is None else self.selected_index + 1
        k = self.tokens.find_id(token_id, start)
        if k is None and start:
            k = self.tokens.find_id(token_id)  # wrap around
        if k is not None:
            self.selected_index = k
            self.canvas.set_selected(k)
            self._select_table_row(k)
            self._highlight_span(self.tokens[k])
        self._show_vocab_token(token_id)

    def _show_vocab_token(self, token_id: int) -> None:
        """Details and merge steps of a vocabulary entry picked in another view."""
        from forma_gui.core.tokenizer import Token

        tokenizer = self.session.tokenizer
        data = tokenizer.token_bytes(token_id)
        tok = Token(token_id, tokenizer.piece(token_id), data, 0, 0)
        self._show_details(tok, None)
        word = data.decode("utf-8", "replace")
        try:
            steps, cuts, matches = _how_built(tokenizer, word, word)
        except Exception:  # noqa: BLE001
            steps, cuts, matches = [], [], []
        if cuts:  # (whether encoding its text alone gives this piece, and what else is close)
            chosen = cuts[0].ids
            self._show_cuts(cuts, word, chosen.index(token_id) if token_id in chosen else -1)
            return
        if matches:
            self._show_matches(matches, word)
            return
        self._set_merges(steps, f"how <code>{_esc(word)}</code> is built" if steps
                         else f"no merges ({_esc(tokenizer.kind)})")

    # ---- the embedding panel (another helper's view), shown while weights are open ----------
    def _on_weights_changed(self, weights) -> None:
        """Build the panel on first need: its import (pyqtgraph) is too slow for launch, and
        building it (~40 ms) waits until this view is shown, or at least for a turn of the
        event loop of its own, not on top of every other view's reaction to the file."""
        if weights is not None and self._embedding is None and self.isVisible():
            QTimer.singleShot(0, self, self._ensure_embedding)
        if self._embedding_box is not None:
            self._embedding_box.setVisible(weights is not None)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if self.session.weights is not None and self._embedding is None:
            QTimer.singleShot(0, self, self._ensure_embedding)

    def _ensure_embedding(self) -> None:
        if self._embedding is not None or self.session.weights is None:
            return
        module_name, class_name = EMBEDDING_VIEW.split(":")
        try:
            if importlib.util.find_spec(module_name) is None:
                self._embedding = False
                return
            configure_pyqtgraph()
            cls = getattr(importlib.import_module(module_name), class_name)
            self._embedding = cls(self.session, self)
        except Exception:  # noqa: BLE001 - an unfinished view must not break tokenizing
            log.warning("embedding panel unavailable", exc_info=True)
            self._embedding = False
            return
        self._embedding_box = _titled("Embedding", self._embedding, self)
        self.side_split.addWidget(self._embedding_box)
        total = max(self.side_split.height(), 500)
        self.side_split.setSizes([total * 2 // 5, total - total * 2 // 5])  # the plots need the room

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(1200, 800)


class Encoded(NamedTuple):
    """A tokenization to keep following edits (`encoder`) and a copy of its columns to show."""

    encoder: IncrementalEncoder
    store: TokenStore


def _store_of(encoder: IncrementalEncoder) -> TokenStore:
    """A TokenStore over copies of the encoder's columns (the encoder changes with each edit)."""
    return TokenStore.from_columns(encoder.tokenizer, encoder.ids, encoder.starts, encoder.ends,
                                   encoder.flags, encoder.nbytes)


def _titled(title: str, widget: QWidget, parent: QWidget, hint: str = "") -> QWidget:
    """A widget under a small caption (and an optional grey hint beside it)."""
    box = QWidget(parent)
    layout = QVBoxLayout(box)
    layout.setContentsMargins(0, 2, 0, 0)
    layout.setSpacing(2)
    text = f"<b>{_esc(title)}</b>" + (f" &nbsp;<span style='color:gray'>{_esc(hint)}</span>" if hint else "")
    caption = QLabel(text, box)
    caption.setTextFormat(Qt.TextFormat.RichText)
    font = caption.font()
    font.setPointSizeF(font.pointSizeF() * 0.92)
    caption.setFont(font)
    layout.addWidget(caption)
    layout.addWidget(widget, 1)
    box.caption = caption  # (retitled by views whose content changes kind)
    return box


def _hint(text: str) -> str:
    return f"<span style='color:gray'>{_esc(text)}</span>"


def _esc(s: str) -> str:
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .translate(CONTROL_PICTURES))


def _show_bytes(data: bytes) -> str:
    """A token's bytes as text, hex for any part that is not valid UTF-8."""
    return data.decode("utf-8", "backslashreplace").translate(VISIBLE_WS)


def _how_built(tokenizer, pretoken: str, word: str) -> tuple[list, list, list]:
    """What explains a token, as (merge steps of its pre-token, cuts of its word, longest
    matches of its word): the first one the tokenizer's model has, the others empty."""
    steps = tokenizer.merge_steps(pretoken) if pretoken else []
    cuts = [] if steps or not word else tokenizer.segmentations(word, CUTS_SHOWN)
    matches = [] if steps or cuts or not word else tokenizer.longest_matches(word)
    return steps, cuts, matches


def _show_ws(text: str) -> str:
    """Text for a note: escaped, its blanks made visible."""
    return _esc(text.translate(VISIBLE_WS))


def _word_around(text: str, start: int, end: int) -> slice:
    """The whitespace-delimited word holding text[start:end], with the space before it (a
    token may start with that space: SentencePiece's and WordPiece's spans include it).

    >>> text = "say hello world"
    >>> text[_word_around(text, 5, 7)], text[_word_around(text, 3, 6)], text[_word_around(text, 0, 2)]
    (' hello', ' hello', 'say')
    """
    lo = start
    if not (lo < len(text) and text[lo].isspace()):
        while lo > 0 and not text[lo - 1].isspace() and start - lo < MAX_TRACE_CHARS:
            lo -= 1
        if lo > 0:
            lo -= 1  # SentencePiece and GPT-2 both attach the space to the following word
    hi = end
    while hi < len(text) and not text[hi].isspace() and hi - end < MAX_TRACE_CHARS:
        hi += 1
    return slice(lo, hi)


def _qt_pos(text: str, index: int) -> int:
    """A Python character offset as a QTextDocument position (UTF-16 code units)."""
    if text.isascii():
        return index
    return len(text[:index].encode("utf-16-le", "surrogatepass")) // 2
