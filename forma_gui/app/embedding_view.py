"""Tokens meet weights: the embedding row of the selected token, and the blocks it is made of.

The Tokenize view places an `EmbeddingPanel` beside its text. When a token is selected and
the open weights have a token-embedding matrix, the panel dequantizes just that row — for
a block-quantized matrix a row is a whole number of blocks, so only those blocks are read —
and plots it with the per-block scales underneath.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from forma_gui.app.state import Session
from forma_gui.app.tensor_support import (TensorSource, dequantize_blocks, export_button,
                                          find_embedding_name, fmt_float, source_from_weights)
from forma_gui.core import quant
from forma_gui.errors import FormatError


@dataclass
class EmbeddingRow:
    """One token's row of the embedding matrix, with the blocks it is stored in."""

    token_id: int
    name: str
    dtype: str
    values: np.ndarray                 # (dim,) float32
    first_block: int                   # flat block index of the row's first block
    n_blocks: int
    byte_range: tuple[int, int] | None  # absolute file bytes of the row
    scales: dict[str, np.ndarray]      # block_scales of the row's blocks ({} for F32/F16)


def embedding_row(source: TensorSource, token_id: int) -> EmbeddingRow:
    """Dequantize row `token_id` of an embedding matrix, reading only that row's bytes."""
    if len(source.shape) != 2:
        raise ValueError(f"{source.name} has shape {source.shape}, expected (vocab, dim)")
    if not 0 <= token_id < source.shape[0]:
        raise ValueError(f"token id {token_id} is outside {source.name}'s {source.shape[0]} rows")
    source.verify()                                             # the file may have shrunk
    row = source.raw[token_id]                                  # zero-copy: one stored row
    values = dequantize_blocks(row, source.dtype)
    bpr = source.blocks_per_row
    scales = quant.block_scales(row, source.dtype) if source.is_quantized else {}
    start = None if source.offset is None else source.offset + token_id * row.nbytes
    byte_range = None if start is None else (start, start + row.nbytes)
    return EmbeddingRow(token_id, source.name, source.dtype, values, token_id * bpr, bpr,
                        byte_range, scales)


class EmbeddingPanel(QWidget):
    """The selected token's embedding row, plotted, with its blocks and scales."""

    row_shown = Signal(object)   # EmbeddingRow

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("embeddingPanel")
        self.session = session
        self.source: TensorSource | None = None
        self.row: EmbeddingRow | None = None
        self.title = QLabel()
        self.title.setObjectName("embeddingTitle")
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.plot = pg.PlotWidget()
        self.plot.setObjectName("embeddingPlot")
        self.plot.setBackground("w")
        self.plot.setLabel("bottom", "dimension")
        self.plot.setLabel("left", "value")
        self.plot.showGrid(y=True, alpha=0.2)
        self.curve = self.plot.plot([], [], pen=pg.mkPen("#1f5fa8", width=1))
        self.scale_plot = pg.PlotWidget()
        self.scale_plot.setObjectName("embeddingScales")
        self.scale_plot.setBackground("w")
        self.scale_plot.setLabel("bottom", "dimension (one bar per block)")
        self.scale_plot.setLabel("left", "d")
        self.scale_plot.setMaximumHeight(150)
        # tall enough for readable ticks: squeezed to ~30 px, the d axis labels overlapped
        self.plot.setMinimumHeight(110)
        self.scale_plot.setMinimumHeight(90)
        self.scale_plot.setXLink(self.plot)      # a bar sits under the values its block holds
        for plot in (self.plot, self.scale_plot):
            plot.getAxis("left").setWidth(52)    # equal axes keep the two x ranges aligned
            # no "(x0.001)" SI suffix: in plots this short the rotated label was clipped
            plot.getAxis("left").enableAutoSIPrefix(False)
        self.scale_bars = pg.BarGraphItem(x=[], height=[], width=1, brush="#f6c177")
        self.scale_plot.addItem(self.scale_bars)
        self.boundaries: list[pg.InfiniteLine] = []
        self.blocks_label = QLabel()
        self.blocks_label.setObjectName("embeddingBlocks")
        self.blocks_label.setWordWrap(True)
        self.blocks_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.exports = [export_button(self.plot, "Export row…"),
                        export_button(self.scale_plot, "Export scales…")]
        buttons = QHBoxLayout()
        for button in self.exports:
            buttons.addWidget(button)
        buttons.addStretch(1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.title)
        lay.addWidget(self.plot, 2)
        lay.addWidget(self.scale_plot, 1)
        lay.addWidget(self.blocks_label)
        lay.addLayout(buttons)
        session.weights_changed.connect(self._weights_changed)
        session.token_selected.connect(self.show_token)
        self._weights_changed(session.weights)

    def _weights_changed(self, weights: Any) -> None:
        self.source = None
        name = find_embedding_name(weights) if weights is not None else None
        if name is not None:
            self.source = source_from_weights(weights, name)
        self._clear()
        last = getattr(self.session, "selected_token", None)
        if self.source is not None and last is not None:
            self.show_token(last)

    def _draw_boundaries(self, size: int, n_blocks: int) -> None:
        """Faint lines on the row plot where one block ends and the next begins."""
        for line in self.boundaries:
            self.plot.removeItem(line)
        pen = pg.mkPen((150, 150, 150, 110), style=Qt.PenStyle.DashLine)
        self.boundaries = [pg.InfiniteLine(pos=b * size - 0.5, angle=90, pen=pen)
                           for b in range(1, n_blocks)] if n_blocks <= 256 else []
        for line in self.boundaries:
            self.plot.addItem(line, ignoreBounds=True)

    def _clear(self) -> None:
        self.row = None
        self.curve.setData([], [])
        self._draw_boundaries(1, 0)
        self.scale_bars.setOpts(x=[], height=[])
        self.blocks_label.clear()
        for widget in (self.plot, self.scale_plot, *self.exports):
            widget.setVisible(self.source is not None)   # no empty axes with nothing to plot
        if self.session.weights is None:
            self.title.setText("Open a weight file to see a token's embedding row.")
        elif self.source is None and not self.session.weights.tensors:
            self.title.setText("The open file holds no tensors (a vocabulary only): no token "
                               "embeddings to show.")
        elif self.source is None:
            self.title.setText("The open weights have no token-embedding tensor "
                               "(token_embd.weight / embed_tokens.weight / wte.weight).")
        else:
            s = self.source
            self.title.setText(f"Select a token to see its row of <b>{s.name}</b> "
                               f"({s.dtype}, {s.shape[0]:,} × {s.shape[1]:,}).")

    def show_token(self, token_id: int) -> None:
        """Show the embedding row of `token_id` (called on `session.token_selected`)."""
        if self.source is None:
            return
        try:
            row = embedding_row(self.source, int(token_id))
        except FormatError as e:  # the file shrank while open: one error, through the window
            self._clear()
            self.session.error_raised.emit("Cannot read the embedding", str(e))
            return
        except ValueError as e:
            self._clear()
            self.title.setText(str(e))
            return
        self.row = row
        self.curve.setData(np.arange(row.values.size), row.values)
        self.title.setText(self._title(row))
        self._show_blocks(row)
        self.row_shown.emit(row)

    def _title(self, row: EmbeddingRow) -> str:
        piece = ""
        tok = self.session.tokenizer
        if tok is not None and 0 <= row.token_id < tok.vocab_size:
            try:
                piece = f" <code>{_escape(tok.piece(row.token_id))}</code>"
            except (IndexError, KeyError, ValueError):
                piece = ""
        v = row.values
        return (f"token <b>{row.token_id}</b>{piece}: row {row.token_id} of <b>{row.name}</b> "
                f"({row.dtype}), {v.size} values · min {fmt_float(v.min())} · max "
                f"{fmt_float(v.max())} · norm {float(np.linalg.norm(v.astype(np.float64))):.4g}")

    def _show_blocks(self, row: EmbeddingRow) -> None:
        where = (f"file bytes 0x{row.byte_range[0]:X}–0x{row.byte_range[1] - 1:X} "
                 f"({row.byte_range[1] - row.byte_range[0]:,} B)" if row.byte_range else "")
        if not row.scales:
            self.scale_bars.setOpts(x=[], height=[])
            self._draw_boundaries(1, 0)
            self.blocks_label.setText(f"{row.dtype} stores one value per element; {where}")
            return
        d = row.scales["d"]
        size = row.values.size // row.n_blocks
        self.scale_bars.setOpts(x=(np.arange(d.size) + 0.5) * size, height=d, width=0.85 * size)
        self._draw_boundaries(size, row.n_blocks)
        last = row.first_block + row.n_blocks - 1
        extra = "".join(f" · {k} {fmt_float(v.min())}…{fmt_float(v.max())}"
                        for k, v in row.scales.items() if k != "d" and v.dtype.kind == "f")
        self.blocks_label.setText(
            f"blocks {row.first_block:,}–{last:,} ({row.n_blocks} blocks of "
            f"{row.values.size // row.n_blocks}) · {where}\n"
            f"d per block: {fmt_float(d.min())}…{fmt_float(d.max())}{extra}")


def _escape(text: str) -> str:
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
