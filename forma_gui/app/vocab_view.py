"""The vocabulary browser: every token of the open tokenizer, searchable.

The table model is lazy: a row is an id, and its cells are asked of the tokenizer only
when Qt paints them, so 262k rows cost nothing up front. Search runs in a worker over a
`VocabIndex` built once per tokenizer (also in a worker): the pieces, their decoded
texts and their bytes are joined into one string / bytes blob each, matched with C-speed
`re`/`bytes.find`, and match offsets are mapped back to ids with `numpy.searchsorted`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import repeat

from PySide6.QtCore import QAbstractTableModel, QItemSelectionModel, QModelIndex, Qt, QTimer
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QHBoxLayout, QHeaderView, QLabel, QLineEdit, QTableView, QVBoxLayout, QWidget

from forma_gui.app.palette import hue_index, token_color
from forma_gui.app.row_table import RowPaintedTable
from forma_gui.app.token_canvas import CONTROL_PICTURES, VISIBLE_WS, hex_bytes
from forma_gui.app.workers import LatestRunner
from forma_gui.core.slices import sliced_array, sliced_join, sliced_map

#: item-data roles as plain ints: data() runs for every visible cell and role, and
#: comparing against the enum members costs ~1 µs each in PySide6
DISPLAY, DECORATION, ALIGNMENT, FONT, TOOLTIP, USER = (int(r) for r in (
    Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.DecorationRole, Qt.ItemDataRole.TextAlignmentRole,
    Qt.ItemDataRole.FontRole, Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.UserRole))
ALIGN_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
HANDLED = frozenset((DISPLAY, DECORATION, ALIGNMENT, FONT, TOOLTIP, USER))

SEP = "\x00"              # joins pieces; never part of a query, so no match spans two pieces
SEARCH_DEBOUNCE_MS = 120
INDEX_DELAY_MS = 100      # the search index is built after the table's first paint
VISIBLE = VISIBLE_WS | CONTROL_PICTURES
#: columns whose text is right-aligned (id, rank/score) and whose font follows the token type
RIGHT_COLUMNS, TYPED_COLUMNS = (0, 4), (1, 2)


@dataclass(frozen=True)
class Query:
    """A parsed search: kind is "all", "id", "number", "hex" or "text"."""

    kind: str
    value: object = None


def parse_query(text: str) -> Query:
    """Read the search field.

    >>> parse_query("#42"), parse_query("42")
    (Query(kind='id', value=42), Query(kind='number', value=42))
    >>> parse_query("0x e2 82"), parse_query("e282ac")  # bare hex: spaced pairs or 3+ bytes
    (Query(kind='hex', value=b'\\xe2\\x82'), Query(kind='hex', value=b'\\xe2\\x82\\xac'))
    >>> parse_query("Ġthe")
    Query(kind='text', value='Ġthe')
    """
    q = text.strip()
    if not q:
        return Query("all")
    if re.fullmatch(r"#\s*\d+", q):
        return Query("id", int(q[1:]))
    if q.isdigit() and q.isascii():
        return Query("number", int(q))
    lower = q.lower()
    if lower.startswith(("0x", "\\x")):
        digits = re.sub(r"0x|\\x|[\s,]", "", lower)
        if digits and len(digits) % 2 == 0 and re.fullmatch(r"[0-9a-f]+", digits):
            return Query("hex", bytes.fromhex(digits))
    compact = re.sub(r"\s", "", lower)
    spaced = re.fullmatch(r"[0-9a-f]{2}(?:\s+[0-9a-f]{2})+", lower)  # "e2 82 ac"
    run = (len(compact) >= 6 and re.fullmatch(r"(?:[0-9a-f]{2})+", lower)  # "e282ac"
           and re.search(r"\d", compact) and re.search(r"[a-f]", compact))
    if spaced or run:
        return Query("hex", bytes.fromhex(compact))
    return Query("text", q.replace(SEP, ""))


class VocabIndex:
    """Flat, searchable copies of a vocabulary: built once per tokenizer, off the GUI thread."""

    def __init__(self, tokenizer) -> None:
        n = tokenizer.vocab_size
        self.tokenizer = tokenizer
        self.size = n
        # sliced_map: a slice at a time, pausing while the GUI thread paints (see workers)
        pieces = sliced_map(tokenizer.piece, range(n))
        data = sliced_map(tokenizer.token_bytes, range(n))
        texts = sliced_map(bytes.decode, data, repeat("utf-8"), repeat("replace"))
        self.blobs = {name: _joined(strings) for name, strings in (
            ("piece", pieces), ("text", texts),
            ("piece_lower", sliced_map(str.lower, pieces)), ("text_lower", sliced_map(str.lower, texts)))}
        self.bytes_blob = sliced_join(b"", data)
        self.bytes_starts = _starts(map(len, data), 0)

    def search(self, query: Query):
        """Matching ids (int64 array): exact matches first, then the rest by id."""
        import numpy as np

        if query.kind == "id":
            return np.array([query.value] if 0 <= query.value < self.size else [], dtype=np.int64)
        if query.kind == "hex":
            return self._search_bytes(query.value)
        needle = str(query.value)
        ids = self._search_text(needle)
        if query.kind == "number" and 0 <= query.value < self.size:
            ids = np.concatenate([[query.value], ids[ids != query.value]]).astype(np.int64)
        return ids

    def _search_text(self, needle: str):
        import numpy as np

        fold = needle == needle.lower()  # smart case: lower-case queries ignore case
        found = [self._matches("piece_lower" if fold else "piece", needle),
                 self._matches("text_lower" if fold else "text", needle)]
        ids = np.unique(np.concatenate(found))
        exact = [i for i in (self.tokenizer.id_of(needle),) if i is not None]
        if exact:
            ids = np.concatenate([exact, ids[~np.isin(ids, exact)]])
        return ids.astype(np.int64)

    def _matches(self, blob_name: str, needle: str):
        import numpy as np

        blob, starts = self.blobs[blob_name]
        positions = np.fromiter((m.start() for m in re.finditer(re.escape(needle), blob)),
                                dtype=np.int64)
        return np.searchsorted(starts, positions, side="right") - 1

    def _search_bytes(self, needle: bytes):
        import numpy as np

        if not needle:
            return np.arange(self.size, dtype=np.int64)
        pattern = re.compile(b"(?=" + re.escape(needle) + b")", re.DOTALL)
        positions = np.fromiter((m.start() for m in pattern.finditer(self.bytes_blob)), dtype=np.int64)
        ids = np.searchsorted(self.bytes_starts, positions, side="right") - 1
        inside = positions + len(needle) <= self.bytes_starts[ids + 1]  # not across two tokens
        return np.unique(ids[inside])


def _joined(strings: list[str]):
    """One string of all items separated by SEP, and each item's start offset."""
    return sliced_join(SEP, strings), _starts(map(len, strings), 1)


def _starts(lengths, gap: int):
    """Start offsets (int64, one more than items) of items of these lengths, `gap` apart."""
    import numpy as np

    sizes = sliced_array(lengths, np.int64)
    starts = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes + gap, out=starts[1:])
    return starts


class VocabTable(RowPaintedTable):
    """The vocabulary table: it paints its visible rows itself (`RowPaintedTable`), each
    from one `VocabModel.cells` call: a screen of ~170 cells took 21-23 ms per scroll step
    through QTableView's own paint here, 9-12 ms so. The id column has the token's colour
    swatch; control and byte tokens' piece and text are bold and italic."""

    right_columns, typed_columns = frozenset(RIGHT_COLUMNS), frozenset(TYPED_COLUMNS)

    def row_texts(self, row: int) -> tuple[list[str], QColor | None, str | None]:
        token_id, cells, kind = self.model().cells(row)
        return cells, token_color(hue_index(token_id)), kind

    def type_fonts(self) -> dict[str, QFont]:
        return self.model().type_fonts


class VocabModel(QAbstractTableModel):
    """id, piece, text, type, score/rank for every id in `rows` (all ids when rows is None)."""

    HEADERS = ("id", "piece", "text", "type", "rank")

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.tokenizer = None
        self.rows = None  # numpy int64 array of ids, or None for the identity
        bold, italic = QFont(), QFont()
        bold.setBold(True)
        italic.setItalic(True)
        #: token types whose piece and text are set apart (the font role of TYPED_COLUMNS)
        self.type_fonts = {"control": bold, "byte": italic}

    def set_tokenizer(self, tokenizer) -> None:
        self.beginResetModel()
        self.tokenizer, self.rows = tokenizer, None
        self.endResetModel()

    def set_rows(self, rows) -> None:
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def token_id(self, row: int) -> int:
        return row if self.rows is None else int(self.rows[row])

    def row_of(self, token_id: int) -> int | None:
        """The row showing `token_id`, or None if the filter hides it."""
        if self.rows is None:
            return token_id if self.tokenizer is not None and 0 <= token_id < self.tokenizer.vocab_size else None
        hits = (self.rows == token_id).nonzero()[0]
        return int(hits[0]) if len(hits) else None

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt override
        if parent.isValid() or self.tokenizer is None:
            return 0
        return self.tokenizer.vocab_size if self.rows is None else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt override
        return 0 if parent.isValid() else len(self.HEADERS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != Qt.Orientation.Horizontal or role != Qt.ItemDataRole.DisplayRole:
            return None
        if section == 4 and self.tokenizer is not None and self.tokenizer.piece_style == "sentencepiece":
            return "score"
        return self.HEADERS[section]

    def data(self, index, role=DISPLAY):
        if role not in HANDLED:
            return None
        token_id, col = self.token_id(index.row()), index.column()
        if role == DISPLAY:
            return self._cell(token_id, col)
        if role == DECORATION and col == 0:
            return token_color(hue_index(token_id))
        if role == ALIGNMENT and col in RIGHT_COLUMNS:
            return ALIGN_RIGHT
        if role == FONT and col in TYPED_COLUMNS:
            return self.type_fonts.get(self.tokenizer.token_type(token_id))
        if role == TOOLTIP and col == 2:
            return "bytes " + hex_bytes(self.tokenizer.token_bytes(token_id))
        if role == USER:
            return token_id
        return None

    def cells(self, row: int) -> tuple[int, list[str], str | None]:
        """(token id, every column's text, its type when `type_fonts` has one, else None) of a
        row, as painted."""
        token_id = self.token_id(row)
        kind = self.tokenizer.token_type(token_id)
        return token_id, [self._cell(token_id, col) for col in range(len(self.HEADERS))], \
            kind if kind in self.type_fonts else None

    def _cell(self, token_id: int, col: int) -> str:
        tok = self.tokenizer
        if col == 0:
            return str(token_id)
        if col == 1:
            return tok.piece(token_id).translate(CONTROL_PICTURES)
        if col == 2:
            return rendered_bytes(tok.token_bytes(token_id))
        if col == 3:
            return tok.token_type(token_id)
        score = tok.token_score(token_id)
        return "" if score is None else f"{score:g}"


def rendered_bytes(data: bytes) -> str:
    """A token's bytes as text with visible whitespace, or hex when not valid UTF-8.

    >>> rendered_bytes(b" the"), rendered_bytes(b"\\xe2\\x82")
    ('·the', '⟨E2 82⟩')
    """
    try:
        return data.decode("utf-8").translate(VISIBLE)
    except UnicodeDecodeError:
        return f"⟨{hex_bytes(data)}⟩"


class VocabView(QWidget):
    """Search field over the lazy vocabulary table; selection synced through the Session."""

    def __init__(self, session, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("vocabView")
        self.session = session
        self.index: VocabIndex | None = None
        self._syncing = False
        self._pending_query: Query | None = None
        self._index_runner = LatestRunner(self)
        self._index_runner.finished.connect(self._on_indexed)
        self._index_runner.failed.connect(self._on_index_failed)
        self._search_runner = LatestRunner(self)
        self._search_runner.finished.connect(self._on_searched)
        self._search_runner.failed.connect(lambda _q, e: self.status.setText(f"search failed: {e}"))
        self._debounce = QTimer(self, singleShot=True, interval=SEARCH_DEBOUNCE_MS,
                                timeout=self._run_search)
        self._build()
        session.tokenizer_changed.connect(self._on_tokenizer_changed)
        session.token_selected.connect(self._on_token_selected)
        if session.tokenizer is not None:
            self._on_tokenizer_changed(session.tokenizer)
            if session.selected_token is not None:
                self._on_token_selected(session.selected_token)

    def _build(self) -> None:
        self.search = QLineEdit(self)
        self.search.setObjectName("vocabSearch")
        self.search.setClearButtonEnabled(True)
        self.search.setPlaceholderText("Search: piece or text (smart case), #id or a number, "
                                       "hex bytes (0x e2 82, e282ac)")
        self.search.textChanged.connect(lambda _t: self._debounce.start())
        self.search.returnPressed.connect(self._run_search)
        self.status = QLabel(self)
        self.status.setObjectName("vocabStatus")
        top = QHBoxLayout()
        top.addWidget(self.search, 1)
        top.addWidget(self.status)
        self.model = VocabModel(self)
        self.table = VocabTable(self)
        self.table.setObjectName("vocabTable")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.verticalHeader().hide()
        rows = self.table.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)  # uniform heights: no per-row measuring
        rows.setDefaultSectionSize(self.table.fontMetrics().height() + 8)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(False)
        for col, width in enumerate((100, 300, 300, 110, 110)):
            header.resizeSection(col, width)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.selectionModel().currentRowChanged.connect(self._on_current_changed)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)

    # ---- tokenizer and index ----------------------------------------------------------
    def _on_tokenizer_changed(self, tokenizer) -> None:
        self.index = None
        self.model.set_tokenizer(tokenizer)
        self._show_count()
        if tokenizer is not None:
            self.status.setText(f"{tokenizer.vocab_size:,} tokens · indexing for search…")
            # once the table has painted its first rows: indexing is seconds of Python for a
            # 262k vocabulary, and a repaint competing with it for the GIL is far slower
            QTimer.singleShot(INDEX_DELAY_MS, self, lambda: self._start_index(tokenizer))
        if self.search.text().strip():
            self._run_search()

    def _start_index(self, tokenizer) -> None:
        if tokenizer is self.model.tokenizer and self.index is None:
            self._index_runner.submit(VocabIndex, tokenizer, tag=tokenizer)

    def _on_indexed(self, tokenizer, index: VocabIndex) -> None:
        if tokenizer is not self.session.tokenizer:
            return
        self.index = index
        self._show_count()
        if self._pending_query is not None:
            self._run_search()

    def _on_index_failed(self, _tokenizer, error) -> None:
        self.status.setText(f"cannot index the vocabulary: {error}")

    # ---- search -----------------------------------------------------------------------
    def _run_search(self) -> None:
        self._debounce.stop()
        query = parse_query(self.search.text())
        if query.kind == "all":
            self._pending_query = None
            self._search_runner.cancel()
            self._set_rows(None, query)
            return
        if self.index is None:
            self._pending_query = query
            return
        self._pending_query = None
        self.status.setText("searching…")
        self._search_runner.submit(self.index.search, query, tag=(query, self.index))

    def _on_searched(self, tag, ids) -> None:
        query, index = tag
        if index is self.index and query == parse_query(self.search.text()):
            self._set_rows(ids, query)

    def _set_rows(self, rows, query: Query) -> None:
        selected = self.session.selected_token
        self.model.set_rows(rows)
        self._show_count(query)
        if selected is not None:
            self._select_id(selected, clear_filter=False)

    def _show_count(self, query: Query | None = None) -> None:
        tok = self.model.tokenizer
        if tok is None:
            self.status.setText("no tokenizer")
        elif self.model.rows is None:
            self.status.setText(f"{tok.vocab_size:,} tokens")
        else:
            what = {"hex": "bytes", "id": "id", "number": "id or text"}.get(query.kind if query else "", "piece or text")
            n = len(self.model.rows)
            self.status.setText(f"{n:,} {'match' if n == 1 else 'matches'} ({what}) of "
                                f"{tok.vocab_size:,}")

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Centre the current row again: scrolled while hidden (a token picked in another
        tab), the table had no height yet, and the row ended up at its bottom edge."""
        super().showEvent(event)
        current = self.table.currentIndex()
        if current.isValid():
            QTimer.singleShot(0, lambda: self.table.scrollTo(
                self.table.currentIndex(), QTableView.ScrollHint.PositionAtCenter))

    # ---- selection sync ---------------------------------------------------------------------
    def _on_current_changed(self, current: QModelIndex, _previous) -> None:
        if self._syncing or not current.isValid():
            return
        self._syncing = True
        try:
            self.session.select_token(self.model.token_id(current.row()))
        finally:
            self._syncing = False

    def _on_token_selected(self, token_id: int) -> None:
        if not self._syncing:
            self._select_id(token_id, clear_filter=True)

    def _select_id(self, token_id: int, *, clear_filter: bool) -> None:
        row = self.model.row_of(token_id)
        if row is None and clear_filter and self.model.rows is not None:
            self.search.blockSignals(True)
            self.search.clear()
            self.search.blockSignals(False)
            self._set_rows(None, Query("all"))
            row = self.model.row_of(token_id)
        if row is None:
            return
        index = self.model.index(row, 0)
        self._syncing = True
        try:
            self.table.selectionModel().setCurrentIndex(
                index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
        finally:
            self._syncing = False
        self.table.scrollTo(index, QTableView.ScrollHint.PositionAtCenter)
