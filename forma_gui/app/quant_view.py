"""The Quantization view (`quantView`): per-block scales, a block microscope, requantizing.

For a block-quantized tensor it plots every block's scale `d` along the tensor (with `m`,
`dmin` and the K-quant sub-block scales on toggles) and a rows × blocks heatmap of them.
Clicking a block opens it in the `BlockMicroscope`: its bytes grouped by field, the
quants as low/high nibbles, and each value with the format's formula filled in. The
requantize experiment quantizes the same values to Q8_0 / Q4_0 / Q4_1 / Q5_0 and compares
the errors. With no weight file open the view works on a demo matrix quantized on the fly.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Generator

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import (QCheckBox, QComboBox, QHBoxLayout, QHeaderView, QLabel,
                               QPushButton, QScrollArea, QSpinBox, QSplitter, QTabWidget,
                               QVBoxLayout, QWidget)

from forma_gui.app.item_models import Headed
from forma_gui.app.state import Session
from forma_gui.app.tensor_support import (CatchesUpWhenShown, CopyableTableView, EnvelopeCurve,
                                          JobProgress, TensorPicker,
                                          TensorSource, demo_source, dequantize_range,
                                          ensure_selection, export_button, fmt_float, has_tensors,
                                          scaled, source_from_weights)
from forma_gui.app.workers import LatestRunner
from forma_gui.core import quant
from forma_gui.core.ggml_types import GGML_TYPES, bits_per_weight
from forma_gui.errors import FormatError

#: formats of the requantize experiment, in the order they are shown
REQUANT_FORMATS = ("Q8_0", "Q4_0", "Q4_1", "Q5_0")
#: the requantize experiment works on at most this many values (rows are cut to fit)
REQUANT_MAX_VALUES = 1 << 20
ERROR_BINS = 81
#: heatmaps of taller tensors pool rows (max) down to this many image rows
HEATMAP_ROWS = 2048
#: fill colour per block field in the microscope
FIELD_COLORS = {
    "d": "#f6c177", "m": "#9ccfd8", "dmin": "#9ccfd8", "e": "#f6c177",
    "scales": "#c4a7e7", "scales_h": "#c4a7e7", "scales_l": "#c4a7e7",
    "qs": "#d5e8d4", "ql": "#d5e8d4", "qh": "#f4b6c2", "hmask": "#f4b6c2",
    "bsums": "#e0e0e0", "value": "#d5e8d4",
}
#: pen per scale curve
CURVE_PENS = {"d": "#1f5fa8", "m": "#c2571a", "dmin": "#c2571a",
              "sub-block scales": "#6a3d9a", "sub-block mins": "#b15928"}


# ------------------------------------------------------------------ scales of a tensor

@dataclass
class ScaleResult:
    """Per-block scales of a whole tensor, and what the plots draw, all prepared in the worker."""

    name: str
    scales: dict[str, np.ndarray]       # d, m, dmin: (n_blocks,); scales, mins: (n_blocks, n_sub)
    n_rows: int
    blocks_per_row: int
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    images: dict[str, np.ndarray] = field(default_factory=dict)   # (<= HEATMAP_ROWS, columns)
    rows_per_pixel: int = 1             # heatmap rows pooled (max) into one image row


def scale_curves(scales: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Plot series: name -> (x in blocks, y); sub-block factors sit inside their block."""
    out = {}
    for key in ("d", "m", "dmin"):
        if key in scales:
            out[key] = (np.arange(scales[key].size, dtype=np.float64), scales[key])
    for key, base, label in (("scales", "d", "sub-block scales"),
                             ("mins", "dmin", "sub-block mins")):
        if key in scales and base in scales:
            sub = scales[key]                                            # (n, n_sub)
            y = (scales[base][:, None] * sub.astype(np.float32)).reshape(-1)
            x = (np.arange(sub.size, dtype=np.float64) + 0.5) / sub.shape[1] - 0.5
            out[label] = (x, y)
    return out


def pool_rows(image: np.ndarray, limit: int) -> tuple[np.ndarray, int]:
    """At most `limit` rows: groups of k rows become their maximum, so outliers stay visible.

    >>> pool_rows(np.arange(6.0).reshape(6, 1), 3)[0].ravel().tolist()
    [1.0, 3.0, 5.0]
    """
    k = -(-image.shape[0] // limit)
    if k <= 1:
        return image, 1
    pad = (-image.shape[0]) % k
    padded = np.pad(image, ((0, pad), (0, 0)), constant_values=np.nan) if pad else image
    with np.errstate(invalid="ignore"):
        return np.fmax.reduce(padded.reshape(-1, k, image.shape[1]), axis=1), k


def compute_scales(source: TensorSource) -> Generator[float, None, ScaleResult]:
    """`quant.block_scales` over the whole tensor, chunk by chunk, then the plot data."""
    blocks = source.blocks()
    n = blocks.shape[0]
    step = max(1, (1 << 22) // source.type_size)           # ~4 MiB of blocks per chunk
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, n, step):
        yield 0.9 * start / n
        source.verify()
        for key, value in quant.block_scales(blocks[start:start + step], source.dtype).items():
            parts.setdefault(key, []).append(value)
    scales = {k: np.concatenate(v) for k, v in parts.items()}
    curves = scale_curves(scales)
    yield 0.95
    images, k = {}, 1
    for key, (_, y) in curves.items():
        images[key], k = pool_rows(y.reshape(source.n_rows, -1), HEATMAP_ROWS)
    return ScaleResult(source.name, scales, source.n_rows, source.blocks_per_row, curves, images, k)


# ------------------------------------------------------------------ one block, explained

def block_formula_terms(dtype: str, scales: dict[str, np.ndarray], quants: np.ndarray,
                        index: int) -> dict[str, str]:
    """The numbers that go into element `index`'s formula (as text, float32 shortest form)."""
    n_sub = scales["scales"].shape[-1] if "scales" in scales else 1
    sub = index * n_sub // quants.size
    q = int(quants[index])
    terms = {"q": _signed(str(q))}
    for key in ("d", "m", "dmin"):
        if key in scales:
            terms[key] = _signed(fmt_float(scales[key].reshape(-1)[0]))
    if "scales" in scales:
        terms["scale"] = _signed(str(int(scales["scales"].reshape(-1)[sub])))
    if "mins" in scales:
        terms["min"] = _signed(str(int(scales["mins"].reshape(-1)[sub])))
    table = {"IQ4_NL": "IQ4_KVALUES", "IQ4_XS": "IQ4_KVALUES", "MXFP4": "MXFP4_KVALUES"}.get(dtype)
    if table and 0 <= q < 16:
        terms["kvalues[q]"] = _signed(str(int(getattr(quant, table)[q])))
    return terms


def _signed(number: str) -> str:
    """Negative numbers in parentheses, so `d · q + m` reads `0.1 · 3 + (-0.6)`."""
    return f"({number})" if number.startswith("-") else number


_SYMBOL_RE = re.compile(r"kvalues\[q\]|\bdmin\b|\bscale\b|\bmin\b|\bd\b|\bq\b|\bm\b")


def fill_formula(formula: str, terms: dict[str, str]) -> str:
    """Substitute the numbers of one element into a format's formula.

    >>> fill_formula("d · (q − 8)", {"d": "0.5", "q": "3"})
    '0.5 · (3 − 8)'
    """
    formula = formula.split(",")[0]       # "d · kvalues[q], d = 2^(e − 128)": the product
    return _SYMBOL_RE.sub(lambda m: terms.get(m.group(0), m.group(0)), formula)


@dataclass
class BlockInfo:
    """Everything the microscope shows about one block (a `quant.BlockView` plus its place)."""

    source: TensorSource
    index: int
    raw: np.ndarray                  # (type_size,) uint8
    view: Any                        # quant.BlockView
    fields: list[tuple[str, int, int, str]]   # name, start, end, value text

    @property
    def quants(self) -> np.ndarray:
        return np.asarray(self.view.quants).reshape(-1)

    @property
    def values(self) -> np.ndarray:
        return np.asarray(self.view.values, dtype=np.float32).reshape(-1)

    @property
    def formula(self) -> str:
        return self.view.formula

    @property
    def first_element(self) -> int:
        return self.index * self.source.block_size

    def element_formula(self, i: int) -> str:
        scales = {k: np.asarray(v) for k, v in self.view.scales.items()}
        return fill_formula(self.formula, block_formula_terms(self.source.dtype, scales,
                                                               self.quants, i))


def explain_block(source: TensorSource, index: int) -> BlockInfo:
    """Take block `index` of `source` apart with `quant.decode_block`."""
    raw = np.ascontiguousarray(source.blocks()[index]).reshape(-1).view(np.uint8)
    view = quant.decode_block(raw, source.dtype)
    nibble_field = view.nibble_layout.field if view.nibble_layout is not None else None
    fields = [(f.name, f.start, f.end, _field_value_text(f, view.scales, nibble_field))
              for f in view.fields]
    return BlockInfo(source, index, raw, view, fields)


def _field_value_text(field: Any, scales: dict[str, Any], nibble_field: str | None) -> str:
    """What a field means, in a few words: scales as numbers, packed quants as a pointer."""
    if field.name == "scales" and "scales" in scales:
        text = "scales " + _short_list(np.asarray(scales["scales"]))
        if "mins" in scales:
            text += "  mins " + _short_list(np.asarray(scales["mins"]))
        return text
    value = field.value
    if isinstance(value, float):
        return fmt_float(value)
    if isinstance(value, int):
        return str(value)
    arr = np.asarray(value)
    if arr.dtype.kind == "i":                       # Q8_0 / Q8_K: one signed byte per quant
        return f"{arr.size} × int8 quants " + _short_list(arr, 8)
    if field.name == nibble_field or (nibble_field and field.name in ("qh",)):
        return "packed quants (see the nibbles below)"
    if field.name in ("qs", "ql", "qh", "hmask"):
        return "packed quant bits (see q in the values table)"
    return _short_list(arr)


def _short_list(arr: np.ndarray, limit: int = 16) -> str:
    head = arr.reshape(-1)[:limit]
    items = [fmt_float(v) if arr.dtype.kind == "f" else str(int(v)) for v in head]
    return "[" + ", ".join(items) + (", …]" if arr.size > limit else "]")


# ------------------------------------------------------------------ microscope widgets

class HexCells(QWidget):
    """A block's bytes as hex cells, coloured and labelled by field."""

    CELL_W, CELL_H, LABEL_H, MARGIN = 27, 24, 15, 6

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("blockHex")
        self.setMouseTracking(True)
        self.raw = np.zeros(0, np.uint8)
        self.fields: list[tuple[str, int, int, str]] = []
        self.per_line = 20
        self.file_offset: int | None = None
        self._mono = QFont("monospace")
        self._mono.setStyleHint(QFont.StyleHint.TypeWriter)
        self._mono.setPointSizeF(9)
        self._small = QFont(self.font())
        self._small.setPointSizeF(7.5)

    def set_block(self, raw: np.ndarray, fields: list[tuple[str, int, int, str]],
                  file_offset: int | None) -> None:
        self.raw, self.fields, self.file_offset = raw, fields, file_offset
        self._reflow(self.width())
        self.update()

    def _reflow(self, width: int) -> None:
        """Cells per line from the width: a whole small block on one line, else multiples of 8."""
        fit = max(8, (width - 2 * self.MARGIN) // self.CELL_W)
        self.per_line = int(self.raw.size) if 0 < self.raw.size <= fit else fit // 8 * 8
        self.setMinimumHeight(self._height())
        self.updateGeometry()

    def resizeEvent(self, event) -> None:  # noqa: N802
        self._reflow(event.size().width())
        super().resizeEvent(event)

    def _height(self) -> int:
        lines = max(1, math.ceil(self.raw.size / self.per_line))
        return self.MARGIN * 2 + lines * (self.CELL_H + self.LABEL_H + 4)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(self.MARGIN * 2 + min(self.raw.size or 20, 24) * self.CELL_W, self._height())

    def _field_of(self, i: int) -> tuple[str, int, int, str] | None:
        return next((f for f in self.fields if f[1] <= i < f[2]), None)

    def _rect(self, i: int) -> QRectF:
        line, col = divmod(i, self.per_line)
        y = self.MARGIN + line * (self.CELL_H + self.LABEL_H + 4) + self.LABEL_H
        return QRectF(self.MARGIN + col * self.CELL_W, y, self.CELL_W - 2, self.CELL_H)

    def paintEvent(self, event) -> None:  # noqa: N802
        p = QPainter(self)
        p.fillRect(self.rect(), self.palette().base())
        for i, byte in enumerate(self.raw):
            f = self._field_of(i)
            name = f[0] if f else ""
            rect = self._rect(i)
            p.fillRect(rect, QColor(FIELD_COLORS.get(name, "#eeeeee")))
            p.setPen(QColor(0, 0, 0, 60))
            p.drawRect(rect)
            p.setPen(QColor("#111111"))
            p.setFont(self._mono)
            p.drawText(rect, Qt.AlignmentFlag.AlignCenter, f"{int(byte):02X}")
            if f and (i == f[1] or i % self.per_line == 0):
                p.setFont(self._small)
                p.setPen(QColor("#333333"))
                label = name if i == f[1] else f"{name} …"
                p.drawText(QPointF(rect.left() + 1, rect.top() - 3), label)
            if f and i == f[1] and i:
                p.setPen(QPen(QColor("#222222"), 2))
                x = rect.left() - 1
                p.drawLine(QPointF(x, rect.top() - 2), QPointF(x, rect.bottom() + 2))

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        pos = event.position()
        for i in range(self.raw.size):
            if self._rect(i).contains(pos):
                f = self._field_of(i)
                where = ("" if self.file_offset is None else
                         f"file byte 0x{self.file_offset + i:X}")
                byte = int(self.raw[i])
                self.setToolTip(f"byte {i} of the block ({f[0] if f else '?'}) = 0x{byte:02X}"
                                f" = {byte}\n{where}")
                return
        self.setToolTip("")


class NibbleGrid(QWidget):
    """Packed quant bytes split into their low and high nibbles, with the element each becomes.

    For Q4_0/Q4_1/Q5_x the 16 `qs` bytes give elements 0–15 (low nibbles) and 16–31 (high
    nibbles); K-quants repeat the pattern in runs of 32 or 64. Bits stored elsewhere (`qh`)
    are shown under the nibble they complete.
    """

    COL_W, ROW_H, HEAD_W, MARGIN, PER_LINE = 34, 24, 168, 6, 16

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("nibbleGrid")
        self.layout_ = None                     # quant.NibbleLayout
        self.quants = np.zeros(0, np.int64)     # element order
        self._mono = QFont("monospace")
        self._mono.setStyleHint(QFont.StyleHint.TypeWriter)
        self._mono.setPointSizeF(9)
        self._small = QFont(self.font())
        self._small.setPointSizeF(6.5)

    def set_block(self, layout: Any, quants: np.ndarray) -> None:
        self.layout_, self.quants = layout, quants
        self.setMinimumHeight(self._height())
        self.updateGeometry()
        self.update()

    def _rows(self, j0: int, j1: int) -> list[tuple[str, list[tuple[str, str]], str]]:
        """(label, [(text, element note)] per byte, colour) rows for packed bytes j0..j1."""
        n = self.layout_
        packed = (n.hi[j0:j1].astype(np.int64) << 4) | n.lo[j0:j1]
        lo_e, hi_e = n.lo_element[j0:j1], n.hi_element[j0:j1]
        def cells(numbers: np.ndarray, elements: np.ndarray) -> list[tuple[str, str]]:
            return [(str(int(v)), f"e{int(e)}") for v, e in zip(numbers, elements)]

        rows = [(f"byte {n.field}[j]", [(f"{int(b):02X}", "") for b in packed], "#eeeeee"),
                ("low nibble → element", cells(n.lo[j0:j1], lo_e), "#cfe2f3"),
                ("high nibble → element", cells(n.hi[j0:j1], hi_e), "#fce5cd")]
        if n.high_bits is not None:
            hb = np.asarray(n.high_bits)
            rows += [(f"{n.high_field} bits above low", cells(hb[lo_e], lo_e), "#f4b6c2"),
                     (f"{n.high_field} bits above high", cells(hb[hi_e], hi_e), "#f4b6c2")]
        return rows

    def _chunks(self) -> list[tuple[int, int]]:
        if self.layout_ is None:
            return []
        n = len(self.layout_.lo)
        return [(j, min(n, j + self.PER_LINE)) for j in range(0, n, self.PER_LINE)]

    def _height(self) -> int:
        chunks = self._chunks()
        if not chunks:
            return 0
        per = len(self._rows(0, 1)) * self.ROW_H + 22
        return self.MARGIN * 2 + len(chunks) * per

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(self.HEAD_W + self.PER_LINE * self.COL_W + 2 * self.MARGIN, self._height())

    def paintEvent(self, event) -> None:  # noqa: N802
        p = QPainter(self)
        p.fillRect(self.rect(), self.palette().base())
        y = self.MARGIN
        x0 = self.MARGIN + self.HEAD_W
        for j0, j1 in self._chunks():
            p.setFont(self._small)
            p.setPen(QColor("#555555"))
            for j in range(j0, j1):
                p.drawText(QRectF(x0 + (j - j0) * self.COL_W, y, self.COL_W, 14),
                           Qt.AlignmentFlag.AlignCenter, f"j={j}")
            y += 16
            for label, cells, color in self._rows(j0, j1):
                self._paint_row(p, y, label, cells, color)
                y += self.ROW_H
            y += 6

    def _paint_row(self, p: QPainter, y: float, label: str, cells: list[tuple[str, str]],
                   color: str) -> None:
        x0 = self.MARGIN + self.HEAD_W
        p.setFont(self.font())
        p.setPen(self.palette().text().color())
        p.drawText(QRectF(self.MARGIN, y, self.HEAD_W - 8, self.ROW_H),
                   Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight, label)
        for k, (text, note) in enumerate(cells):
            rect = QRectF(x0 + k * self.COL_W, y + 1, self.COL_W - 2, self.ROW_H - 2)
            p.fillRect(rect, QColor(color))
            p.setPen(QColor(0, 0, 0, 50))
            p.drawRect(rect)
            p.setPen(QColor("#111111"))
            p.setFont(self._mono)
            p.drawText(rect.adjusted(0, 0, 0, -4 if note else 0), Qt.AlignmentFlag.AlignCenter,
                       text)
            if note:
                p.setFont(self._small)
                p.setPen(QColor("#666666"))
                p.drawText(rect.adjusted(0, 0, -2, 0),
                           Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom, note)


class BlockValuesModel(Headed, QAbstractTableModel):
    """One row per element of a block: index in the tensor, q, the formula with numbers, value."""

    HEADERS = ("element", "tensor index", "q", "formula", "value")

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.info: BlockInfo | None = None

    def set_block(self, info: BlockInfo | None) -> None:
        self.beginResetModel()
        self.info = info
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() or self.info is None else self.info.values.size

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or self.info is None:
            return None
        i, col, info = index.row(), index.column(), self.info
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                return str(i)
            if col == 1:
                flat = info.first_element + i
                shape = info.source.shape
                if not shape:
                    return str(flat)
                return str(tuple(int(v) for v in np.unravel_index(flat, shape)))
            if col == 2:
                return str(int(info.quants[i]))
            if col == 3:
                return info.element_formula(i)
            return fmt_float(info.values[i])
        if role == Qt.ItemDataRole.UserRole and col == 4:
            return float(info.values[i])
        if role == Qt.ItemDataRole.TextAlignmentRole and col != 3:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None



class BlockMicroscope(QWidget):
    """One quantized block down to its bytes (objectName `blockMicroscope`)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("blockMicroscope")
        self.info: BlockInfo | None = None
        self.header = QLabel("Click a block in the scale plot or the heatmap to open it here.")
        self.header.setObjectName("blockHeader")
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.hex = HexCells()
        self.fields_label = QLabel()
        self.fields_label.setObjectName("blockFields")
        self.fields_label.setTextFormat(Qt.TextFormat.RichText)
        self.fields_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.nibbles = NibbleGrid()
        self.nibble_title = QLabel()
        self.nibble_title.setWordWrap(True)
        self.values_model = BlockValuesModel(self)
        self.values_table = CopyableTableView()
        self.values_table.setObjectName("blockValues")
        self.values_table.setModel(self.values_model)
        header = self.values_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)

        left = QVBoxLayout()
        left.addWidget(QLabel("<b>bytes of the block, by field</b>"))
        left.addWidget(self.hex)
        left.addWidget(self.fields_label)
        left.addWidget(self.nibble_title)
        left.addWidget(self.nibbles)
        left.addStretch(1)
        left_w = QWidget()
        left_w.setLayout(left)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(left_w)
        right = QVBoxLayout()
        self.formula_label = QLabel()
        self.formula_label.setObjectName("blockFormula")
        right.addWidget(self.formula_label)
        right.addWidget(self.values_table, 1)
        right_w = QWidget()
        right_w.setLayout(right)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(scroll)
        split.addWidget(right_w)
        split.setSizes([730, 550])
        lay = QVBoxLayout(self)
        lay.addWidget(self.header)
        lay.addWidget(split, 1)
        self._show_nibbles(False)

    def _show_nibbles(self, on: bool) -> None:
        self.nibbles.setVisible(on)
        self.nibble_title.setVisible(on)

    def show_block(self, source: TensorSource, index: int) -> BlockInfo:
        """Open block `index` of `source`."""
        info = explain_block(source, index)
        self.info = info
        s = source
        start, end = s.block_byte_range(index)
        where = "file" if s.offset is not None else "buffer"
        first = info.first_element
        row, col = divmod(first, s.row_length)
        place = (f"row {row}, columns {col}–{col + s.block_size - 1}" if len(s.shape) >= 2
                 else f"elements {first}–{first + s.block_size - 1}")
        self.header.setText(
            f"<b>block {index:,}</b> of {s.n_blocks:,} in <b>{s.name}</b> ({s.dtype}) · "
            f"{place} · {where} bytes 0x{start:X}–0x{end - 1:X} ({s.type_size} B for "
            f"{s.block_size} values, {bits_per_weight(s.dtype):g} bits/weight)")
        self.hex.set_block(info.raw, info.fields, start if s.offset is not None else None)
        self.fields_label.setText(self._fields_html(info))
        self.formula_label.setText(f"value = <b>{info.formula}</b>")
        nibbles = info.view.nibble_layout
        if nibbles is not None:
            self.nibbles.set_block(nibbles, info.quants)
            run = int(nibbles.hi_element[0] - nibbles.lo_element[0])
            high = (f"; <tt>{nibbles.high_field}</tt> adds the bits above"
                    if nibbles.high_field else "")
            self.nibble_title.setText(
                f"<b>quants as nibbles</b>: each byte of <tt>{nibbles.field}</tt> holds two "
                f"quants, the low nibble element j, the high nibble element j+{run}{high}")
        self._show_nibbles(nibbles is not None)
        self.values_model.set_block(info)
        return info

    @staticmethod
    def _fields_html(info: BlockInfo) -> str:
        rows = []
        for name, start, end, value in info.fields:
            raw = info.raw[start:end]
            hex_text = " ".join(f"{int(b):02X}" for b in raw[:12])
            hex_text += " …" if raw.size > 12 else ""
            kind = ""
            if end - start == 2 and name in ("d", "m", "dmin"):
                word = int(raw.view("<u2")[0])
                kind = f"f16 0x{word:04X} → "
            color = FIELD_COLORS.get(name, "#eeeeee")
            rows.append(f"<tr><td style='background:{color}'>&nbsp;{name}&nbsp;</td>"
                        f"<td>bytes {start}–{end - 1}</td><td><tt>{hex_text}</tt></td>"
                        f"<td>{kind}<b>{value}</b></td></tr>")
        return "<table cellspacing='3'>" + "".join(rows) + "</table>"

    def clear(self) -> None:
        self.info = None
        self.header.setText("Click a block in the scale plot or the heatmap to open it here.")
        self.hex.set_block(np.zeros(0, np.uint8), [], None)
        self.nibbles.set_block(None, np.zeros(0, np.int64))
        self.fields_label.clear()
        self.formula_label.clear()
        self._show_nibbles(False)
        self.values_model.set_block(None)


# ------------------------------------------------------------------ requantize experiment

@dataclass
class RequantResult:
    """Errors of quantizing the same values to each format."""

    label: str
    n_values: int
    rows: list[tuple[str, float, float, float, float]]   # format, bpw, rmse, max abs, rel rmse
    counts: dict[str, np.ndarray]
    edges: np.ndarray


def requantize(values: np.ndarray, label: str,
               formats: tuple[str, ...] = REQUANT_FORMATS) -> Generator[float, None, RequantResult]:
    """Quantize `values` (rows × a multiple of 32) to each format and measure the error."""
    errors: dict[str, np.ndarray] = {}
    rms = float(np.sqrt(np.mean(np.square(values, dtype=np.float64)))) or 1.0
    rows = []
    for k, fmt in enumerate(formats):
        yield k / len(formats)
        back = quant.dequantize(quant.quantize(values, fmt), fmt).reshape(values.shape)
        err = (back - values).reshape(-1)
        errors[fmt] = err
        rmse = float(np.sqrt(np.mean(np.square(err, dtype=np.float64))))
        rows.append((fmt, bits_per_weight(fmt), rmse, float(np.max(np.abs(err))), rmse / rms))
    bound = max(float(np.max(np.abs(e))) for e in errors.values()) or 1.0
    edges = np.linspace(-bound, bound, ERROR_BINS + 1)
    counts = {f: np.histogram(e, bins=edges)[0] for f, e in errors.items()}
    return RequantResult(label, values.size, rows, counts, edges)


def requantize_rows(source: TensorSource, first_row: int, n_rows: int
                    ) -> Generator[float, None, RequantResult]:
    """Dequantize rows `[first_row, first_row + n_rows)` of `source`, then `requantize` them."""
    bpr = source.n_blocks // max(1, source.n_rows)
    rows = dequantize_range(source, first_row * bpr, (first_row + n_rows) * bpr)
    values = yield from scaled(rows, 0.0, 0.3)
    values = values.reshape(n_rows, -1)
    cols = values.shape[1] // 32 * 32                     # whole Q blocks of 32
    label = (f"rows {first_row}–{first_row + n_rows - 1} of {source.name}"
             if source.offset is not None or source.name != "demo" else
             f"rows {first_row}–{first_row + n_rows - 1} of the demo matrix")
    if cols < values.shape[1]:
        label += f" (first {cols} columns)"
    return (yield from scaled(requantize(np.ascontiguousarray(values[:, :cols]), label), 0.3, 0.7))


class RequantModel(Headed, QAbstractTableModel):
    HEADERS = ("format", "bits/weight", "RMSE", "max |error|", "RMSE / RMS")

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[tuple] = []

    def set_rows(self, rows: list[tuple]) -> None:
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        value = self.rows[index.row()][index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            if index.column() == 0:
                return value
            if index.column() == 1:
                return f"{value:g}"
            if index.column() == 4:
                return f"{100 * value:.2f} %"
            return f"{value:.4g}"
        if role == Qt.ItemDataRole.UserRole:
            return value
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column():
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None



class RequantizePanel(QWidget):
    """Quantize the selected rows to several formats and compare errors side by side."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("requantizePanel")
        self.source: TensorSource | None = None
        self.result: RequantResult | None = None
        self.runner = LatestRunner(self)
        self.runner.finished.connect(self._done)
        self.first_row = QSpinBox()
        self.first_row.setObjectName("requantFirstRow")
        self.n_rows = QSpinBox()
        self.n_rows.setObjectName("requantRows")
        self.n_rows.setMinimum(1)
        self.run_button = QPushButton("Requantize")
        self.run_button.setObjectName("requantizeButton")
        self.run_button.clicked.connect(self.run)
        self.source_label = QLabel()
        self.source_label.setWordWrap(True)
        self.progress = JobProgress(self.runner, "Requantizing…")
        bar = QHBoxLayout()
        bar.addWidget(QLabel("rows from"))
        bar.addWidget(self.first_row)
        bar.addWidget(QLabel("count"))
        bar.addWidget(self.n_rows)
        bar.addWidget(self.run_button)
        bar.addWidget(self.source_label, 1)
        self.model = RequantModel(self)
        self.table = CopyableTableView()
        self.table.setObjectName("requantTable")
        self.table.setModel(self.model)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.setMaximumHeight(140)
        self.plots: dict[str, pg.PlotWidget] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        plots = QHBoxLayout()
        first = None
        for fmt in REQUANT_FORMATS:
            w = pg.PlotWidget(title=f"{fmt} error")
            w.setObjectName(f"requantHist_{fmt}")
            w.setBackground("w")
            w.setLabel("bottom", "dequantized − original")
            w.setMouseEnabled(y=False)
            self.curves[fmt] = w.plot([0, 1], [0], stepMode="center", fillLevel=0,
                                      brush=(70, 110, 180, 150), pen=pg.mkPen("#35557f"))
            if first is None:
                first = w
            else:
                w.setXLink(first)
            self.plots[fmt] = w
            box = QVBoxLayout()
            box.addWidget(w, 1)
            box.addWidget(export_button(w))
            plots.addLayout(box)
        lay = QVBoxLayout(self)
        lay.addLayout(bar)
        lay.addWidget(self.progress)
        lay.addWidget(self.table)
        lay.addLayout(plots, 1)

    def set_source(self, source: TensorSource | None) -> None:
        self.runner.cancel()
        self.source = source
        if source is None:
            self.source_label.setText("")
            return
        n_rows = source.n_rows
        max_rows = max(1, REQUANT_MAX_VALUES // max(1, source.row_length))
        self.first_row.setRange(0, max(0, n_rows - 1))
        self.n_rows.setRange(1, min(n_rows, max_rows))
        self.first_row.setValue(0)
        self.n_rows.setValue(min(n_rows, 64 if source.row_length <= 4096 else 4))
        self.run()

    def run(self) -> None:
        s = self.source
        if s is None:
            return
        first = min(self.first_row.value(), s.n_rows - 1)
        n = max(1, min(self.n_rows.value(), s.n_rows - first))
        if s.row_length < 32:
            self.source_label.setText("Rows are shorter than one block of 32: "
                                      "nothing to requantize.")
            return
        self.source_label.setText(f"Dequantizing rows {first}–{first + n - 1} of {s.name} "
                                  f"and quantizing them again…")
        self.runner.submit(requantize_rows, s, first, n, tag=(s.name, first, n))

    def _done(self, tag: Any, result: RequantResult) -> None:
        self.result = result
        self.source_label.setText(f"{result.label}: {result.n_values:,} values, each format "
                                  "quantizes the same float32 values (ggml reference rounding).")
        stored = self.source.dtype if self.source is not None else ""
        self.model.set_rows([(f"{r[0]} (stored)" if r[0] == stored else r[0], *r[1:])
                             for r in result.rows])
        for fmt, counts in result.counts.items():
            self.curves[fmt].setData(result.edges, counts)
        self.plots[REQUANT_FORMATS[0]].setXRange(result.edges[0], result.edges[-1], padding=0.02)


# ------------------------------------------------------------------ the view

class QuantView(CatchesUpWhenShown, QWidget):
    """Per-block scales of the selected tensor, a block microscope, and requantizing."""

    block_opened = Signal(int)
    scales_ready = Signal(object)        # ScaleResult

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("quantView")
        self.session = session
        self.source: TensorSource | None = None
        self._weights: Any = None            # the WeightFile `source` came from
        self.result: ScaleResult | None = None
        self.block: int | None = None
        self.curves: dict[str, EnvelopeCurve] = {}          # full data in .x / .y
        self.curve_items: dict[str, pg.PlotDataItem] = {}   # what is drawn
        self.runner = LatestRunner(self)
        self.runner.finished.connect(self._scales_done)
        self.runner.failed.connect(lambda tag, e: self.session.error_raised.emit(
            "Cannot read scales", f"{tag}: {e}"))
        self._build_ui()
        session.weights_changed.connect(self._weights_changed)
        session.tensor_selected.connect(self.show_tensor)
        self._weights_changed(session.weights)

    # -- construction
    def _build_ui(self) -> None:
        self.picker = TensorPicker()
        self.picker.setObjectName("quantTensorPicker")
        self.picker.tensor_picked.connect(self._picked)
        self.header = QLabel()
        self.header.setObjectName("quantHeader")
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.progress = JobProgress(self.runner, "Reading scales…")
        self.progress.setFixedWidth(320)
        top = QHBoxLayout()
        top.addWidget(QLabel("Tensor:"))
        top.addWidget(self.picker)
        top.addWidget(self.header, 1)
        top.addWidget(self.progress)

        self.microscope = BlockMicroscope()
        self.requant = RequantizePanel()
        self.requant.runner.failed.connect(self._requant_failed)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.microscope, "Block microscope")
        self.tabs.addTab(self.requant, "Requantize experiment")

        upper = QSplitter(Qt.Orientation.Horizontal)
        upper.addWidget(self._build_scale_plot())
        upper.addWidget(self._build_heatmap())
        upper.setSizes([880, 420])
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(upper)
        split.addWidget(self.tabs)
        split.setSizes([330, 520])
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(split, 1)

    def _build_scale_plot(self) -> QWidget:
        self.scale_plot = pg.PlotWidget()
        self.scale_plot.setObjectName("scalePlot")
        self.scale_plot.setBackground("w")
        self.scale_plot.setLabel("bottom", "block index along the tensor")
        self.scale_plot.setLabel("left", "scale")
        self.scale_plot.showGrid(x=True, y=True, alpha=0.2)
        self.scale_plot.addLegend(offset=(-10, 10), brush=pg.mkBrush(255, 255, 255, 225),
                                  pen=pg.mkPen("#bbbbbb"), labelTextColor="#222222")
        self.scale_plot.setMouseEnabled(x=True, y=False)
        self.block_line = pg.InfiniteLine(angle=90, pen=pg.mkPen("#d0452b", width=1.5))
        self.block_line.hide()
        self.scale_plot.addItem(self.block_line, ignoreBounds=True)
        self.scale_plot.scene().sigMouseClicked.connect(self._plot_clicked)
        self.toggles: dict[str, QCheckBox] = {}
        bar = QHBoxLayout()
        bar.addWidget(QLabel("show:"))
        for key in CURVE_PENS:
            box = QCheckBox(key)
            box.setObjectName(f"toggle_{key.replace(' ', '_').replace('-', '_')}")
            box.setChecked(key == "d")     # m / dmin live on another scale: opt in
            box.toggled.connect(self._update_curve_visibility)
            box.hide()
            self.toggles[key] = box
            bar.addWidget(box)
        bar.addStretch(1)
        fit = QPushButton("Fit")
        fit.clicked.connect(lambda: self.scale_plot.getPlotItem().enableAutoRange())
        zoom = QPushButton("Zoom to block")
        zoom.setToolTip("Show the 200 blocks around the open block")
        zoom.clicked.connect(self.zoom_to_block)
        bar.addWidget(fit)
        bar.addWidget(zoom)
        bar.addWidget(export_button(self.scale_plot))
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(self.scale_plot, 1)
        hint = QLabel("Wheel or drag to zoom and pan along the tensor; click to open a block.")
        hint.setStyleSheet("color: gray;")
        lay.addWidget(hint)
        return box

    def _build_heatmap(self) -> QWidget:
        self.heatmap = pg.PlotWidget()
        self.heatmap.setObjectName("scaleHeatmap")
        self.heatmap.setBackground("w")
        self.heatmap.setLabel("bottom", "block within the row")
        self.heatmap.setLabel("left", "row")
        self.heatmap.getPlotItem().invertY(True)
        self.heat_image = pg.ImageItem()
        self.heat_image.setColorMap(pg.colormap.get("viridis"))
        self.heatmap.addItem(self.heat_image)
        self.heat_marker = pg.ScatterPlotItem(size=12, symbol="s", pen=pg.mkPen("#d0452b", width=2),
                                              brush=None)
        self.heatmap.addItem(self.heat_marker)
        self.colorbar = pg.ColorBarItem(colorMap=pg.colormap.get("viridis"), interactive=False,
                                        width=12)
        self.colorbar.setImageItem(self.heat_image, insert_in=self.heatmap.getPlotItem())
        self.heatmap.scene().sigMouseClicked.connect(self._heatmap_clicked)
        self.heat_field = QComboBox()
        self.heat_field.setObjectName("heatmapField")
        self.heat_field.currentTextChanged.connect(self._update_heatmap)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("heatmap of"))
        bar.addWidget(self.heat_field, 1)
        bar.addWidget(export_button(self.heatmap))
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(self.heatmap, 1)
        return box

    # -- session
    def _weights_changed(self, weights: Any) -> None:
        self.set_source(None)
        if not has_tensors(weights):
            self.picker.set_names(["demo"])
            self.picker.set_current("demo")
            self.set_source(demo_source("Q4_0", weights))
            return
        tensors = list(weights.tensors)
        self.picker.set_names([t.name for t in tensors],
                              [f"{t.dtype} {tuple(t.shape)}" for t in tensors])
        if self.session.tensor:
            self.show_tensor(self.session.tensor)
        else:
            ensure_selection(self.session)   # every tensor view follows through tensor_selected

    def _picked(self, name: str) -> None:
        if not has_tensors(self.session.weights):
            return
        self.session.select_tensor(name)
        self.show_tensor(name)     # also when the session already had it selected

    def show_tensor(self, name: str) -> None:
        """Show tensor `name` of the open weight file; in a hidden tab, once it is shown."""
        weights = self.session.weights
        if not has_tensors(weights) or not name:
            return
        if self.defer_while_hidden():
            return
        if self.source is not None and self.source.name == name and self._weights is weights:
            return                      # already shown (e.g. selected again from another view)
        try:
            source = source_from_weights(weights, name)
        except (KeyError, ValueError) as e:
            self.session.error_raised.emit("Cannot show tensor", str(e))
            return
        self.picker.set_current(name)
        self.set_source(source)
        self._weights = weights

    def set_source(self, source: TensorSource | None) -> None:
        """Show any tensor source (a file tensor or the demo)."""
        self._weights = None
        self.runner.cancel()
        self.source, self.result, self.block = source, None, None
        self._clear_plots()
        self.microscope.clear()
        self.requant.set_source(source)
        if source is None:
            self.header.setText("Open a weight file to see its quantized tensors.")
            return
        self.header.setText(self._header_text(source))
        if source.is_quantized:
            self.progress.set_title(f"Reading the scales of {source.name}…")
            self.runner.submit(compute_scales, source, tag=source.name)
        else:
            self.tabs.setCurrentWidget(self.requant)

    def _header_text(self, s: TensorSource) -> str:
        if not s.is_quantized:
            return (f"<b>{s.name}</b> is {s.dtype}: not block-quantized, so it has no per-block "
                    "scales. The requantize experiment below still works on it.")
        t = GGML_TYPES[s.dtype]
        demo = f"<br><i>{s.note}</i>" if s.note else ""
        return (f"<b>{s.name}</b> · {s.dtype} · shape {tuple(s.shape)} · {s.n_blocks:,} "
                f"blocks of {t.block_size} values in {t.type_size} bytes "
                f"({bits_per_weight(s.dtype):g} bits/weight) · {s.blocks_per_row} blocks per row"
                f"{demo}")

    # -- scales
    def _scales_done(self, tag: str, result: ScaleResult) -> None:
        if self.source is None or tag != self.source.name:
            return
        self.result = result
        curves = result.curves
        for key, (x, y) in curves.items():
            curve = EnvelopeCurve(self.scale_plot.getPlotItem(), x, y,
                                  pen=pg.mkPen(CURVE_PENS[key], width=1), name=key)
            self.curves[key] = curve
            self.curve_items[key] = curve.item
            self.toggles[key].show()
        self._update_curve_visibility()
        self.heat_field.blockSignals(True)
        self.heat_field.clear()
        self.heat_field.addItems(list(curves))
        self.heat_field.blockSignals(False)
        self._update_heatmap(self.heat_field.currentText())
        self.scales_ready.emit(result)
        self.open_block(0)

    def _update_curve_visibility(self) -> None:
        for key, item in self.curve_items.items():
            item.setVisible(self.toggles[key].isChecked())

    def _update_heatmap(self, key: str) -> None:
        if self.result is None or not key:
            return
        r = self.result
        image = r.images[key]
        finite = image[np.isfinite(image)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        levels = (lo, hi if hi > lo else lo + 1)
        self.heat_image.setImage(image, levels=levels)
        self.colorbar.setLevels(levels)
        # image pixels map back to (block in row, row): clicks and the marker use real rows
        self.heat_image.setRect(QRectF(0, 0, r.blocks_per_row, r.n_rows))
        pooled = (f" (each pixel row: max of {r.rows_per_pixel} rows)"
                  if r.rows_per_pixel > 1 else "")
        self.heatmap.setLabel("left", "row" + pooled)
        self.heatmap.getPlotItem().enableAutoRange()
        self._mark_block()

    def _clear_plots(self) -> None:
        for curve in self.curves.values():
            curve.detach()
            self.scale_plot.removeItem(curve.item)
        self.curves.clear()
        self.curve_items.clear()
        legend = self.scale_plot.getPlotItem().legend
        if legend is not None:
            legend.clear()
        for box in self.toggles.values():
            box.hide()
        self.block_line.hide()
        self.heat_image.clear()
        self.heat_marker.clear()
        self.heat_field.clear()

    def _requant_failed(self, tag: Any, error: BaseException) -> None:
        self.requant.source_label.setText("Requantizing failed.")
        self.session.error_raised.emit("Cannot requantize", f"{tag[0]}: {error}")

    # -- blocks
    def open_block(self, index: int) -> BlockInfo | None:
        """Open block `index` (flat, along the tensor) in the microscope."""
        s = self.source
        if s is None or not s.is_quantized:
            return None
        index = int(min(max(index, 0), s.n_blocks - 1))
        try:
            info = self.microscope.show_block(s, index)
        except FormatError as e:  # the file shrank while open
            self.session.error_raised.emit("Cannot read the block", str(e))
            return None
        self.block = index
        self.block_line.setValue(index)
        self.block_line.show()
        self._mark_block()
        self.tabs.setCurrentWidget(self.microscope)
        self.block_opened.emit(index)
        return info

    def _mark_block(self) -> None:
        if self.block is None or self.result is None:
            return
        row, col = divmod(self.block, self.result.blocks_per_row)
        self.heat_marker.setData([col + 0.5], [row + 0.5])

    def zoom_to_block(self) -> None:
        if self.block is not None:
            self.scale_plot.setXRange(self.block - 100, self.block + 100)
            self.scale_plot.getPlotItem().enableAutoRange(axis="y")

    def _plot_clicked(self, event) -> None:
        plot = self.scale_plot.getPlotItem()
        if event.button() != Qt.MouseButton.LeftButton or self.result is None:
            return
        if not plot.vb.sceneBoundingRect().contains(event.scenePos()):
            return
        x = plot.vb.mapSceneToView(event.scenePos()).x()
        self.open_block(int(round(x)))

    def _heatmap_clicked(self, event) -> None:
        plot = self.heatmap.getPlotItem()
        if event.button() != Qt.MouseButton.LeftButton or self.result is None:
            return
        if not plot.vb.sceneBoundingRect().contains(event.scenePos()):
            return
        p = plot.vb.mapSceneToView(event.scenePos())
        row, col = int(math.floor(p.y())), int(math.floor(p.x()))
        if 0 <= row < self.result.n_rows and 0 <= col < self.result.blocks_per_row:
            self.open_block(row * self.result.blocks_per_row + col)
