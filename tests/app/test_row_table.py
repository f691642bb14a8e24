"""Tables that paint their own rows (RowPaintedTable): the text each row shows, its place in
the cell, the selection and alternating rows, and elision."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QTableView

import forma_gui
from forma_gui.app.model_view import TENSOR_HEADERS, ModelView, TensorTable
from forma_gui.app.row_table import PAD, RowPaintedTable, _Font
from forma_gui.app.state import Session
from tests.app._smol import smol_path as _smol_path

def _shown(qtbot, view, width: int, height: int):
    qtbot.addWidget(view)
    view.resize(width, height)
    view.show()
    qtbot.waitExposed(view)
    return view


@pytest.fixture
def tensors(qtbot):
    """The Tensors view on SmolLM2, sorted by bytes (largest first) and filtered to ffn."""
    session = Session()
    session.set_weights(forma_gui.open_weights(_smol_path()))
    view = _shown(qtbot, ModelView(session), 1300, 700)
    table = view.tensorTable
    assert isinstance(table, TensorTable)
    table.setColumnWidth(0, 220)
    table.sortByColumn(TENSOR_HEADERS.index("Bytes"), Qt.SortOrder.DescendingOrder)
    view.filter_edit.setText("ffn")
    qtbot.waitUntil(lambda: 0 < view.table_proxy.rowCount() < view.table_model.rowCount(), timeout=10_000)
    yield table
    session.weights.close()


def test_each_row_shows_the_cells_of_the_tensor_behind_it(tensors):
    """Rows are the proxy's (sorted, filtered): each one's texts are what the model displays
    for that row (fails when the painted row is the source model's row of the same number)."""
    proxy = tensors.model()
    for row in range(proxy.rowCount()):
        texts, swatch, kind = tensors.row_texts(row)
        assert texts == [proxy.index(row, col).data() for col in range(proxy.columnCount())]
        assert swatch is None and kind is None
    assert proxy.mapToSource(proxy.index(0, 0)).row() != 0  # the order differs from the file's


def _pixels(image: QImage) -> np.ndarray:
    """(height, width, 3) R, G, B values."""
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, :3 * image.width()].reshape(image.height(), image.width(), 3).astype(int)


def test_rows_are_painted_with_their_background_and_text_in_place(tensors):
    """The selected row has the highlight, odd rows the alternate base; right-aligned columns
    (those the model aligns right) end their text PAD pixels before the cell's edge, the
    others start it PAD pixels in."""
    proxy = tensors.model()
    right = {col for col in range(proxy.columnCount())
             if (proxy.index(0, col).data(Qt.ItemDataRole.TextAlignmentRole) or 0) & Qt.AlignmentFlag.AlignRight}
    assert right == {TENSOR_HEADERS.index(h) for h in ("Elements", "Bytes", "Bits/weight", "File offset")}
    tensors.selectRow(2)
    tensors.viewport().repaint()
    image = tensors.viewport().grab().toImage()
    dpr = image.devicePixelRatio()
    pixels = _pixels(image)
    palette = tensors.palette()
    for row in range(6):
        y = tensors.rowViewportPosition(row)
        h = tensors.rowHeight(row)
        expected = (palette.highlight() if row == 2 else palette.alternateBase() if row % 2 else palette.base()).color()
        background = expected.red(), expected.green(), expected.blue()
        assert tuple(pixels[int((y + 1) * dpr), int(2 * dpr)]) == background
        band = pixels[int(y * dpr):int((y + h - 1) * dpr)]  # the row, without the grid line below
        ink = np.any(np.abs(band - np.array(background)) > 60, axis=2).any(axis=0)  # text columns
        for col in range(tensors.model().columnCount()):
            x, w = tensors.columnViewportPosition(col), tensors.columnWidth(col)
            cell = np.flatnonzero(ink[int(x * dpr):int((x + w - 1) * dpr)]) / dpr
            assert len(cell), f"row {row} column {col} shows no text"
            if col in right:
                assert w - 1 - PAD - 3 <= cell[-1] <= w - PAD, (row, col, cell[-1], w)
            else:
                assert PAD - 1 <= cell[0] <= PAD + 3, (row, col, cell[0])


def test_a_table_without_row_texts_paints_what_its_model_displays(qtbot):
    """The default `row_texts` asks the model's display role."""
    from PySide6.QtGui import QStandardItem, QStandardItemModel

    model = QStandardItemModel(3, 2)
    for r in range(3):
        for c in range(2):
            model.setItem(r, c, QStandardItem(f"r{r}c{c}"))
    model.setItem(1, 1, QStandardItem())
    table = RowPaintedTable()
    qtbot.addWidget(table)
    table.setModel(model)
    assert [table.row_texts(r)[0] for r in range(3)] == [["r0c0", "r0c1"], ["r1c0", ""], ["r2c0", "r2c1"]]
    table.show()
    table.viewport().repaint()  # and paints without error


def test_cell_text_is_elided_only_when_it_does_not_fit(qtbot):
    font = _Font(QTableView().font())
    text = "a rather long piece of text"
    full = font.metrics.horizontalAdvance(text)
    assert font.fit(text, len(text) * font.metrics.maxWidth(), False) == (text, -1)  # surely fits: not measured
    assert font.fit(text, full, False) == (text, full)  # may not fit: measured, and fits
    assert font.fit(text, full, True) == (text, full)   # right-aligned: measured
    shown, advance = font.fit(text, full // 2, False)
    assert shown.endswith("…") and 0 < advance <= full // 2
    assert font.fit("12345", 200, True)[1] == font.metrics.horizontalAdvance("12345")


def test_the_token_table_paints_each_token_in_its_row(qtbot):
    """The Tokenize view's table (TokenTable): each row's texts are what its model displays
    (the same row, every column), the swatch in the id column has the token's colour, the
    selected row the highlight, odd rows the alternate base, and the columns the model aligns
    right are the ones painted right-aligned; the bytes column has the model's monospace font."""
    from forma_gui.app.palette import hue_index, token_color
    from forma_gui._resources import default_tokenizer_path
    from forma_gui.app.tokenize_view import TokenizeView, TokenTable

    session = Session()
    session.set_tokenizer(forma_gui.load_tokenizer(default_tokenizer_path()))
    view = _shown(qtbot, TokenizeView(session), 1200, 800)
    text = "Tokenizers don't see words: they see pieces. Привет, мир! 東京 3€\n" * 4
    view.editor.setPlainText(text)
    qtbot.waitUntil(lambda: view.text == text and len(view.tokens) > 40, timeout=20_000)
    table, model = view.table, view.table.model()
    assert isinstance(table, TokenTable)
    right = {col for col in range(model.columnCount())
             if (model.index(0, col).data(Qt.ItemDataRole.TextAlignmentRole) or 0) & Qt.AlignmentFlag.AlignRight}
    assert right == table.right_columns == {0, 1}
    assert table.column_fonts()[3] == model.index(0, 3).data(Qt.ItemDataRole.FontRole)
    table.setMinimumHeight(300)
    table.scrollTo(model.index(20, 0), table.ScrollHint.PositionAtTop)
    view.select_index(23)
    table.viewport().repaint()
    image = table.viewport().grab().toImage()
    palette = table.palette()
    first = table.rowAt(0)
    rows = range(first, first + 8)
    assert first == 20 and table.rowAt(table.viewport().height() - 1) >= rows[-1]
    for row in rows:
        texts, swatch, kind = table.row_texts(row)
        assert texts == [model.index(row, col).data() for col in range(model.columnCount())]
        assert kind is None
        cell = table.visualRect(model.index(row, 1))
        token_id = view.tokens.ids[row]
        assert image.pixelColor(cell.left() + 3 + 8, cell.center().y()).rgb() == token_color(hue_index(token_id)).rgb()
        span = table.visualRect(model.index(row, 4))  # short text: room on its right
        expected = palette.highlight() if row == 23 else palette.alternateBase() if row % 2 else palette.base()
        assert image.pixelColor(span.right() - 6, span.center().y()).rgb() == expected.color().rgb(), row
