"""A table view that paints its visible rows itself, one Python call per row.

QTableView's own paint asks the model for ~7 roles per cell and runs the style's item
drawing for each: a screen of ~150-170 cells took 21-23 ms per scroll step here (the
vocabulary, the tensor table), more than a 60 Hz frame. `RowPaintedTable` asks a subclass
for each visible row's texts (`row_texts`) and draws them: text at its baseline, measured
only when it may not fit or is right-aligned. It keeps what QTableView shows: alternating
rows, the selection, an optional colour swatch in one column, a font per row kind in some
columns or per column in others, a background and text colour per row, right-aligned
columns, elision, the grid and the style's focus frame. Rows are all one height. The
model's roles stay for tooltips, tests and anything else that asks.
Each repaint holds workers back (`workers.mark_gui_busy`, as `PaintMarksBusy` does).
"""
from __future__ import annotations

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter
from PySide6.QtWidgets import QStyle, QStyleOptionFocusRect, QStyleOptionViewItem, QTableView

from forma_gui.app.workers import mark_gui_busy

#: cell text inset (px) and the first column's colour swatch (width, height)
PAD, SWATCH_W, SWATCH_H = 4, 16, 12


class RowPaintedTable(QTableView):
    """A QTableView painting its rows from `row_texts` (see the module docstring)."""

    #: columns whose text is right-aligned, and whose font follows the row's kind
    right_columns: frozenset[int] = frozenset()
    typed_columns: frozenset[int] = frozenset()
    #: the column a row's swatch is drawn in, at the left of its text
    swatch_column: int = 0

    def row_texts(self, row: int) -> tuple[list[str], QColor | None, str | None]:
        """(every column's text, the swatch colour or None, the row's kind for `type_fonts`
        or None) of a row of the view's model, as painted."""
        model = self.model()
        return [str(model.index(row, col).data() or "") for col in range(model.columnCount())], None, None

    def type_fonts(self) -> dict[str, QFont]:
        """{row kind: font} for the typed columns (resolved against the view's font)."""
        return {}

    def row_colors(self, row: int) -> tuple[QColor | None, QColor | None]:
        """(background, text colour) of a row when it is not selected; None: the palette's."""
        return None, None

    def column_fonts(self) -> dict[int, QFont]:
        """{column: font} for columns (not typed ones) set in their own font on every row
        (resolved against the view's font)."""
        return {}

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        mark_gui_busy()
        painter = QPainter(self.viewport())
        try:
            self._paint_rows(painter, event.rect())
        finally:
            painter.end()

    def _paint_rows(self, p: QPainter, area: QRect) -> None:
        model, palette = self.model(), self.palette()
        p.fillRect(area, palette.base())
        n = model.rowCount() if model is not None else 0
        first = self.rowAt(area.top()) if n else -1
        if first < 0:
            return
        last = self.rowAt(area.bottom())
        last = n - 1 if last < 0 else last
        cols = [(c, self.columnViewportPosition(c), self.columnWidth(c)) for c in range(model.columnCount())
                if not self.isColumnHidden(c)]
        if not cols:
            return
        right = max(x + w for _, x, w in cols)
        height = self.rowHeight(first)
        top = y = self.rowViewportPosition(first)
        selected = {index.row() for index in self.selectionModel().selectedRows()}
        text, bright = palette.text().color(), palette.highlightedText().color()
        plain = _Font(self.font())
        # (a font role resolves against the view's font, as Qt's delegate resolves it)
        fonts = {None: plain, **{kind: _Font(font.resolve(self.font())) for kind, font in self.type_fonts().items()}}
        by_column = {col: _Font(font.resolve(self.font())) for col, font in self.column_fonts().items()}
        typed, right_aligned, swatched = self.typed_columns, self.right_columns, self.swatch_column
        p.setFont(plain.font)
        for row in range(first, last + 1):
            cells, swatch, kind = self.row_texts(row)
            if row in selected:
                p.fillRect(0, y, right, height, palette.highlight())
                p.setPen(bright)
            else:
                background, ink = self.row_colors(row)
                if background is not None:
                    p.fillRect(0, y, right, height, background)
                elif row % 2 and self.alternatingRowColors():
                    p.fillRect(0, y, right, height, palette.alternateBase())
                p.setPen(text if ink is None else ink)
            for col, x, width in cols:
                left = x + PAD
                if col == swatched and swatch is not None:
                    p.fillRect(x + 3, y + (height - SWATCH_H) // 2, SWATCH_W, SWATCH_H, swatch)
                    left += SWATCH_W + 2
                font = fonts.get(kind, plain) if col in typed else by_column.get(col, plain)
                if font is not plain:
                    p.setFont(font.font)
                shown, advance = font.fit(cells[col], x + width - PAD - left, col in right_aligned)
                if col in right_aligned:
                    left = x + width - PAD - advance
                p.drawText(left, y + (height + font.ascent - font.descent) // 2, shown)
                if font is not plain:
                    p.setFont(plain.font)
            y += height
        self._paint_grid(p, cols, right, top, y, height)
        self._paint_focus(p, first, last)

    def _paint_grid(self, p: QPainter, cols, right: int, top: int, bottom: int, height: int) -> None:
        if not self.showGrid():
            return
        hint = self.style().styleHint(QStyle.StyleHint.SH_Table_GridLineColor, QStyleOptionViewItem(), self)
        p.setPen(QColor.fromRgba(hint & 0xFFFFFFFF))
        for _, x, width in cols:
            p.drawLine(x + width - 1, top, x + width - 1, bottom - 1)
        for y in range(top + height - 1, bottom, height):
            p.drawLine(0, y, right - 1, y)

    def _paint_focus(self, p: QPainter, first: int, last: int) -> None:
        """The style's focus frame around the current cell, as QTableView draws it."""
        current = self.currentIndex()
        if not (self.hasFocus() and current.isValid() and first <= current.row() <= last):
            return
        option = QStyleOptionFocusRect()
        option.initFrom(self)
        option.rect = self.visualRect(current)
        option.backgroundColor = self.palette().highlight().color()
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_FrameFocusRect, option, p, self)


class _Font:
    """A font and the metrics `RowPaintedTable` lays text out by, taken once per paint."""

    def __init__(self, font: QFont) -> None:
        self.font, self.metrics = font, QFontMetrics(font)
        self.ascent, self.descent = self.metrics.ascent(), self.metrics.descent()
        self._widest = self.metrics.maxWidth()

    def fit(self, text: str, room: int, measure: bool) -> tuple[str, int]:
        """(the text, elided to `room` pixels when wider, its advance or -1 when not measured):
        measured when asked (right alignment) or when it may not fit (the widest glyph per
        character), since laying text out costs about as much as drawing it."""
        if measure or len(text) * self._widest > room:
            advance = self.metrics.horizontalAdvance(text)
        else:
            return text, -1
        if advance > room:
            text = self.metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(room, 0))
            advance = self.metrics.horizontalAdvance(text)
        return text, advance
