"""The Model view: metadata tree, tensor table (flat or grouped by block), totals, planner.

Every Qt model here is a thin, lazy adapter over the open `WeightFile`: the tensor table
formats a `TensorInfo` only when a cell is painted, and a 262k-entry vocabulary array is
one summary row whose children are fetched 500 at a time as the user scrolls.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import (QAbstractItemModel, QAbstractTableModel, QItemSelectionModel,
                            QModelIndex, QSortFilterProxyModel, Qt)
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QCheckBox, QFormLayout, QGroupBox, QHBoxLayout,
                               QHeaderView, QLabel, QLineEdit, QSplitter, QStackedWidget,
                               QVBoxLayout, QWidget)

from forma_gui.app.item_models import Headed
from forma_gui.app.state import Session
from forma_gui.app.tensor_support import CopyableRowTable, CopyableTableView, CopyableTreeView, fmt_bytes
from forma_gui.formats.lazy_strings import LazyStrings

#: array children are created this many at a time (canFetchMore / fetchMore)
FETCH_CHUNK = 500
#: rows measured when fitting columns to their contents (Qt's default, 1000, took ~300 ms of
#: the GUI thread for a model of 400 tensors; names and numbers are alike from row to row)
SIZE_ROWS = 64
#: items quoted in an array's one-line summary
SUMMARY_ITEMS = 6
#: a string longer than this is shortened in the value column (the tooltip has it all)
MAX_VALUE_CHARS = 160
#: `blk.12.attn_q.weight` -> `blk.12`, `model.layers.3.mlp...` -> `model.layers.3`
BLOCK_RE = re.compile(r"^(.*?(?:^|\.)(?:blk|layers|layer|h|block|blocks)\.\d+)\.")

SORT_ROLE = Qt.ItemDataRole.UserRole
NAME_ROLE = Qt.ItemDataRole.UserRole + 1


# ------------------------------------------------------------------ value rendering

def display_string(s: str) -> str:
    """A metadata string made safe and visible: undecodable bytes as U+FFFD, controls escaped.

    >>> display_string("a\\nb")
    'a\\\\nb'
    """
    s = s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return s.encode("unicode_escape").decode("ascii") if not s.isprintable() else s


def _render_scalar(value: Any) -> str:
    if isinstance(value, str):
        return display_string(value)
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, (np.generic,)):
        return str(value.item())
    return str(value)


def _is_array(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray, LazyStrings))


def _element_type(type_name: str) -> str:
    """'ARRAY[STRING]' -> 'STRING'; other names unchanged."""
    return type_name[6:-1] if type_name.startswith("ARRAY[") else type_name


def _type_of(value: Any) -> str:
    """A type name for values that come without one (safetensors metadata, nested arrays)."""
    if isinstance(value, np.ndarray):
        return f"ARRAY[{value.dtype.name.upper()}]"
    if _is_array(value):
        return f"ARRAY[{_type_of(value[0]) if len(value) else '?'}]"
    names = {bool: "BOOL", int: "INT", float: "FLOAT", str: "STRING"}
    return names.get(type(value), type(value).__name__)


def summarize(value: Any) -> str:
    """One line for any metadata value; arrays give their length and first items.

    >>> summarize(["a", "b"])
    '[2] "a", "b"'
    """
    if not _is_array(value):
        text = _render_scalar(value)
        return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"
    head = [value[i] for i in range(min(len(value), SUMMARY_ITEMS))]
    items = ", ".join(f'"{display_string(v)}"' if isinstance(v, str) else
                      (f"[{len(v)}]" if _is_array(v) else _render_scalar(v)) for v in head)
    more = ", …" if len(value) > SUMMARY_ITEMS else ""
    return f"[{len(value):,}] {items}{more}"


# ------------------------------------------------------------------ metadata tree

@dataclass(eq=False)
class _Node:
    key: str
    value: Any = None
    type_name: str = ""
    parent: "_Node | None" = None
    row: int = 0
    children: list["_Node"] = field(default_factory=list)
    total: int = 0          # children the node has in all (loaded or not)
    full_key: str = ""

    def load(self, n: int) -> list["_Node"]:
        """Create the next `n` children of an array node."""
        start = len(self.children)
        stop = min(self.total, start + n)
        etype = _element_type(self.type_name)
        new = []
        for i in range(start, stop):
            v = self.value[i]
            t = _type_of(v) if _is_array(v) or not etype or etype.startswith("ARRAY") else etype
            node = _Node(f"[{i}]", v, t, self, i, total=len(v) if _is_array(v) else 0,
                         full_key=f"{self.full_key}[{i}]")
            new.append(node)
        self.children.extend(new)
        return new


class MetadataModel(Headed, QAbstractItemModel):
    """Metadata keys grouped by their first dotted component; arrays expand lazily."""

    HEADERS = ("Key", "Type", "Value")
    TREE = True

    def __init__(self, metadata: dict[str, Any] | None = None,
                 types: dict[str, str] | None = None, parent=None) -> None:
        super().__init__(parent)
        self.root = _Node("")
        self.set_metadata(metadata or {}, types or {})

    def set_metadata(self, metadata: dict[str, Any], types: dict[str, str]) -> None:
        self.beginResetModel()
        self.root = _Node("")
        groups: dict[str, _Node] = {}
        for key, value in metadata.items():
            head, _, rest = key.partition(".")
            group = groups.get(head)
            if group is None:
                group = groups[head] = _Node(head, parent=self.root, row=len(self.root.children),
                                             full_key=head)
                self.root.children.append(group)
            t = types.get(key) or _type_of(value)
            node = _Node(rest or key, value, t, group, len(group.children),
                         total=len(value) if _is_array(value) else 0, full_key=key)
            group.children.append(node)
        for group in self.root.children:
            group.total = len(group.children)
            group.value = f"{group.total} keys"
        self.endResetModel()

    def node(self, index: QModelIndex) -> _Node:
        return index.internalPointer() if index.isValid() else self.root

    # -- structure
    def index(self, row: int, column: int, parent: QModelIndex = QModelIndex()) -> QModelIndex:
        node = self.node(parent)
        if 0 <= row < len(node.children) and 0 <= column < len(self.HEADERS):
            return self.createIndex(row, column, node.children[row])
        return QModelIndex()

    def parent(self, index: QModelIndex = QModelIndex()) -> QModelIndex:  # type: ignore[override]
        if not index.isValid():
            return QModelIndex()
        node = index.internalPointer().parent
        if node is None or node is self.root:
            return QModelIndex()
        return self.createIndex(node.row, 0, node)

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        if parent.isValid() and parent.column() != 0:
            return 0
        return len(self.node(parent).children)

    def hasChildren(self, parent: QModelIndex = QModelIndex()) -> bool:  # noqa: N802
        if parent.isValid() and parent.column() != 0:
            return False          # children hang off the first column only
        node = self.node(parent)
        return bool(node.children) or node.total > 0

    def canFetchMore(self, parent: QModelIndex) -> bool:  # noqa: N802
        if not parent.isValid() or parent.column() != 0:
            return False
        node = self.node(parent)
        return len(node.children) < node.total

    def fetchMore(self, parent: QModelIndex) -> None:  # noqa: N802
        if not self.canFetchMore(parent):
            return
        node = self.node(parent)
        n = min(FETCH_CHUNK, node.total - len(node.children))
        if n <= 0:
            return
        start = len(node.children)
        self.beginInsertRows(parent, start, start + n - 1)
        node.load(n)
        self.endInsertRows()

    # -- content
    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        node = index.internalPointer()
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (node.key, node.type_name, self._value_text(node))[col]
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == 2 and isinstance(node.value, str):
                return display_string(node.value)[:4000]
            return node.full_key
        return None

    @staticmethod
    def _value_text(node: _Node) -> str:
        if node.parent is not None and node.parent.parent is None and isinstance(node.value, str) \
                and node.value.endswith(" keys"):
            return node.value                                        # a group row
        return summarize(node.value) if node.value is not None else ""



# ------------------------------------------------------------------ tensor table

def _tensor_columns(t: Any) -> tuple:
    """(display, sort key) per column for one TensorInfo."""
    n = t.n_elements
    bpw = 8 * t.nbytes / n if n else 0.0
    return (
        (t.name, t.name),
        ("(" + ", ".join(str(d) for d in t.shape) + ")", tuple(t.shape)),
        (t.dtype, t.dtype),
        (f"{n:,}", n),
        (f"{t.nbytes:,}", t.nbytes),
        (f"{bpw:.4g}", bpw),
        (f"0x{t.offset:X}", t.offset),
    )


TENSOR_HEADERS = ("Name", "Shape", "Type", "Elements", "Bytes", "Bits/weight", "File offset")
_RIGHT = {3, 4, 5, 6}


class TensorTableModel(Headed, QAbstractTableModel):
    """One row per TensorInfo; cells are formatted when asked for, never stored."""

    HEADERS = TENSOR_HEADERS

    def __init__(self, tensors: list | None = None, parent=None) -> None:
        super().__init__(parent)
        self.tensors: list = list(tensors or [])

    def set_tensors(self, tensors: list) -> None:
        self.beginResetModel()
        self.tensors = list(tensors)
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.tensors)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        t = self.tensors[index.row()]
        return _cell(t, index.column(), role)


    def row_of(self, name: str) -> int:
        return next((i for i, t in enumerate(self.tensors) if t.name == name), -1)


#: the roles a tensor cell answers, as plain ints: views ask every cell for a dozen roles per
#: paint, and comparing against the enum members costs ~1 µs each
_DISPLAY, _ALIGN, _TOOLTIP = (int(r) for r in (
    Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.TextAlignmentRole, Qt.ItemDataRole.ToolTipRole))
_CELL_ROLES = frozenset((_DISPLAY, _ALIGN, _TOOLTIP, int(SORT_ROLE), int(NAME_ROLE)))
_ALIGN_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)


def _cell(t: Any, col: int, role: int) -> Any:
    if role not in _CELL_ROLES:
        return None
    if role == _DISPLAY:
        return _tensor_columns(t)[col][0]
    if role == SORT_ROLE:
        return _sort_key(_tensor_columns(t)[col][1])
    if role == NAME_ROLE:
        return t.name
    if role == _ALIGN and col in _RIGHT:
        return _ALIGN_RIGHT
    if role == _TOOLTIP:
        return (f"{t.name}\n{t.dtype} {tuple(t.shape)}\n"
                f"file bytes 0x{t.offset:X}–0x{t.offset + t.nbytes:X} of {Path(t.file).name}")
    return None


def _sort_key(value: Any) -> Any:
    """Qt compares QVariants: shapes sort by element count, then as text."""
    if isinstance(value, tuple):
        return float(math.prod(value))
    return value


def block_group(name: str) -> str:
    """The `blk.N` group of a tensor name, or '' for tensors outside the repeated blocks.

    >>> block_group("blk.12.attn_q.weight"), block_group("model.layers.3.mlp.up_proj.weight")
    ('blk.12', 'model.layers.3')
    """
    m = BLOCK_RE.match(name)
    return m.group(1) if m else ""


class TensorTable(CopyableRowTable):
    """The flat tensor table (a `TensorTableModel` behind a sorting, filtering proxy): each
    visible row is painted from its tensor's `_tensor_columns` (a screen of ~150 cells took
    ~22 ms per repaint through QTableView's own paint)."""

    right_columns = frozenset(_RIGHT)

    def row_texts(self, row: int) -> tuple[list[str], None, None]:
        proxy = self.model()
        t = proxy.sourceModel().tensors[proxy.mapToSource(proxy.index(row, 0)).row()]
        return [display for display, _ in _tensor_columns(t)], None, None


class TensorTreeModel(Headed, QAbstractItemModel):
    """The tensors grouped by `blk.N` (two levels: group rows, then tensor rows)."""

    HEADERS, TREE = TENSOR_HEADERS, True

    def __init__(self, tensors: list | None = None, parent=None) -> None:
        super().__init__(parent)
        self.groups: list[tuple[str, list]] = []
        self.set_tensors(tensors or [])

    def set_tensors(self, tensors: list) -> None:
        self.beginResetModel()
        by_group: dict[str, list] = {}
        for t in tensors:
            by_group.setdefault(block_group(t.name), []).append(t)

        def order(key: str) -> tuple:
            nums = re.findall(r"\d+", key)
            return (key != "", key.rsplit(".", 1)[0], int(nums[-1]) if nums else -1)
        self.groups = [(k or "(outside the blocks)", by_group[k])
                       for k in sorted(by_group, key=order)]
        self.endResetModel()

    # internalId: 0 for a group row, group index + 1 for a tensor row
    def index(self, row: int, column: int, parent: QModelIndex = QModelIndex()) -> QModelIndex:
        if not self.hasIndex(row, column, parent):
            return QModelIndex()
        return self.createIndex(row, column, 0 if not parent.isValid() else parent.row() + 1)

    def parent(self, index: QModelIndex = QModelIndex()) -> QModelIndex:  # type: ignore[override]
        if not index.isValid() or index.internalId() == 0:
            return QModelIndex()
        return self.createIndex(index.internalId() - 1, 0, 0)

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        if not parent.isValid():
            return len(self.groups)
        if parent.internalId() == 0 and parent.column() == 0:
            return len(self.groups[parent.row()][1])
        return 0

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        if index.internalId():
            t = self.groups[index.internalId() - 1][1][index.row()]
            return _cell(t, index.column(), role)
        return self._group_cell(index.row(), index.column(), role)

    def _group_cell(self, row: int, col: int, role: int) -> Any:
        name, tensors = self.groups[row]
        n = sum(t.n_elements for t in tensors)
        nbytes = sum(t.nbytes for t in tensors)
        values = {0: (f"{name}  ({len(tensors)} tensors)", name), 3: (f"{n:,}", n),
                  4: (f"{nbytes:,}", nbytes),
                  5: (f"{8 * nbytes / n:.4g}" if n else "", 8 * nbytes / n if n else 0.0),
                  6: (f"0x{min(t.offset for t in tensors):X}", min(t.offset for t in tensors))}
        if role == Qt.ItemDataRole.DisplayRole:
            return values.get(col, ("", ""))[0]
        if role == SORT_ROLE:
            return values.get(col, ("", ""))[1]
        if role == Qt.ItemDataRole.TextAlignmentRole and col in _RIGHT:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.FontRole and col == 0:
            font = QFont()
            font.setBold(True)
            return font
        return None



class TensorFilter(QSortFilterProxyModel):
    """Case-insensitive name filter that keeps a group when any of its tensors match."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setFilterKeyColumn(0)
        self.setRecursiveFilteringEnabled(True)
        self.setAutoAcceptChildRows(False)

    def filterAcceptsRow(self, row: int, parent: QModelIndex) -> bool:  # noqa: N802
        model = self.sourceModel()
        # rowCount, not hasChildren: QAbstractTableModel.hasChildren on a valid index
        # crashes PySide6 6.11
        if model.rowCount(model.index(row, 0, parent)) > 0:
            return False  # a group is shown through its matching children (recursive)
        return super().filterAcceptsRow(row, parent)


# ------------------------------------------------------------------ totals by type

class TotalsModel(Headed, QAbstractTableModel):
    """Tensors, elements and bytes per storage type, with the share of the file."""

    HEADERS = ("Type", "Tensors", "Elements", "Bytes", "Share")

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[tuple[str, int, int, int]] = []
        self.total = 0

    def set_tensors(self, tensors: list) -> None:
        self.beginResetModel()
        acc: dict[str, list[int]] = {}
        for t in tensors:
            a = acc.setdefault(t.dtype, [0, 0, 0])
            a[0] += 1
            a[1] += t.n_elements
            a[2] += t.nbytes
        self.rows = sorted(((k, *v) for k, v in acc.items()), key=lambda r: -r[3])
        self.total = sum(r[3] for r in self.rows)
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.rows) + (1 if self.rows else 0)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        is_total = index.row() == len(self.rows)
        if is_total:
            row = ("total", sum(r[1] for r in self.rows), sum(r[2] for r in self.rows), self.total)
        else:
            row = self.rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            share = f"{100 * row[3] / self.total:.1f} %" if self.total else ""
            return (row[0], f"{row[1]:,}", f"{row[2]:,}", fmt_bytes(row[3]), share)[col]
        if role == Qt.ItemDataRole.TextAlignmentRole and col > 0:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.FontRole and is_total:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole and col == 3:
            return f"{row[3]:,} bytes"
        return None



# ------------------------------------------------------------------ memory planner

SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2,
              "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
              "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_budget(text: str) -> int:
    """A memory size typed by a user, in bytes: SI units (MB) or binary units (MiB).

    >>> parse_budget("300 MB"), parse_budget("2 GiB"), parse_budget("1.5g")
    (300000000, 2147483648, 1500000000)
    """
    m = _SIZE_RE.match(text.replace(",", "").replace("_", ""))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in SIZE_UNITS:
        raise ValueError(f"cannot read {text!r} as a size: try '300 MB' or '2 GiB'")
    return int(float(m.group(1)) * SIZE_UNITS[unit])


class PlanPartsModel(Headed, QAbstractTableModel):
    """The planner's bytes per part (one row per tensor), read from a `memory.MemoryPlan`."""

    HEADERS = ("Tensor", "Parameters", "Type", "Bytes")

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.parts: tuple = ()

    def set_plan(self, plan: Any) -> None:
        self.beginResetModel()
        self.parts = tuple(plan.parts) if plan is not None else ()
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.parts)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        p, col = self.parts[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (p.name, f"{p.n_params:,}", p.dtype, f"{p.nbytes:,}")[col]
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (1, 3):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None



class PlannerPanel(QGroupBox):
    """What the model needs at f16 / int8 / int4, and the planner's choice for a budget."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Memory planner", parent)
        self.setObjectName("memoryPlanner")
        self.weights = None
        self.plan = None
        self.needs = QLabel("—")
        self.needs.setObjectName("plannerNeeds")
        self.needs.setTextFormat(Qt.TextFormat.RichText)
        self.budget = QLineEdit()
        self.budget.setObjectName("plannerBudget")
        self.budget.setPlaceholderText("budget, e.g. 300 MB or 2 GiB")
        self.budget.textChanged.connect(self.update_plan)
        self.choice = QLabel("Type a budget to see the planner's choice.")
        self.choice.setObjectName("plannerChoice")
        self.choice.setWordWrap(True)
        self.choice.setTextFormat(Qt.TextFormat.RichText)
        self.parts_model = PlanPartsModel(self)
        self.parts_table = CopyableTableView()
        self.parts_table.setObjectName("plannerParts")
        self.parts_table.setModel(self.parts_model)
        header = self.parts_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)  # names fill the width
        self.parts_table.setMinimumHeight(120)
        self.parts_table.hide()
        form = QFormLayout(self)
        form.addRow("needs:", self.needs)
        form.addRow("budget:", self.budget)
        form.addRow(self.choice)
        form.addRow(self.parts_table)

    def set_weights(self, weights: Any) -> None:
        from forma_gui.core import memory

        self.weights = weights
        if weights is None:
            self.needs.setText("—")
            self.choice.setText("Open a weight file.")
            self._set_plan(None)
            return
        params = {t.name: t.n_elements for t in weights.tensors}
        if not params:
            self.needs.setText("—")
            self.choice.setText("This file holds no tensors: nothing to plan.")
            self._set_plan(None)
            return
        totals = memory.totals_by_type(params)
        n = sum(params.values())
        needs = " · ".join(f"{label} ({memory.DISPLAY_TYPES[label]}): <b>{fmt_bytes(v)}</b>"
                           for label, v in totals.items())
        self.needs.setText(f"{n:,} parameters<br>{needs}")
        self.update_plan()

    def update_plan(self) -> None:
        from forma_gui.core import memory

        if self.weights is None or not len(self.weights.tensors):
            return
        text = self.budget.text().strip()
        if not text:
            self.choice.setText("Type a budget to see the planner's choice.")
            self._set_plan(None)
            return
        try:
            budget = parse_budget(text)
        except ValueError as e:
            self.choice.setText(f"<span style='color:#b3261e'>{e}</span>")
            self._set_plan(None)
            return
        plan = memory.plan_memory(self.weights, budget)
        self.choice.setText(plan_html(plan))
        self._set_plan(plan)

    def _set_plan(self, plan: Any) -> None:
        self.plan = plan
        self.parts_model.set_plan(plan)
        self.parts_table.setVisible(plan is not None)


def plan_html(plan: Any) -> str:
    """The planner's decision, its total against the budget and the bytes per type, as rich text."""
    verdict = ("fits" if plan.fits else
               "<span style='color:#b3261e'>does not fit, even at int4</span>")
    by_type = plan.bytes_by_type()
    counts: dict[str, int] = {}
    for p in plan.parts:
        counts[p.dtype] = counts.get(p.dtype, 0) + 1
    rows = " · ".join(f"{dtype}: {fmt_bytes(n)} ({_count(counts[dtype], 'tensor')})"
                      for dtype, n in by_type.items())
    why = ("the whole model fits at int8" if plan.precision == "int8" else
           "int8 does not fit: int4, with the token embedding kept at int8")
    return (f"choice: <b>{plan.precision}</b> — {fmt_bytes(plan.total)} of "
            f"{fmt_bytes(plan.budget)}, {verdict}<br>{why}<br>{rows}")


def _count(n: int, noun: str) -> str:
    """`1 tensor`, `3 tensors`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


# ------------------------------------------------------------------ the view

class ModelView(QWidget):
    """Metadata, tensors and sizes of the open weight file."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelView")
        self.session = session
        self._build_ui()
        session.weights_changed.connect(self.set_weights)
        session.tensor_selected.connect(self._select_in_table)
        self.set_weights(session.weights)

    def _build_ui(self) -> None:
        self.summary = QLabel("No weight file open.")
        self.summary.setObjectName("modelSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.metadata_model = MetadataModel(parent=self)
        self.metadataView = CopyableTreeView()  # noqa: N815 - the issue's objectName
        self.metadataView.setObjectName("metadataView")
        self.metadataView.setModel(self.metadata_model)
        self.metadataView.header().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.metadataView.setColumnWidth(0, 230)
        self.metadataView.setColumnWidth(1, 110)

        self.table_model = TensorTableModel(parent=self)
        # the flat table needs no group logic: Qt's own filter, with no Python call per row
        self.table_proxy = QSortFilterProxyModel(self)
        self.table_proxy.setSortRole(SORT_ROLE)
        self.table_proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.table_proxy.setFilterKeyColumn(0)
        self.table_proxy.setSourceModel(self.table_model)
        self.tensorTable = TensorTable()  # noqa: N815
        self.tensorTable.setObjectName("tensorTable")
        self.tensorTable.setModel(self.table_proxy)
        self.tensorTable.setSortingEnabled(True)
        self.tensorTable.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
        self.tensorTable.horizontalHeader().setStretchLastSection(True)
        self.tensorTable.horizontalHeader().setResizeContentsPrecision(SIZE_ROWS)
        self.tensorTable.selectionModel().currentRowChanged.connect(self._row_changed)

        self.tree_model = TensorTreeModel(parent=self)
        self._tree_tensors: list | None = None  # tensors the tree has yet to show (built when shown)
        self.tree_proxy = TensorFilter(self)
        self.tree_proxy.setSourceModel(self.tree_model)
        self.tensorTree = CopyableTreeView()  # noqa: N815
        self.tensorTree.setObjectName("tensorTree")
        self.tensorTree.setModel(self.tree_proxy)
        self.tensorTree.setSortingEnabled(True)
        self.tensorTree.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
        self.tensorTree.header().setResizeContentsPrecision(SIZE_ROWS)
        self.tensorTree.selectionModel().currentRowChanged.connect(self._row_changed)

        self.filter_edit = QLineEdit()
        self.filter_edit.setObjectName("tensorFilter")
        self.filter_edit.setPlaceholderText("filter by name, e.g. attn_q or blk.3.")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self.set_filter)
        self.group_box = QCheckBox("Group by block")
        self.group_box.setObjectName("groupByBlock")
        self.group_box.toggled.connect(self.set_grouped)
        self.count_label = QLabel()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.tensorTable)
        self.stack.addWidget(self.tensorTree)

        bar = QHBoxLayout()
        bar.addWidget(self.filter_edit, 1)
        bar.addWidget(self.group_box)
        bar.addWidget(self.count_label)
        tensors = QWidget()
        tv = QVBoxLayout(tensors)
        tv.setContentsMargins(0, 0, 0, 0)
        tv.addLayout(bar)
        tv.addWidget(self.stack, 1)

        self.totals_model = TotalsModel(self)
        self.totalsTable = CopyableTableView()  # noqa: N815
        self.totalsTable.setObjectName("totalsTable")
        self.totalsTable.setModel(self.totals_model)
        self.totalsTable.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents)
        self.planner = PlannerPanel()
        totals_box = QGroupBox("Totals by type")
        QVBoxLayout(totals_box).addWidget(self.totalsTable)
        side = QWidget()
        sv = QVBoxLayout(side)
        sv.setContentsMargins(0, 0, 0, 0)
        sv.addWidget(totals_box)
        sv.addWidget(self.planner)
        sv.addStretch(1)

        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.addWidget(tensors)
        lower.addWidget(side)
        lower.setStretchFactor(0, 3)
        lower.setStretchFactor(1, 1)
        lower.setSizes([900, 420])
        meta_box = QWidget()
        mv = QVBoxLayout(meta_box)
        mv.setContentsMargins(0, 0, 0, 0)
        mv.addWidget(QLabel("<b>Metadata</b>"))
        mv.addWidget(self.metadataView)
        outer = QSplitter(Qt.Orientation.Vertical)
        outer.addWidget(meta_box)
        outer.addWidget(lower)
        outer.setSizes([280, 560])
        lay = QVBoxLayout(self)
        lay.addWidget(self.summary)
        lay.addWidget(outer, 1)

    # -- content
    def set_weights(self, weights: Any) -> None:
        tensors = list(weights.tensors) if weights is not None else []
        meta = dict(weights.metadata) if weights is not None else {}
        types = dict(getattr(weights, "metadata_types", None) or {})
        self.metadata_model.set_metadata(meta, types)
        for r in range(self.metadata_model.rowCount()):
            self.metadataView.expand(self.metadata_model.index(r, 0))
        self.table_model.set_tensors(tensors)
        self._tree_tensors = tensors
        if self.stack.currentIndex():  # the tree is shown; else set_grouped builds it
            self._fill_tree()
            self._expand_tree()
        self.totals_model.set_tensors(tensors)
        self.planner.set_weights(weights)
        self._fit_columns(tensors)
        totals = self.totalsTable
        totals.setFixedHeight(totals.horizontalHeader().height() + 4 + self.totals_model.rowCount()
                              * totals.verticalHeader().defaultSectionSize())
        self.summary.setText(self._summary(weights, tensors))
        self._update_count()
        if self.session.tensor:
            self._select_in_table(self.session.tensor)

    def _fit_columns(self, tensors: list) -> None:
        """Column widths from the widest text of a sample of rows, measured directly.

        Qt's resizeColumnsToContents asks data() for every role of every sampled cell through
        the proxy: ~70 ms of the GUI thread for 400 tensors, on each open.
        """
        longest = sorted(tensors, key=lambda t: len(t.name))[-4:]
        rows = [_tensor_columns(t) for t in tensors[:SIZE_ROWS] + longest]
        fm, header = self.tensorTable.fontMetrics(), self.tensorTable.horizontalHeader()
        head_fm = header.fontMetrics()
        for col, title in enumerate(TENSOR_HEADERS):
            cells = max((fm.horizontalAdvance(row[col][0]) for row in rows), default=0)
            self.tensorTable.setColumnWidth(col, max(cells + 12, head_fm.horizontalAdvance(title) + 28))
        self.tensorTable.setColumnWidth(0, max(self.tensorTable.columnWidth(0) + 40, 260))

    def _fill_tree(self) -> None:
        """Group the tensors into the tree, once it is shown: its proxy asks Python whether to
        keep each of its rows (~10 ms for 500 tensors, on every open)."""
        if self._tree_tensors is not None:
            self.tree_model.set_tensors(self._tree_tensors)
            self._tree_tensors = None

    def _expand_tree(self) -> None:
        self.tensorTree.expandAll()
        self.tensorTree.resizeColumnToContents(0)

    def _summary(self, weights: Any, tensors: list) -> str:
        if weights is None:
            return "No weight file open."
        path = getattr(weights, "path", "") or self.session.path or ""
        n = sum(t.n_elements for t in tensors)
        size = sum(t.nbytes for t in tensors)
        arch = weights.metadata.get("general.architecture", "")
        name = weights.metadata.get("general.name", "")
        head = " · ".join(display_string(str(x)) for x in (name, arch) if x)
        if not tensors:
            return (f"<b>{head or path}</b> — {path}<br>no tensors: a vocabulary-only file "
                    "(its metadata is below)")
        bits = f" · {8 * size / n:.2f} bits/weight on average" if n else ""
        files = getattr(weights, "files", [])
        shards = f" · {len(files)} files" if len(files) > 1 else ""
        return (f"<b>{head or path}</b> — {path}<br>{len(tensors)} tensors · {n:,} parameters"
                f" · {fmt_bytes(size)} of tensor data{bits}{shards}")

    def set_filter(self, text: str) -> None:
        self.table_proxy.setFilterFixedString(text)
        self.tree_proxy.setFilterFixedString(text)
        if text:
            self.tensorTree.expandAll()
        self._update_count()

    def set_grouped(self, grouped: bool) -> None:
        self.stack.setCurrentIndex(1 if grouped else 0)
        if grouped:
            self._fill_tree()
            self._expand_tree()
        if self.session.tensor:
            self._select_in_table(self.session.tensor)

    def _update_count(self) -> None:
        shown, total = self.table_proxy.rowCount(), self.table_model.rowCount()
        self.count_label.setText(f"{shown} of {total} tensors" if shown != total
                                 else f"{total} tensors")

    # -- selection <-> session
    def _row_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        name = current.data(NAME_ROLE) if current.isValid() else None
        if name:
            self.session.select_tensor(name)

    def _select_in_table(self, name: str) -> None:
        view = self.tensorTree if self.stack.currentIndex() else self.tensorTable
        proxy = view.model()
        match = self._find(proxy, name)
        if match is None or view.currentIndex().data(NAME_ROLE) == name:
            return
        flags = QItemSelectionModel.SelectionFlag
        view.selectionModel().setCurrentIndex(match, flags.ClearAndSelect | flags.Rows)
        view.scrollTo(match)

    @staticmethod
    def _find(proxy: QSortFilterProxyModel, name: str) -> QModelIndex | None:
        hits = proxy.match(proxy.index(0, 0), NAME_ROLE, name, 1,
                           Qt.MatchFlag.MatchExactly | Qt.MatchFlag.MatchRecursive)
        return hits[0] if hits else None
