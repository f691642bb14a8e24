"""The Layout view (`tensorLayout`): a tensor as shape + strides over one flat buffer.

The top half draws a small window of the selected tensor as logical cells and, below it,
the same elements in the order they sit in memory. Transposing, permuting and slicing only
change the `Layout` (shape, strides, offset): the drawing and the numbers update, the
buffer does not move. The bottom half shows the values of a 2-D slice (heatmap, histogram,
statistics), dequantized in a worker with progress and cancel.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any, Generator, Iterator

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import (QFormLayout, QFrame, QGridLayout, QHBoxLayout, QLabel, QLineEdit,
                               QPushButton, QScrollArea, QSizePolicy, QSpinBox, QSplitter,
                               QVBoxLayout, QWidget)

from forma_gui.app.state import Session
from forma_gui.app.tensor_support import (CatchesUpWhenShown, JobProgress, TensorPicker, TensorSource,
                                          demo_source, dequantize_blocks, dequantize_range,
                                          ensure_selection, export_button, fmt_bytes, has_tensors,
                                          scaled, source_from_weights)
from forma_gui.app.workers import LatestRunner
from forma_gui.core.tensor import Layout

#: a slice larger than this many covered elements is sampled instead of dequantized whole
FULL_LIMIT = 1 << 25            # 32 Mi elements = 128 MiB of float32
#: per-axis size of a sample of a huge slice, and of the heatmap handed to the GUI thread
SAMPLE_SIDE = 2048
DISPLAY_SIDE = 2048
HIST_BINS = 200
HOVER_HINT = "Hover a cell: offset = Σ index · stride."
#: the logical window the diagram draws: default and largest size
WINDOW_ROWS, WINDOW_COLS = 6, 10
MAX_WINDOW_ROWS, MAX_WINDOW_COLS = 8, 12


# ------------------------------------------------------------------ index expressions

def parse_index(text: str, ndim: int) -> tuple[slice | int, ...]:
    """A numpy-style index expression -> one slice or int per axis.

    >>> parse_index("2:10:2, ::-1", 2)
    (slice(2, 10, 2), slice(None, None, -1))
    >>> parse_index("..., 3", 3)
    (slice(None, None, None), slice(None, None, None), 3)
    """
    text = text.strip().strip("[]")
    parts = [p.strip() for p in text.split(",")] if text else []
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()                                     # "3," like numpy
    items: list[Any] = [_parse_item(p) for p in parts]
    if items.count(Ellipsis) > 1:
        raise ValueError("only one '...' is allowed")
    n_axes = len(items) - items.count(Ellipsis)
    if n_axes > ndim:
        raise ValueError(f"{n_axes} indices for a {ndim}-D view")
    fill = [slice(None)] * (ndim - n_axes)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = fill
    else:
        items += fill
    return tuple(items)


def _parse_item(part: str) -> slice | int | type(Ellipsis):
    if part in ("...", "…"):
        return Ellipsis
    if ":" not in part:
        return _parse_int(part, "index")
    bits = part.split(":")
    if len(bits) > 3:
        raise ValueError(f"bad slice {part!r}: at most start:stop:step")
    start, stop, step = (bits + [""] * 3)[:3]
    s = slice(_parse_int(start, "start", True), _parse_int(stop, "stop", True),
              _parse_int(step, "step", True))
    if s.step == 0:
        raise ValueError("slice step cannot be zero")
    return s


def _parse_int(text: str, what: str, optional: bool = False) -> int | None:
    text = text.strip()
    if not text and optional:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {text!r}")
    return value


def parse_axes(text: str, ndim: int) -> tuple[int, ...]:
    """A permutation typed as '1,0,2' or '1 0 2'.

    >>> parse_axes("1, 0", 2)
    (1, 0)
    """
    items = [t for t in text.replace(",", " ").split() if t]
    axes = tuple(_parse_int(t, "axis") for t in items)
    if sorted(a % ndim if ndim else a for a in axes) != list(range(ndim)):
        raise ValueError(f"axes must be a permutation of 0..{ndim - 1}, got {text!r}")
    return tuple(a % ndim for a in axes)


def _fmt_key(key: tuple[slice | int, ...]) -> str:
    """`[2:10:2, ::-1]` for a tuple of slices/ints."""
    def one(k: slice | int) -> str:
        if isinstance(k, int):
            return str(k)
        s = f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}"
        return s + (f":{k.step}" if k.step not in (None, 1) else "")
    return "[" + ", ".join(one(k) for k in key) + "]"


# ------------------------------------------------------------------ the values of a slice

@dataclass
class SliceSpec:
    """A 2-D window of the buffer: element `offset` and `(rows, cols)` with element strides."""

    offset: int
    shape: tuple[int, int]
    strides: tuple[int, int]

    @classmethod
    def of(cls, layout: Layout) -> "SliceSpec":
        """The last two axes of `layout` at index 0 of every leading axis."""
        shape, strides = tuple(layout.shape), tuple(layout.strides)
        if len(shape) == 0:
            return cls(layout.offset, (1, 1), (0, 0))
        if len(shape) == 1:
            return cls(layout.offset, (1, shape[0]), (0, strides[0]))
        return cls(layout.offset, (shape[-2], shape[-1]), (strides[-2], strides[-1]))

    def extent(self) -> tuple[int, int]:
        """Lowest and highest element offset the slice touches."""
        lo = hi = self.offset
        for n, s in zip(self.shape, self.strides):
            lo += min(0, (n - 1) * s)
            hi += max(0, (n - 1) * s)
        return lo, hi


@dataclass
class ValueResult:
    """What the GUI thread needs to draw a slice: a small image, statistics, a histogram."""

    name: str
    spec: SliceSpec
    image: np.ndarray                 # (<= DISPLAY_SIDE, <= DISPLAY_SIDE) float32
    image_step: tuple[int, int]       # one image pixel = every k-th row / column of the slice
    stats: dict[str, float]
    counts: np.ndarray
    edges: np.ndarray
    levels: tuple[float, float]
    sample_step: tuple[int, int] = (1, 1)   # > 1 when the statistics come from a sample
    cache: tuple[int, int, np.ndarray] | None = field(default=None, repr=False)


def slice_values(source: TensorSource, spec: SliceSpec,
                 cache: tuple[int, int, np.ndarray] | None = None
                 ) -> Generator[float, None, tuple[np.ndarray, tuple[int, int], Any]]:
    """The slice's values (2-D float32): whole when it fits in FULL_LIMIT, else a sample.

    Returns `(values, sample_step, cache)`; `cache` is the dequantized block range
    `(first_block, stop_block, values)` so that re-striding the same tensor is free.
    """
    bs = source.block_size
    lo, hi = spec.extent()
    b0, b1 = lo // bs, hi // bs + 1
    if cache is None or not (cache[0] <= b0 and b1 <= cache[1]):
        cache = None
        if (b1 - b0) * bs <= FULL_LIMIT:
            buf = yield from dequantize_range(source, b0, b1)
            cache = (b0, b1, buf)
    if cache is not None:
        start = spec.offset - cache[0] * bs
        values = np.lib.stride_tricks.as_strided(
            cache[2][start:], spec.shape, tuple(4 * s for s in spec.strides), writeable=False)
        return values, (1, 1), cache
    values, step = yield from _sampled_values(source, spec)
    return values, step, None


def _sampled_values(source: TensorSource, spec: SliceSpec
                    ) -> Generator[float, None, tuple[np.ndarray, tuple[int, int]]]:
    """Every k-th row and column of a huge slice: only the blocks those elements live in."""
    (nr, nc), (sr, sc) = spec.shape, spec.strides
    kr, kc = math.ceil(nr / SAMPLE_SIDE), math.ceil(nc / SAMPLE_SIDE)
    rows, cols = np.arange(0, nr, kr, dtype=np.int64), np.arange(0, nc, kc, dtype=np.int64)
    offsets = spec.offset + rows[:, None] * sr + cols[None, :] * sc      # (r, c)
    bs = source.block_size
    blocks, inverse = np.unique(offsets // bs, return_inverse=True)
    stored = source.blocks()
    deq = np.empty((blocks.size, bs), dtype=np.float32)
    step = max(1, (1 << 18) // bs)
    for i in range(0, blocks.size, step):
        yield i / blocks.size
        source.verify()
        part = dequantize_blocks(stored[blocks[i:i + step]], source.dtype)
        deq[i:i + step] = part.reshape(-1, bs)
    return deq[inverse.reshape(offsets.shape), offsets % bs], (kr, kc)


Stats = tuple[dict[str, float], np.ndarray, np.ndarray]   # statistics, counts, edges


def value_stats(values: np.ndarray) -> Generator[float, None, Stats]:
    """min, max, mean, std, NaN and Inf counts, and a histogram, chunk by chunk."""
    stats = yield from scaled(_moments(values), 0.0, 0.5)
    counts, edges = yield from scaled(_histogram(values, stats), 0.5, 0.5)
    return stats, counts, edges


def _chunks(values: np.ndarray) -> Iterator[tuple[float, np.ndarray, int, int]]:
    """(fraction done, finite values, NaN count, Inf count) per ~1M-value block of rows."""
    nr = values.shape[0]
    rows_per = max(1, (1 << 20) // max(1, values.shape[1]))
    for i in range(0, nr, rows_per):
        yield (i / nr, *_finite(np.ascontiguousarray(values[i:i + rows_per]).reshape(-1)))


def _moments(values: np.ndarray) -> Generator[float, None, dict[str, float]]:
    """Count, extremes, mean and std; chunks merged with Chan's formula in float64."""
    n = nan = inf = 0
    mean = m2 = 0.0
    lo, hi = math.inf, -math.inf
    for done, x, n_nan, n_inf in _chunks(values):
        yield done
        nan, inf = nan + n_nan, inf + n_inf
        if x.size:
            lo, hi = min(lo, float(x.min())), max(hi, float(x.max()))
            cm = float(x.mean(dtype=np.float64))
            cm2 = float(np.square(x - cm, dtype=np.float64).sum())
            delta, total = cm - mean, n + x.size
            mean += delta * x.size / total
            m2 += cm2 + delta * delta * n * x.size / total
            n = total
    nothing = math.nan
    return {"count": n + nan + inf, "finite": n, "nan": nan, "inf": inf,
            "min": lo if n else nothing, "max": hi if n else nothing,
            "mean": mean if n else nothing, "std": math.sqrt(m2 / n) if n else nothing}


def _histogram(values: np.ndarray, stats: dict[str, float]
               ) -> Generator[float, None, tuple[np.ndarray, np.ndarray]]:
    """Counts over [min, max] of the finite values; few values get fewer, fuller bins."""
    n = stats["finite"]
    bins = int(min(HIST_BINS, max(10, 2 * math.sqrt(n))))
    lo, hi = (stats["min"], stats["max"]) if n else (0.0, 1.0)
    edges = np.linspace(lo, hi if hi > lo else lo + 1, bins + 1)
    counts = np.zeros(bins, dtype=np.int64)
    for done, x, _, _ in (_chunks(values) if n else ()):
        yield done
        counts += np.histogram(x, bins=bins, range=(edges[0], edges[-1]))[0]
    return counts, edges


def _finite(x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(finite values, NaN count, Inf count); no copy when everything is finite."""
    ok = np.isfinite(x)
    if ok.all():
        return x, 0, 0
    nan = int(np.isnan(x).sum())
    return x[ok], nan, int(x.size - ok.sum()) - nan


def compute_slice(source: TensorSource, spec: SliceSpec,
                  cache: tuple[int, int, np.ndarray] | None = None
                  ) -> Generator[float, None, ValueResult]:
    """The whole value job: dequantize (or reuse), then statistics, histogram and heatmap."""
    values, sample, cache = yield from scaled(slice_values(source, spec, cache), 0.0, 0.6)
    stats, counts, edges = yield from scaled(value_stats(values), 0.6, 0.38)
    nr, nc = values.shape
    dr, dc = math.ceil(nr / DISPLAY_SIDE), math.ceil(nc / DISPLAY_SIDE)
    image = np.ascontiguousarray(values[::dr, ::dc], dtype=np.float32)
    yield 0.99
    finite = image[np.isfinite(image)]
    bound = float(np.percentile(np.abs(finite), 99.5)) if finite.size else 1.0
    bound = bound if bound > 0 else 1.0
    return ValueResult(source.name, spec, image, (dr * sample[0], dc * sample[1]), stats,
                       counts, edges, (-bound, bound), sample, cache)


# ------------------------------------------------------------------ the drawing

ROW_HUES = (212, 32, 140, 290, 6, 168, 52, 236)


def row_color(row: int) -> QColor:
    """Pastel fill of window row `row`: rows keep their colour in the memory strip."""
    return QColor.fromHslF(ROW_HUES[row % len(ROW_HUES)] / 360.0, 0.70, 0.84)


@dataclass
class _Cell:
    index: tuple[int, ...]     # full view index
    rc: tuple[int, int]        # position in the window grid
    offset: int                # element offset in the buffer
    rect: QRectF = field(default_factory=QRectF)
    strip: QRectF = field(default_factory=QRectF)


@dataclass
class _Gap:
    skipped: int
    rect: QRectF = field(default_factory=QRectF)


class LayoutDiagram(QWidget):
    """A window of logical cells and, below, the same elements as flat memory.

    Hovering a cell (in either place) highlights both and emits `hovered(index)`; an empty
    tuple when the mouse leaves.
    """

    hovered = Signal(tuple)

    CELL_W, CELL_H = 54, 26
    STRIP_W, STRIP_H, GAP_W, BAND_H = 46, 34, 38, 15
    MARGIN, HEADER_W = 10, 34

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("layoutDiagram")
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.cells: list[_Cell] = []
        self.strip: list[_Cell | _Gap] = []
        self.layout_: Layout | None = None
        self.block_size = 1
        self.window = (WINDOW_ROWS, WINDOW_COLS)
        self.title = ""
        self.hover: _Cell | None = None
        self._height = 120
        self._font = QFont(self.font())
        self._font.setPointSizeF(8.5)
        self._small = QFont(self.font())
        self._small.setPointSizeF(7.0)
        self._bold = QFont(self._font)
        self._bold.setBold(True)

    # -- model
    def set_window(self, rows: int, cols: int) -> None:
        """Draw a window of `rows` × `cols` logical cells."""
        self.window = (max(1, min(rows, MAX_WINDOW_ROWS)), max(1, min(cols, MAX_WINDOW_COLS)))
        self.set_layout(self.layout_, self.block_size)

    def set_layout(self, layout: Layout | None, block_size: int = 1) -> None:
        self.layout_, self.block_size = layout, block_size
        self.cells, self.strip, self.hover = [], [], None
        if layout is not None:
            self._build(layout)
        self._arrange(self.width())
        self.update()

    def _build(self, layout: Layout) -> None:
        shape, strides = tuple(layout.shape), tuple(layout.strides)
        lead = (0,) * max(0, len(shape) - 2)
        w_rows, w_cols = self.window
        if len(shape) == 0:
            grid = [((), (0, 0))]
        elif len(shape) == 1:
            grid = [((c,), (0, c)) for c in range(min(shape[0], w_cols))]
        else:
            rows, cols = min(shape[-2], w_rows), min(shape[-1], w_cols)
            grid = [(lead + (r, c), (r, c)) for r in range(rows) for c in range(cols)]
        if any(n == 0 for n in shape):
            grid = []
        self.cells = [_Cell(ix, rc, layout.offset + sum(i * s for i, s in zip(ix, strides)))
                      for ix, rc in grid]
        by_offset = sorted(self.cells, key=lambda c: (c.offset, c.rc))
        self.strip = []
        for cell in by_offset:
            if self.strip and isinstance(self.strip[-1], _Cell):
                skipped = cell.offset - self.strip[-1].offset - 1
                if skipped > 0:
                    self.strip.append(_Gap(skipped))
            self.strip.append(cell)
        lead_txt = "".join(f"{i}, " for i in lead)
        n_rows = 1 if len(shape) < 2 else shape[-2]
        window = (f"view[{lead_txt}0:{min(n_rows, w_rows)}, 0:{min(shape[-1], w_cols)}]"
                  if len(shape) >= 2 else
                  f"view[0:{min(shape[0], w_cols)}]" if shape else "view[()]")
        self.title = f"logical window {window} of shape {tuple(shape)}"

    # -- geometry
    def _arrange(self, width: int) -> None:
        m, hw = self.MARGIN, self.HEADER_W
        y0 = m + 20 + 16                      # title, column numbers
        for cell in self.cells:
            r, c = cell.rc
            cell.rect = QRectF(m + hw + c * self.CELL_W, y0 + r * self.CELL_H,
                               self.CELL_W - 2, self.CELL_H - 2)
        n_rows = 1 + max((c.rc[0] for c in self.cells), default=0)
        y = y0 + n_rows * self.CELL_H + 36     # strip title
        self._strip_top = y - 18
        x = m
        line_h = self.STRIP_H + (self.BAND_H if self.block_size > 1 else 0) + 8
        right = max(width, 300) - m
        for item in self.strip:
            w = self.STRIP_W if isinstance(item, _Cell) else self.GAP_W
            if x + w > right and x > m:
                x, y = m, y + line_h
            rect = QRectF(x, y, w - 2, self.STRIP_H)
            if isinstance(item, _Cell):
                item.strip = rect
            else:
                item.rect = rect
            x += w
        height = int(y + line_h + m + 22)
        if height != self._height:
            self._height = height
            self.setMinimumHeight(height)
            self.updateGeometry()

    def resizeEvent(self, event) -> None:  # noqa: N802
        self._arrange(event.size().width())
        super().resizeEvent(event)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(self.MARGIN * 2 + self.HEADER_W + self.window[1] * self.CELL_W, self._height)

    # -- painting
    def paintEvent(self, event) -> None:  # noqa: N802
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.fillRect(self.rect(), self.palette().base())
        if self.layout_ is None:
            p.setPen(self.palette().placeholderText().color())
            p.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter,
                       "Pick a tensor to see its layout.")
            return
        text = self.palette().text().color()
        p.setFont(self._bold)
        p.setPen(text)
        p.drawText(QPointF(self.MARGIN, self.MARGIN + 12), self.title)
        self._paint_headers(p)
        for cell in self.cells:
            self._paint_cell(p, cell, cell.rect, f"{cell.rc[0]},{cell.rc[1]}"
                             if len(cell.index) >= 2 else str(cell.rc[1]), None)
        p.setFont(self._bold)
        p.setPen(text)
        note = ("   (│ = block boundary)" if self.block_size > 1 else "")
        p.drawText(QPointF(self.MARGIN, self._strip_top + 10),
                   "the same elements in memory, by element offset"
                   f"   (⋯ = elements outside the window){note}")
        self._paint_strip(p)

    def _paint_headers(self, p: QPainter) -> None:
        p.setFont(self._small)
        p.setPen(self.palette().placeholderText().color())
        cols = sorted({c.rc[1] for c in self.cells})
        rows = sorted({c.rc[0] for c in self.cells})
        top = self.cells[0].rect.top() if self.cells else 0
        left = self.MARGIN + self.HEADER_W
        for c in cols:
            p.drawText(QRectF(left + c * self.CELL_W, top - 16, self.CELL_W, 14),
                       Qt.AlignmentFlag.AlignCenter, f"j={c}")
        for r in rows:
            p.drawText(QRectF(self.MARGIN, top + r * self.CELL_H, self.HEADER_W - 4, self.CELL_H),
                       Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight, f"i={r}")

    def _paint_cell(self, p: QPainter, cell: _Cell, rect: QRectF, label: str,
                    sub: str | None) -> None:
        hot = self.hover is cell
        p.fillRect(rect, row_color(cell.rc[0]).darker(115) if hot else row_color(cell.rc[0]))
        pen = QPen(QColor("#d0452b") if hot else QColor(0, 0, 0, 70), 2.5 if hot else 1)
        p.setPen(pen)
        p.drawRect(rect)
        p.setPen(QColor("#1b1b1b"))
        if sub is None:
            p.setFont(self._font)
            p.drawText(rect, Qt.AlignmentFlag.AlignCenter, label)
            return
        p.setFont(self._bold)
        p.drawText(rect.adjusted(0, 2, 0, -rect.height() / 2), Qt.AlignmentFlag.AlignCenter, label)
        p.setFont(self._small)
        p.drawText(rect.adjusted(0, rect.height() / 2, 0, -1), Qt.AlignmentFlag.AlignCenter, sub)

    def _paint_strip(self, p: QPainter) -> None:
        prev_block = None
        for item in self.strip:
            if isinstance(item, _Gap):
                p.setPen(QPen(QColor(0, 0, 0, 90), 1, Qt.PenStyle.DashLine))
                p.drawRect(item.rect)
                p.setFont(self._font)
                p.drawText(item.rect.adjusted(0, 0, 0, -12), Qt.AlignmentFlag.AlignCenter, "⋯")
                p.setFont(self._small)
                p.drawText(item.rect.adjusted(0, 14, 0, 0), Qt.AlignmentFlag.AlignCenter,
                           _short(item.skipped))
                continue
            idx = ",".join(str(i) for i in item.rc) if len(item.index) >= 2 else str(item.rc[1])
            self._paint_cell(p, item, item.strip, str(item.offset), idx)
            if self.block_size > 1:
                prev_block = self._paint_block_band(p, item, prev_block)

    def _paint_block_band(self, p: QPainter, cell: _Cell, prev_block: int | None) -> int:
        block = cell.offset // self.block_size
        strip = cell.strip
        band = QRectF(strip.left(), strip.bottom() + 2, strip.width() + 2, self.BAND_H - 3)
        shade = QColor("#5b6f8f") if block % 2 else QColor("#93a4bf")
        p.fillRect(band, shade)
        if block != prev_block:
            p.setPen(QPen(QColor("#202020"), 3))
            x = cell.strip.left() - 1
            p.drawLine(QPointF(x, cell.strip.top() - 3), QPointF(x, band.bottom()))
            p.setPen(QColor("white"))
            p.setFont(self._small)
            p.drawText(band.adjusted(4, 0, 40, 0), Qt.AlignmentFlag.AlignVCenter, f"b{block}")
        return block

    # -- hover
    def _cell_at(self, pos: QPointF) -> _Cell | None:
        for cell in self.cells:
            if cell.rect.contains(pos) or cell.strip.contains(pos):
                return cell
        return None

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        cell = self._cell_at(event.position())
        if cell is not self.hover:
            self.hover = cell
            self.update()
            self.hovered.emit(cell.index if cell else ())
        super().mouseMoveEvent(event)

    def leaveEvent(self, event) -> None:  # noqa: N802
        if self.hover is not None:
            self.hover = None
            self.update()
            self.hovered.emit(())
        super().leaveEvent(event)

    def hover_index(self, index: tuple[int, ...]) -> None:
        """Hover a cell programmatically (tests, keyboard)."""
        self.hover = next((c for c in self.cells if c.index == tuple(index)), None)
        self.update()
        self.hovered.emit(self.hover.index if self.hover else ())


def _short(n: int) -> str:
    """`+1524`, `+12k`, `+3.1M`: skipped elements in a gap marker."""
    if n < 10_000:
        return f"+{n}"
    if n < 1_000_000:
        return f"+{n // 1000}k"
    return f"+{n / 1e6:.1f}M"


# ------------------------------------------------------------------ the view

def _mono(label: QLabel) -> QLabel:
    font = QFont("monospace")
    font.setStyleHint(QFont.StyleHint.TypeWriter)
    label.setFont(font)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class LayoutView(CatchesUpWhenShown, QWidget):
    """Shape, strides and offset of the selected tensor, drawn; its values, plotted."""

    values_ready = Signal(object)   # ValueResult, after the worker delivered it

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tensorLayout")
        self.session = session
        self.source: TensorSource | None = None
        self.base: Layout | None = None
        self.layout_: Layout | None = None
        self.ops: list[str] = []
        self.result: ValueResult | None = None
        self._cache: tuple[str, tuple[int, int, np.ndarray]] | None = None
        self.runner = LatestRunner(self)
        self.runner.finished.connect(self._values_done)
        self.runner.failed.connect(self._values_failed)
        self._build_ui()
        session.weights_changed.connect(self._weights_changed)
        session.tensor_selected.connect(self.show_tensor)
        self._weights_changed(session.weights)

    # -- construction
    def _build_ui(self) -> None:
        self.picker = TensorPicker()
        self.picker.setObjectName("layoutTensorPicker")
        self.picker.tensor_picked.connect(self.session.select_tensor)
        self.header = QLabel("No weight file open.")
        self.header.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(QLabel("Tensor:"))
        top.addWidget(self.picker)
        top.addWidget(self.header, 1)

        self.diagram = LayoutDiagram()
        controls = self._build_controls()
        info = self._build_info()
        self.diagram.hovered.connect(self._hovered)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.diagram)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.formula = _mono(QLabel(" "))
        self.formula.setObjectName("offsetFormula")
        self.formula.setWordWrap(True)
        right = QVBoxLayout()
        right.setContentsMargins(0, 0, 0, 0)
        right.addWidget(scroll, 1)
        right.addWidget(self.formula)
        upper = QWidget()
        row = QHBoxLayout(upper)
        row.setContentsMargins(0, 0, 0, 0)
        left = QVBoxLayout()
        left.addLayout(controls)
        left.addWidget(info)
        left.addStretch(1)
        left_w = QWidget()
        left_w.setLayout(left)
        # (scrolls when the upper pane is short: the info box's wrapped lines were cut off)
        left_scroll = QScrollArea()
        left_scroll.setObjectName("layoutSidePanel")
        left_scroll.setWidgetResizable(True)
        left_scroll.setFrameShape(QFrame.Shape.NoFrame)
        left_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        left_scroll.setWidget(left_w)
        left_scroll.setFixedWidth(380 + left_scroll.verticalScrollBar().sizeHint().width())
        row.addWidget(left_scroll)
        row.addLayout(right, 1)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(upper)
        splitter.addWidget(self._build_values())
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setSizes([500, 380])
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(splitter, 1)

    def _build_controls(self) -> QGridLayout:
        grid = QGridLayout()
        self.transpose_button = QPushButton("Transpose  .T")
        self.transpose_button.setObjectName("transposeButton")
        self.transpose_button.clicked.connect(self.transpose)
        self.reset_button = QPushButton("Reset")
        self.reset_button.setObjectName("resetButton")
        self.reset_button.clicked.connect(self.reset)
        self.permute_edit = QLineEdit()
        self.permute_edit.setObjectName("permuteEdit")
        self.permute_edit.setPlaceholderText("axes, e.g. 1, 0")
        self.permute_edit.returnPressed.connect(lambda: self.permute(self.permute_edit.text()))
        permute_button = QPushButton("Permute")
        permute_button.clicked.connect(lambda: self.permute(self.permute_edit.text()))
        self.slice_edit = QLineEdit()
        self.slice_edit.setObjectName("sliceEdit")
        self.slice_edit.setPlaceholderText("numpy index, e.g. 2:10:2, ::-1")
        self.slice_edit.returnPressed.connect(lambda: self.apply_slice(self.slice_edit.text()))
        slice_button = QPushButton("Slice")
        slice_button.clicked.connect(lambda: self.apply_slice(self.slice_edit.text()))
        grid.addWidget(self.transpose_button, 0, 0)
        grid.addWidget(self.reset_button, 0, 1)
        grid.addWidget(self.permute_edit, 1, 0)
        grid.addWidget(permute_button, 1, 1)
        grid.addWidget(self.slice_edit, 2, 0)
        grid.addWidget(slice_button, 2, 1)
        self.window_rows, self.window_cols = QSpinBox(), QSpinBox()
        for box, value, top, name in (
                (self.window_rows, WINDOW_ROWS, MAX_WINDOW_ROWS, "windowRows"),
                (self.window_cols, WINDOW_COLS, MAX_WINDOW_COLS, "windowCols")):
            box.setRange(1, top)
            box.setValue(value)
            box.setObjectName(name)
            box.valueChanged.connect(lambda _=0: self.diagram.set_window(
                self.window_rows.value(), self.window_cols.value()))
        window = QHBoxLayout()
        window.addWidget(QLabel("window"))
        window.addWidget(self.window_rows)
        window.addWidget(QLabel("rows ×"))
        window.addWidget(self.window_cols)
        window.addWidget(QLabel("columns"))
        window.addStretch(1)
        grid.addLayout(window, 3, 0, 1, 2)
        self.op_error = QLabel()
        self.op_error.setStyleSheet("color: #b3261e;")
        self.op_error.setWordWrap(True)
        grid.addWidget(self.op_error, 4, 0, 1, 2)
        return grid

    def _build_info(self) -> QWidget:
        box = QFrame()
        box.setFrameShape(QFrame.Shape.StyledPanel)
        form = QFormLayout(box)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self.info: dict[str, QLabel] = {}
        rows = (("expression", "view", "layoutExpression"), ("shape", "shape", "layoutShape"),
                ("dtype", "dtype", "layoutDtype"),
                ("strides", "strides (elements)", "layoutStrides"),
                ("byte_strides", "strides (bytes)", "layoutByteStrides"),
                ("offset", "offset", "layoutOffset"),
                ("contiguous", "contiguous", "layoutContiguous"),
                ("buffer", "buffer", "layoutBuffer"))
        for key, text, name in rows:
            label = _mono(QLabel("—"))
            label.setObjectName(name)
            label.setWordWrap(True)
            self.info[key] = label
            form.addRow(text + ":", label)
        self.moved = QLabel()
        self.moved.setObjectName("dataMoved")
        self.moved.setWordWrap(True)
        self.moved.setStyleSheet(
            "padding: 6px; border-radius: 4px; background: #e6f2e6; color: #1d4d1d;")
        form.addRow(self.moved)
        return box

    def _build_values(self) -> QWidget:
        self.image_view = pg.ImageView(view=pg.PlotItem())
        self.image_view.setObjectName("valueHeatmap")
        self.image_view.ui.roiBtn.hide()
        self.image_view.ui.menuBtn.hide()
        self.image_view.ui.graphicsView.setBackground("w")
        self.image_view.ui.histogram.setBackground("w")
        plot = self.image_view.getView()
        plot.invertY(True)
        plot.setAspectLocked(False)   # a 49152 × 576 matrix would otherwise be a thin line
        plot.setLabel("left", "row i")
        plot.setLabel("bottom", "column j")
        self.image_view.setColorMap(pg.colormap.get("CET-D1"))
        self.hist_plot = pg.PlotWidget()
        self.hist_plot.setObjectName("valueHistogram")
        self.hist_plot.setLabel("bottom", "value")
        self.hist_plot.setLabel("left", "count")
        self.hist_plot.setBackground("w")
        self.hist_curve = self.hist_plot.plot([0, 1], [0], stepMode="center", fillLevel=0,
                                              brush=(70, 110, 180, 160), pen=pg.mkPen("#35557f"))
        self.stats_label = _mono(QLabel("—"))
        self.stats_label.setObjectName("valueStats")
        self.stats_label.setWordWrap(True)
        self.slice_label = QLabel()
        self.slice_label.setWordWrap(True)
        self.progress = JobProgress(self.runner, "Dequantizing…")
        self.compute_button = QPushButton("Compute values")
        self.compute_button.setObjectName("computeValuesButton")
        self.compute_button.clicked.connect(self.compute_values)
        side = QVBoxLayout()
        side.addWidget(self.hist_plot, 1)
        side.addWidget(self.stats_label)
        buttons = QHBoxLayout()
        buttons.addWidget(self.compute_button)
        buttons.addWidget(export_button(self.image_view, "Export heatmap…"))
        buttons.addWidget(export_button(self.hist_plot, "Export histogram…"))
        buttons.addStretch(1)
        side.addLayout(buttons)
        side_w = QWidget()
        side_w.setLayout(side)
        pane = QSplitter(Qt.Orientation.Horizontal)
        pane.addWidget(self.image_view)
        pane.addWidget(side_w)
        pane.setSizes([700, 500])
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.slice_label)
        lay.addWidget(self.progress)
        lay.addWidget(pane, 1)
        return box

    # -- session
    def _weights_changed(self, weights: Any) -> None:
        self.runner.cancel()
        self._cache = None
        names = [t.name for t in weights.tensors] if weights is not None else []
        labels = [f"{t.dtype} {tuple(t.shape)}" for t in weights.tensors] if names else None
        self.picker.set_names(names, labels)
        self.set_source(None)
        if not has_tensors(weights):
            self.picker.set_names(["demo"])
            self.picker.set_current("demo")
            self.set_source(demo_source("Q4_0", weights))   # a new user sees a tensor at once
        elif self.session.tensor in names:
            self.show_tensor(self.session.tensor)
        else:
            self.header.setText(f"{len(names)} tensors: pick one.")
            ensure_selection(self.session)

    def show_tensor(self, name: str) -> None:
        """Show tensor `name` of the open weight file (also called on `tensor_selected`).

        In a hidden tab it waits until the view is shown (see showEvent).
        """
        weights = self.session.weights
        if not has_tensors(weights) or not name:
            return
        if self.defer_while_hidden():
            return
        try:
            source = source_from_weights(weights, name)
        except (KeyError, ValueError) as e:
            self.session.error_raised.emit("Cannot show tensor", str(e))
            return
        self.picker.set_current(name)
        self.set_source(source)

    def set_source(self, source: TensorSource | None) -> None:
        """Show `source` (any tensor, e.g. one not in a file) with its row-major layout."""
        self.runner.cancel()
        if self._cache is not None and (source is None or self._cache[0] != source.name):
            self._cache = None
        self.source = source
        self.result = None
        self.ops = []
        if source is None:
            self.base = self.layout_ = None
            self._refresh()
            self._clear_values()
            return
        self.header.setText(self._header_text(source))
        itemsize = 1 if source.is_quantized else source.type_size
        self.base = self.layout_ = Layout(source.shape, itemsize=itemsize)
        self._refresh()
        self.compute_values()

    def _header_text(self, s: TensorSource) -> str:
        where = (f"<i>{s.note}</i>" if s.offset is None else
                 f"file bytes 0x{s.offset:X}–0x{s.offset + s.raw.nbytes:X}")
        packing = (f"blocks of {s.block_size} elements in {s.type_size} bytes"
                   if s.is_quantized else f"{s.type_size} bytes per element")
        return f"<b>{s.name}</b> · {s.dtype} · {fmt_bytes(s.raw.nbytes)} · {packing} · {where}"

    # -- operations (they only ever change the Layout)
    def transpose(self) -> None:
        if self.layout_ is not None:
            self._apply(self.layout_.transpose(), ".T")

    def permute(self, text: str) -> None:
        if self.layout_ is None:
            return
        try:
            axes = parse_axes(text, len(self.layout_.shape))
        except ValueError as e:
            self.op_error.setText(str(e))
            return
        self._apply(self.layout_.permute(axes), f".transpose{axes}")

    def apply_slice(self, text: str) -> None:
        if self.layout_ is None:
            return
        try:
            key = parse_index(text, len(self.layout_.shape))
            layout = self.layout_[key]
        except (ValueError, IndexError, TypeError) as e:
            self.op_error.setText(str(e))
            return
        self._apply(layout, _fmt_key(key))

    def reset(self) -> None:
        if self.base is not None:
            self.layout_, self.ops = self.base, []
            self._refresh()
            self.compute_values()

    def _apply(self, layout: Layout, op: str) -> None:
        self.layout_ = layout
        self.ops.append(op)
        self._refresh()
        self.compute_values()

    # -- display
    def _refresh(self) -> None:
        self.op_error.clear()
        lay, s = self.layout_, self.source
        self.diagram.set_layout(lay, s.block_size if s else 1)
        self.formula.setText(HOVER_HINT if lay is not None else " ")
        if lay is None or s is None:
            for label in self.info.values():
                label.setText("—")
            self.moved.hide()
            return
        i = self.info
        i["expression"].setText("t" + "".join(self.ops))
        i["shape"].setText(str(tuple(lay.shape)))
        packing = (f"block {s.block_size} el / {s.type_size} B" if s.is_quantized
                   else f"{s.type_size} B per element")
        i["dtype"].setText(f"{s.dtype}  ({packing})")
        i["strides"].setText(str(tuple(lay.strides)))
        i["byte_strides"].setText("— (elements are packed in blocks)" if s.is_quantized
                                  else str(tuple(lay.byte_strides)))
        i["offset"].setText(self._offset_text(lay, s))
        i["contiguous"].setText("yes" if lay.is_contiguous else "no")
        i["buffer"].setText(self._buffer_text(s))
        self.moved.setText(self._moved_text(lay, s))
        self.moved.show()

    def _offset_text(self, lay: Layout, s: TensorSource) -> str:
        if s.is_quantized:
            return f"{lay.offset} elements (in block {lay.offset // s.block_size})"
        return f"{lay.offset} elements = {lay.offset * s.type_size} bytes"

    def _buffer_text(self, s: TensorSource) -> str:
        if s.offset is None:
            return f"{s.raw.nbytes:,} bytes in memory"
        return f"{s.raw.nbytes:,} bytes at file offset 0x{s.offset:X}"

    def _moved_text(self, lay: Layout, s: TensorSource) -> str:
        if not self.ops:
            return ("Row-major view of the stored bytes. Transpose, permute or slice: only "
                    "shape, strides and offset will change.")
        return ("The data did not move: same buffer, nothing copied. Only the view changed: "
                f"shape {tuple(self.base.shape)} → {tuple(lay.shape)}, strides "
                f"{tuple(self.base.strides)} → {tuple(lay.strides)}, offset 0 → {lay.offset}.")

    def _hovered(self, index: tuple) -> None:
        lay, s = self.layout_, self.source
        if not index or lay is None or s is None:
            self.formula.setText(HOVER_HINT)
            return
        self.formula.setText(self.offset_formula(index))

    def offset_formula(self, index: tuple[int, ...]) -> str:
        """`offset = 0 + 2·1536 + 5·1 = 3077` and where that element's bytes are."""
        lay, s = self.layout_, self.source
        off = lay.offset_of(tuple(index))
        terms = [str(lay.offset)] if lay.offset else []
        terms += [f"{i}·{st}" for i, st in zip(index, lay.strides)]
        text = f"index {tuple(index)} → offset = {' + '.join(terms) or '0'} = {off}"
        if s.is_quantized:
            b, start, end = s.block_layout.block_of(off)
            where = "file" if s.offset is not None else "buffer"
            return (f"{text}\n→ element {off % s.block_size} of block {b} (elements "
                    f"{b * s.block_size}–{(b + 1) * s.block_size - 1}), {where} bytes "
                    f"0x{start:X}–0x{end - 1:X} ({s.type_size} B)")
        byte = off * s.type_size
        file_txt = f", file byte 0x{s.offset + byte:X}" if s.offset is not None else ""
        return f"{text}\n→ byte {off}·{s.type_size} = {byte} of the tensor{file_txt}"

    # -- values
    def compute_values(self) -> None:
        """Dequantize the 2-D slice of the current view in the worker, then draw it."""
        if self.source is None or self.layout_ is None:
            return
        if 0 in tuple(self.layout_.shape):
            self.runner.cancel()
            self._clear_values()
            self.slice_label.setText(f"The view {tuple(self.layout_.shape)} is empty: no values.")
            return
        spec = SliceSpec.of(self.layout_)
        cache = self._cache[1] if self._cache and self._cache[0] == self.source.name else None
        nr, nc = spec.shape
        lead = len(self.layout_.shape) - 2
        where = f"view[{'0, ' * lead}:, :]" if lead > 0 else "the view"
        self.slice_label.setText(f"Values of {where}: {nr} × {nc} = {nr * nc:,} elements")
        self.progress.set_title(f"Dequantizing {self.source.name}…")
        self.runner.submit(compute_slice, self.source, spec, cache, tag=self.source.name)

    def _values_done(self, tag: str, result: ValueResult) -> None:
        if self.source is None or tag != self.source.name:
            return
        if result.cache is not None:
            self._cache = (tag, result.cache)
        self.result = result
        self._show_values(result)
        self.values_ready.emit(result)

    def _values_failed(self, tag: str, error: BaseException) -> None:
        self.session.error_raised.emit("Cannot dequantize", f"{tag}: {error}")

    def _show_values(self, r: ValueResult) -> None:
        tr = pg.QtGui.QTransform.fromScale(r.image_step[1], r.image_step[0])
        self.image_view.setImage(r.image, levels=r.levels, autoRange=True, transform=tr,
                                 autoHistogramRange=True)
        self.hist_curve.setData(r.edges, r.counts)
        st = r.stats
        sample = ("" if r.sample_step == (1, 1) else
                  f"\n(sampled: every {r.sample_step[0]}th row, {r.sample_step[1]}th column)")
        self.stats_label.setText(
            f"min  {st['min']:.6g}   max {st['max']:.6g}\n"
            f"mean {st['mean']:.6g}   std {st['std']:.6g}\n"
            f"NaN  {st['nan']:,}   Inf {st['inf']:,}   values {st['count']:,}{sample}")
        shown = "" if r.image_step == (1, 1) else f" (heatmap shows every {r.image_step[0]}th row)"
        self.slice_label.setText(self.slice_label.text().split(" (heatmap")[0] + shown)

    def _clear_values(self) -> None:
        self.image_view.clear()
        self.hist_curve.setData([0, 1], [0])
        self.stats_label.setText("—")
        self.slice_label.setText("")
