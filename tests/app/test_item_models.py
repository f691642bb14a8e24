"""`Headed`: the header and column count the views' models share."""
from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt

from forma_gui.app.item_models import Headed
from forma_gui.app.model_view import MetadataModel, TensorTableModel


class _Table(Headed, QAbstractTableModel):
    HEADERS = ("a", "b", "c")

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else 2

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        return f"{index.row()},{index.column()}" if role == Qt.ItemDataRole.DisplayRole else None


def test_the_header_reads_headers_horizontally_only(qtbot):
    model = _Table()
    horizontal = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    assert horizontal == ["a", "b", "c"]
    assert model.headerData(0, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole) is None
    assert model.headerData(0, Qt.Orientation.Vertical) is None


def test_a_flat_cell_has_no_columns_a_tree_node_keeps_them(qtbot):
    table = _Table()
    assert table.columnCount(table.index(0, 0)) == 0
    tree = MetadataModel()
    assert tree.TREE and MetadataModel.columnCount is Headed.columnCount
    assert tree.columnCount(tree.createIndex(0, 0, 0)) == len(MetadataModel.HEADERS) == 3


def test_the_tensor_table_titles(qtbot):
    model = TensorTableModel([])
    titles = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    assert titles == ["Name", "Shape", "Type", "Elements", "Bytes", "Bits/weight", "File offset"]
