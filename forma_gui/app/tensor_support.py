"""Pieces shared by the tensor views: tensor sources, background jobs, copy and export helpers.

A `TensorSource` is one tensor's stored bytes plus what is needed to address them (shape,
GGML type, file offset). It comes from an open weight file or from the built-in demo
tensor, so every view works the same way with or without a file open.

Long work runs through `workers.LatestRunner` as generator functions that yield the
fraction done between chunks; the runner checks for Cancel at every yield, so cancelling
costs at most one chunk and the GUI thread only ever receives finished results.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterator

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QCompleter, QHBoxLayout, QLabel,
                               QProgressBar, QPushButton, QTableView, QTreeView, QWidget)

from forma_gui.app.row_table import RowPaintedTable
from forma_gui.app.workers import LatestRunner, PaintMarksBusy
# imported here, not in the worker: a first import inside a job holds the GIL for tens of ms
from forma_gui.core import quant
from forma_gui.core.ggml_types import GGML_TYPES
from forma_gui.core.memory import is_token_embedding
from forma_gui.core.tensor import BlockLayout
from forma_gui.formats.tensor_info import ELEMENT_STORAGE
from forma_gui.formats.weights import ELEMENT_TO_F32

# Heatmaps everywhere in the tensor views index images as [row, column], like numpy.
pg.setConfigOptions(imageAxisOrder="row-major")

# ------------------------------------------------------------------ tensor sources

@dataclass(frozen=True)
class TensorSource:
    """One tensor's stored data: `raw` is what `WeightFile.raw(name)` returns.

    For block-quantized types `raw` is uint8 `(*shape[:-1], row_bytes)`; otherwise it is a
    typed array of `shape` (BF16 as uint16).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    raw: np.ndarray
    offset: int | None = None   # absolute file offset of the first byte; None in memory
    note: str = ""              # e.g. "demo tensor, quantized on the fly"
    #: raises FormatError when the memory-mapped file behind `raw` shrank (see `verify`)
    check: Callable[[], Any] | None = field(default=None, repr=False, compare=False)

    def verify(self) -> None:
        """FormatError if the file behind `raw` shrank since it was opened.

        `raw` is a view of a memory map: touching a page past the end of a file that was
        truncated meanwhile kills the process with SIGBUS. Every read of the data checks
        first (`blocks`, `rows`, and each chunk of a dequantization).
        """
        if self.check is not None:
            self.check()

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def block_size(self) -> int:
        """Elements per block (1 for plain element types)."""
        t = GGML_TYPES.get(self.dtype)
        return t.block_size if t else 1

    @property
    def type_size(self) -> int:
        """Bytes per block (the element size for plain types)."""
        t = GGML_TYPES.get(self.dtype)
        return t.type_size if t else self.raw.dtype.itemsize

    @property
    def is_quantized(self) -> bool:
        return self.block_size > 1

    @property
    def row_length(self) -> int:
        """Elements in one stored row (the innermost dimension)."""
        return self.shape[-1] if self.shape else 1

    @property
    def n_rows(self) -> int:
        return self.n_elements // max(1, self.row_length)

    @property
    def blocks_per_row(self) -> int:
        return max(1, self.row_length // self.block_size)

    @property
    def n_blocks(self) -> int:
        return self.n_elements // self.block_size

    def blocks(self) -> np.ndarray:
        """The data as stored blocks: `(n_blocks, type_size)` uint8, or 1-D elements."""
        self.verify()
        flat = self.raw.reshape(-1)
        return flat.reshape(-1, self.type_size) if self.is_quantized else flat

    def rows(self) -> np.ndarray:
        """Stored rows: `(n_rows, row_bytes)` for blocks, `(n_rows, row_length)` else."""
        self.verify()
        return self.raw.reshape(self.n_rows, -1)

    @property
    def block_layout(self) -> BlockLayout:
        """The core's block layout: which block holds an element, and where its bytes are."""
        return BlockLayout(self.shape, self.block_size, self.type_size, self.offset or 0)

    def block_byte_range(self, block: int) -> tuple[int, int]:
        """Byte range `[start, end)` of block `block`, absolute in the file when it has one."""
        _, start, end = self.block_layout.block_of(block * self.block_size)
        return start, end

    def label(self) -> str:
        """`name · dtype · (shape)` for headers."""
        shape = " × ".join(str(n) for n in self.shape) or "scalar"
        return f"{self.name} · {self.dtype} · {shape}"


def source_from_weights(weights: Any, name: str) -> TensorSource:
    """The `TensorSource` of tensor `name` in an open `WeightFile` (zero-copy).

    Its check is `WeightFile.raw` again, which checks the file's size before handing out a view.
    """
    info = weights.tensor(name)
    return TensorSource(name, tuple(int(n) for n in info.shape), info.dtype, weights.raw(name),
                        int(info.offset), check=functools.partial(weights.raw, name))


def default_tensor(weights: Any) -> str | None:
    """The tensor a view opens on when nothing is selected: the first block-quantized matrix.

    Token embeddings come last in that choice: they are the largest tensor of small models.
    """
    tensors = list(weights.tensors)

    def rank(t: Any) -> tuple[int, int]:
        t_type = GGML_TYPES.get(t.dtype)
        quantized = t_type is not None and t_type.block_size > 1
        embedding = is_token_embedding(t.name)
        return (0 if quantized and len(t.shape) == 2 and not embedding else
                1 if len(t.shape) == 2 else 2, 0)
    return min(tensors, key=rank).name if tensors else None


def ensure_selection(session: Any) -> None:
    """Select `default_tensor` when a weight file is open and no tensor is selected yet.

    In the next event-loop turn: every tensor view follows the selection (tens of ms each),
    and inside the weights_changed fan-out that would all add up in one turn of the GUI thread.
    """
    QTimer.singleShot(0, session, functools.partial(_select_default, session))


def hidden_in_window(widget: QWidget) -> bool:
    """Whether `widget` is in a hidden tab of a window that is on screen: its work can wait
    until it is shown, so that opening a file computes only what the user sees. (A widget
    that was never shown, as in tests, is not hidden in a window.)"""
    return widget.window().isVisible() and not widget.isVisible()


class CatchesUpWhenShown:
    """Mixin for a tensor view (with `session` and `show_tensor`): a tensor selected while
    the view sits in a hidden tab is shown once the tab is, not computed meanwhile, where it
    would compete with the visible view for the GUI thread."""

    _stale = False

    def defer_while_hidden(self) -> bool:
        """True (and remember to catch up) when the view is in a hidden tab."""
        hidden = hidden_in_window(self)
        if hidden:
            self._stale = True
        return hidden

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)  # type: ignore[misc]
        if self._stale:
            self._stale = False
            self.show_tensor(self.session.tensor)


def _select_default(session: Any) -> None:
    if session.weights is not None and not session.tensor:
        name = default_tensor(session.weights)
        if name:
            session.select_tensor(name)


def find_embedding_name(weights: Any) -> str | None:
    """Name of the token-embedding matrix (GGUF `token_embd`, HF `embed_tokens`, GPT-2 `wte`)."""
    return next((t.name for t in weights.tensors if is_token_embedding(t.name)
                 and t.name.endswith(".weight") and len(t.shape) == 2), None)


def demo_matrix(rows: int = 64, cols: int = 256, seed: int = 20240) -> np.ndarray:
    """A deterministic weight-like float32 matrix: Gaussian rows of varied scale, some outliers.

    Real weight matrices have a few outlier channels and scattered large values; both make
    blocks whose scale `d` stands out, which is what the scale plots are for.
    """
    rng = np.random.default_rng(seed)
    row_scale = np.exp(rng.normal(-3.2, 0.45, size=(rows, 1)))          # (rows, 1)
    x = rng.standard_normal((rows, cols)) * row_scale                    # (rows, cols)
    channels = rng.choice(cols, size=max(1, cols // 64), replace=False)
    x[:, channels] *= 6.0                                                # outlier channels
    spikes = rng.choice(rows * cols, size=max(1, rows * cols // 400), replace=False)
    x.flat[spikes] *= 10.0                                               # scattered outliers
    return x.astype(np.float32)


def demo_source(dtype: str = "Q4_0", weights: Any = None) -> TensorSource:
    """The demo matrix quantized on the fly by the core library; `weights` is the open file
    when it holds no tensors (a vocabulary-only GGUF), named in the note."""
    x = demo_matrix()
    raw = np.asarray(quant.quantize(x, dtype)).reshape(x.shape[0], -1)
    why = (f"{os.path.basename(getattr(weights, 'path', '')) or 'the open file'} holds no "
           "tensors (vocabulary only)" if weights is not None else "no weight file open")
    return TensorSource("demo", x.shape, dtype, raw, None,
                        note=f"{why}: a demo {x.shape[0]}×{x.shape[1]} float32 "
                             f"matrix quantized to {dtype} on the fly")


def has_tensors(weights: Any) -> bool:
    """True when `weights` is an open file with at least one tensor (a vocabulary-only GGUF
    has none: the tensor views then show the demo, as with no file at all)."""
    return weights is not None and len(weights.tensors) > 0


def dequantize_blocks(blocks: np.ndarray, dtype: str) -> np.ndarray:
    """Values of some stored blocks (or elements) as 1-D float32.

    Element types arrive typed in the file's byte order (`WeightFile.raw`), so they are
    converted by value, never reinterpreted as little-endian bytes.
    """
    if dtype in ELEMENT_STORAGE:
        convert = ELEMENT_TO_F32.get(dtype)
        values = convert(blocks) if convert else np.asarray(blocks).astype(np.float32)
        return np.asarray(values, dtype=np.float32).reshape(-1)
    return quant.dequantize(np.ascontiguousarray(blocks), dtype)


def dequantize_range(source: TensorSource, first_block: int, stop_block: int, *,
                     chunk_blocks: int | None = None) -> Generator[float, None, np.ndarray]:
    """Dequantize blocks `[first_block, stop_block)` chunk by chunk, yielding the fraction done.

    A generator for `workers.LatestRunner`: between two yields the job can be cancelled.
    """
    blocks = source.blocks()[first_block:stop_block]
    n = blocks.shape[0]
    step = chunk_blocks or max(1, (1 << 19) // source.block_size)
    out = np.empty(n * source.block_size, dtype=np.float32)
    for start in range(0, n, step):
        yield start / max(1, n)
        source.verify()  # the file may have shrunk since the last chunk
        part = dequantize_blocks(blocks[start:start + step], source.dtype)
        out[start * source.block_size:start * source.block_size + part.size] = part
    return out


def scaled(progress: Iterator[float], base: float, weight: float) -> Generator[float, None, Any]:
    """Re-map a sub-job's fractions into `[base, base + weight]`; return its result."""
    while True:
        try:
            fraction = next(progress)
        except StopIteration as stop:
            return stop.value
        yield base + weight * fraction


# ------------------------------------------------------------------ background jobs

class JobProgress(QWidget):
    """A progress bar with a Cancel button, shown while a `LatestRunner` is busy."""

    def __init__(self, runner: LatestRunner, title: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.label = QLabel(title)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setMaximumHeight(18)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancelButton")
        self.cancel_button.clicked.connect(runner.cancel)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.label)
        lay.addWidget(self.bar, 1)
        lay.addWidget(self.cancel_button)
        runner.busy_changed.connect(self._busy)
        runner.progressed.connect(self._progressed)
        policy = self.sizePolicy()
        policy.setRetainSizeWhenHidden(True)   # showing it must not re-layout the plots
        self.setSizePolicy(policy)
        self.hide()

    def set_title(self, title: str) -> None:
        self.label.setText(title)

    def _busy(self, busy: bool) -> None:
        self.bar.setValue(0)
        self.setVisible(busy)

    def _progressed(self, fraction: float) -> None:
        if fraction < 0:
            self.bar.setRange(0, 0)   # unknown: busy indicator
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(fraction * 1000))


# ------------------------------------------------------------------ copy as text

def _index_path(index: QModelIndex) -> tuple[int, ...]:
    path = []
    while index.isValid():
        path.append(index.row())
        index = index.parent()
    return tuple(reversed(path))


def rows_as_tsv(view: QAbstractItemView, *, header: bool = True) -> str:
    """The selected rows of a table or tree view as tab-separated text, all columns."""
    model = view.model()
    if model is None or view.selectionModel() is None:
        return ""
    firsts = {(_index_path(ix.siblingAtColumn(0))): ix.siblingAtColumn(0)
              for ix in view.selectionModel().selectedIndexes()}
    lines = []
    if header:
        lines.append("\t".join(str(model.headerData(c, Qt.Horizontal) or "")
                               for c in range(model.columnCount())))
    for path in sorted(firsts):
        first = firsts[path]
        n_columns = model.columnCount(first.parent())
        cells = [model.data(first.siblingAtColumn(c)) for c in range(n_columns)]
        lines.append("\t".join("" if v is None else str(v).replace("\t", " ").replace("\n", " ")
                               for v in cells))
    return "\n".join(lines) + "\n"


class _CopyMixin:
    """Ctrl+C copies the selected rows as TSV (with a header line)."""

    def keyPressEvent(self, event):  # noqa: N802 - Qt override
        if event.matches(QKeySequence.StandardKey.Copy):
            QGuiApplication.clipboard().setText(rows_as_tsv(self))
            event.accept()
            return
        super().keyPressEvent(event)


class CopyableTableView(PaintMarksBusy, _CopyMixin, QTableView):
    """A QTableView whose Ctrl+C copies the selected rows as tab-separated text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        _table_rows(self)


class CopyableRowTable(_CopyMixin, RowPaintedTable):
    """A `CopyableTableView` that paints its visible rows itself (`RowPaintedTable`)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        _table_rows(self)


def _table_rows(view: QTableView) -> None:
    """Whole rows selected, alternating colours, rows of 22 px, no row numbers."""
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setAlternatingRowColors(True)
    view.verticalHeader().setDefaultSectionSize(22)
    view.verticalHeader().hide()


class CopyableTreeView(PaintMarksBusy, _CopyMixin, QTreeView):
    """A QTreeView whose Ctrl+C copies the selected rows as tab-separated text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setAlternatingRowColors(True)
        self.setUniformRowHeights(True)


# ------------------------------------------------------------------ plot export

def show_export_dialog(item: Any) -> None:
    """Open pyqtgraph's export dialog (PNG, SVG, CSV, ...) for a plot item or widget."""
    if hasattr(item, "getPlotItem"):
        item = item.getPlotItem()
    elif hasattr(item, "getView"):          # ImageView
        item = item.getView()
    scene = item.scene()
    if scene is None:
        return
    if scene.exportDialog is None:
        from pyqtgraph.GraphicsScene.exportDialog import ExportDialog

        scene.exportDialog = ExportDialog(scene)
    scene.exportDialog.show(item)


def export_button(item: Any, text: str = "Export…") -> QPushButton:
    """A small button that opens the export dialog for `item` (PNG / SVG / CSV)."""
    button = QPushButton(text)
    button.setToolTip("Export this plot as PNG, SVG or CSV (also in the plot's right-click menu)")
    button.clicked.connect(lambda: show_export_dialog(item))
    return button


# ------------------------------------------------------------------ long curves

class EnvelopeCurve:
    """A long series drawn as its min/max per screen pixel, recomputed when the x range changes.

    pyqtgraph's own clip-and-downsample rescans the whole series several times per update
    (about 100 ms for the 884,736 block scales of SmolLM2's embedding matrix); this does one
    O(visible) pass, so zooming and the first draw stay far below the 100 ms budget. Series
    short enough to draw point by point are handed over unchanged.
    """

    #: at most this many points per horizontal pixel before min/max pairs replace them
    POINTS_PER_PIXEL = 2

    def __init__(self, plot_item: Any, x: np.ndarray, y: np.ndarray, **opts: Any) -> None:
        self.x, self.y = x, y              # x ascending
        self.vb = plot_item.vb
        self.item = plot_item.plot(antialias=False, skipFiniteCheck=True, **opts)
        self._busy = False
        self.vb.sigXRangeChanged.connect(self.refresh)
        self.refresh()

    def detach(self) -> None:
        """Stop following the view (call before removing the item)."""
        try:
            self.vb.sigXRangeChanged.disconnect(self.refresh)
        except (RuntimeError, TypeError):
            pass

    def refresh(self, *_: Any) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            self.item.setData(*self.visible())
        finally:
            self._busy = False

    def visible(self) -> tuple[np.ndarray, np.ndarray]:
        """The points to draw for the current x range."""
        n = self.x.size
        if self.vb.autoRangeEnabled()[0]:
            i0, i1 = 0, n
        else:
            lo, hi = self.vb.viewRange()[0]
            i0 = max(0, int(np.searchsorted(self.x, lo)) - 1)
            i1 = min(n, int(np.searchsorted(self.x, hi)) + 1)
        pixels = max(100, int(self.vb.width()))
        k = (i1 - i0) // (self.POINTS_PER_PIXEL * pixels)
        if k < 2:
            return self.x[i0:i1], self.y[i0:i1]
        m = (i1 - i0) // k * k
        y = self.y[i0:i0 + m].reshape(-1, k)                          # (buckets, k)
        ys = np.stack([y.min(axis=1), y.max(axis=1)], axis=1).reshape(-1)
        xs = np.repeat(self.x[i0:i0 + m:k], 2)
        return np.append(xs, self.x[i0 + m:i1]), np.append(ys, self.y[i0 + m:i1])


# ------------------------------------------------------------------ tensor picker

class TensorPicker(QComboBox):
    """An editable combo box of tensor names with type-ahead (contains) completion."""

    tensor_picked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.setMinimumContentsLength(28)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        completer = QCompleter(self.model(), self)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setCompleter(completer)
        self.activated.connect(lambda i: self.tensor_picked.emit(self.itemText(i)))
        self.lineEdit().returnPressed.connect(self._typed)
        self._quiet = False

    def set_names(self, names: list[str], labels: list[str] | None = None) -> None:
        self.blockSignals(True)
        self.clear()
        self.addItems(names)
        if labels:
            for i, label in enumerate(labels):
                self.setItemData(i, label, Qt.ItemDataRole.ToolTipRole)
        self.setCurrentIndex(-1)
        self.blockSignals(False)

    def set_current(self, name: str | None) -> None:
        self.blockSignals(True)
        i = self.findText(name) if name else -1
        self.setCurrentIndex(i)
        if i < 0:
            self.setEditText(name or "")
        self.blockSignals(False)

    def _typed(self) -> None:
        text = self.currentText().strip()
        if self.findText(text) >= 0:
            self.tensor_picked.emit(text)


def fmt_bytes(n: float) -> str:
    """Human-readable byte count in binary units.

    >>> fmt_bytes(1536), fmt_bytes(271_000_000)
    ('1.50 KiB', '258.4 MiB')
    """
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}"
    return f"{int(n)} B"


def fmt_float(x: float) -> str:
    """A float32 value in its shortest round-tripping form."""
    return str(np.float32(x))
