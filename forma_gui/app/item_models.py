"""What the views' item models share: a horizontal header read from the class's HEADERS."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import QModelIndex, Qt


class Headed:
    """Mixin for a Qt item model (put it before the Qt base): `HEADERS` gives its columns
    and their titles. Flat models return no columns under a valid parent."""

    HEADERS: tuple[str, ...] = ()
    #: a tree's children have the same columns; a flat table's cells have no children
    TREE = False

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802 - Qt override
        return 0 if parent.isValid() and not self.TREE else len(self.HEADERS)

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802 - Qt override
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.HEADERS[section]
        return None
