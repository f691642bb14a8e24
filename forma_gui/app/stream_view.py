"""The Stream view: play a token stream back step by step and watch the UTF-8 buffer work.

Each token's bytes enter the buffer; only complete characters leave it. Beside the buffered
output runs the naive per-token decode with the U+FFFD it would have printed, and the stop
matcher with its own, separate buffer. All the logic is `forma_gui.core.stream`; this
module only shows a trace and moves through it.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from PySide6.QtCore import QAbstractTableModel, QEvent, QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontDatabase, QGuiApplication, QKeySequence, QPainter, QPen, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView, QButtonGroup, QGroupBox, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
    QPushButton, QRadioButton, QScrollArea, QSizePolicy, QSlider, QSplitter, QStyle,
    QTextEdit, QToolButton, QToolTip, QVBoxLayout, QWidget,
)

from forma_gui.app.row_table import RowPaintedTable
from forma_gui.app.state import Session
from forma_gui.app.workers import LatestRunner
from forma_gui.core.stream import (
    REPLACEMENT, ByteRole, StreamStep, format_trace_table, iter_trace, parse_ids, split_stops,
    trace_columns, visible,
)

#: tokens traced at most; longer inputs show the first ones and say so
MAX_STEPS = 20_000
#: characters of text encoded at most (the tokens past MAX_STEPS would be thrown away anyway)
MAX_TEXT_CHARS = 150_000
#: inputs up to this size are traced on the GUI thread, at once; longer ones in a worker
INLINE_LIMIT = 2_000
#: characters of decoded text shown in the panes (the tail ending at the current step)
SHOWN_CHARS = 2_000

#: byte role -> (background, text colour, legend label)
ROLE_STYLE = {
    "ascii": ("#e8eaed", "#202124", "ASCII"),
    "lead": ("#1a73e8", "#ffffff", "lead byte"),
    "continuation": ("#aecbfa", "#0b3d91", "continuation"),
    "invalid": ("#d93025", "#ffffff", "invalid → U+FFFD"),
    "held": ("#fde293", "#5f3b00", "held back (incomplete)"),
}
HELD_EDGE = "#b06000"
CURRENT_STYLE = "background:#c8f0c8;color:#202124"   # this step's text in the output panes
REPLACEMENT_STYLE = "background:#d93025;color:#ffffff;font-weight:bold"
HELD_STYLE = f"background:{ROLE_STYLE['held'][0]};color:{ROLE_STYLE['held'][1]};font-family:monospace;font-size:small"
SUPPRESSED_STYLE = "color:#9aa0a6;text-decoration:line-through"

#: how a whitespace or control character is drawn in a byte cell
CONTROL_PICTURES = {0x20: "␠", 0x7F: "␡"} | {b: chr(0x2400 + b) for b in range(0x20)}


# ------------------------------------------------------------------ the trace of one source

@dataclass
class Trace:
    """A computed trace and the joined texts the panes slice from."""

    steps: list[StreamStep] = field(default_factory=list)
    ids: list[int] | None = None
    total_tokens: int = 0
    stops: tuple[str, ...] = ()
    note: str = ""
    texts: dict[str, str] = field(default_factory=dict)          # "emitted", "naive", "stop_emitted"
    ends: dict[str, list[int]] = field(default_factory=dict)     # cumulative lengths per step

    @property
    def truncated(self) -> bool:
        return self.total_tokens > MAX_STEPS

    def upto(self, name: str, position: int) -> tuple[str, int]:
        """The text of `name` up to and including step `position`, and where that step's part starts."""
        ends = self.ends[name]
        end, start = ends[position], ends[position - 1] if position > 0 else 0
        return self.texts[name][:end], start


def compute_trace(tokenizer, *, text: str | None = None, ids: Sequence[int] | None = None,
                  stops: Sequence[str] = ()) -> Iterator[tuple[int, int]]:
    """A generator job: encode if needed, trace, yield progress, return a Trace."""
    note = ""
    if ids is None:
        if len(text or "") > MAX_TEXT_CHARS:
            note = f"Only the first {MAX_TEXT_CHARS:,} characters are encoded. "
        ids = tokenizer.encode((text or "")[:MAX_TEXT_CHARS])
        yield (0, 1)
    ids = list(ids)
    total = len(ids)
    if total > MAX_STEPS:
        note += (f"Showing the first {MAX_STEPS:,} of {total:,} tokens; the stream is cut there, "
                 f"so there is no end-of-stream flush.")
    trace = Trace(ids=ids, total_tokens=total, stops=tuple(stops), note=note.strip())
    for step in iter_trace(tokenizer, ids[:MAX_STEPS], stops=stops, flush=total <= MAX_STEPS):
        trace.steps.append(step)
        if len(trace.steps) % 1000 == 0:
            yield (len(trace.steps), total + 1)
    _join_texts(trace)
    return trace


def _join_texts(trace: Trace) -> None:
    for name in ("emitted", "naive", "stop_emitted"):
        parts = [getattr(step, name) for step in trace.steps]
        ends, total = [], 0
        for part in parts:
            total += len(part)
            ends.append(total)
        trace.texts[name], trace.ends[name] = "".join(parts), ends


def run_job(job: Iterator[Any]) -> Any:
    """Run a generator job to its end on this thread and return its result."""
    while True:
        try:
            next(job)
        except StopIteration as stop:
            return stop.value


# ------------------------------------------------------------------ explanations

def describe_role(byte: int, role: ByteRole) -> str:
    """One line for a byte cell's tooltip."""
    where = f"byte {role.offset + 1} of {role.expected}"
    return {
        "ascii": f"{byte:02x}: ASCII {chr(byte)!r}, a whole character on its own",
        "lead": f"{byte:02x}: lead byte of a {role.expected}-byte character",
        "continuation": f"{byte:02x}: continuation, {where}",
        "invalid": f"{byte:02x}: can never become valid here: part of one U+FFFD",
        "held": f"{byte:02x}: held back, {where} so far; waiting for the rest",
    }[role.role]


def describe_step(step: StreamStep) -> str:
    """What happened in a step, in a sentence or three."""
    if step.final:
        if not step.buffer_before:
            return "End of stream: the buffer is empty, nothing to flush."
        return (f"End of stream: the held bytes {step.buffer_before.hex(' ')} can no longer be "
                f"completed and are flushed as one U+FFFD.")
    parts = []
    if step.buffer_before:
        parts.append(f"The buffer held {step.buffer_before.hex(' ')}; the token adds {step.token_bytes.hex(' ')}.")
    parts.append(f"Emitted {visible(step.emitted)}." if step.emitted else "Nothing is emitted.")
    if step.buffer_after:
        first = step.roles[len(step.roles) - len(step.buffer_after)]
        parts.append(f"Holding {step.buffer_after.hex(' ')}: {len(step.buffer_after)} of the "
                     f"{first.expected} bytes of a character.")
    invalid = sum(r.role == "invalid" and r.offset == 0 for r in step.roles)
    if invalid:
        parts.append(f"{invalid} invalid sequence(s) emitted at once as U+FFFD: waiting cannot fix them.")
    naive_bad = step.naive.count(REPLACEMENT) - step.emitted.count(REPLACEMENT)
    if naive_bad > 0:
        parts.append(f"Decoding this token alone would print {naive_bad} × � here.")
    return " ".join(parts)


def describe_stop(trace: Trace, position: int) -> str:
    """The stop matcher's state at a step."""
    if not trace.stops:
        return "No stop strings."
    step = trace.steps[position]
    if step.stopped is None:
        return f"Watching for {len(trace.stops)} stop string(s); nothing matched yet."
    first = next(s for s in trace.steps if s.stops_here)
    return (f"Stopped at step {first.index} on {visible(step.stopped)} (character {step.stop_offset}); "
            f"nothing from there on is emitted.")


# ------------------------------------------------------------------ HTML for the text panes

def _escape(text: str) -> str:
    out = html.escape(text).replace(REPLACEMENT, f'<span style="{REPLACEMENT_STYLE}">{REPLACEMENT}</span>')
    return out.replace("\n", '<span style="color:#9aa0a6">↵</span>\n').replace("\t", '<span style="color:#9aa0a6">⇥</span>\t')


def runs_html(runs: Sequence[tuple[str, str]]) -> str:
    """(text, css) runs as pre-wrapped HTML; U+FFFD in red, line breaks and tabs made visible."""
    body = "".join(f'<span style="{css}">{_escape(text)}</span>' if css else _escape(text)
                   for text, css in runs if text)
    return f'<div style="white-space:pre-wrap">{body}</div>'


def _tail(text: str, start: int) -> tuple[str, int]:
    """Keep the panes light: at most SHOWN_CHARS characters ending at the text's end."""
    cut = max(0, len(text) - SHOWN_CHARS)
    return ("…" + text[cut:], max(0, start - cut) + 1) if cut else (text, start)


# ------------------------------------------------------------------ byte cells

class ByteCells(QWidget):
    """Bytes as hex cells coloured by UTF-8 role, with the character each sequence makes above.

    The first `split` bytes came from the buffer and the rest from the token; a gap and
    two captions separate them. Held bytes get a dashed amber frame.
    """

    CELL_W, CELL_H, GAP, SPLIT_GAP = 38, 28, 3, 18
    CAPTION_H, CHAR_H, LABEL_H = 15, 20, 14

    def __init__(self, parent: QWidget | None = None, *, empty_text: str = "(empty)") -> None:
        super().__init__(parent)
        self._data, self._roles, self._split = b"", (), 0
        self._captions: tuple[str, str] = ("", "")
        self.empty_text = empty_text
        self._mono = QFontDatabase.systemFont(QFontDatabase.FixedFont)
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Fixed, QSizePolicy.Fixed)

    def set_bytes(self, data: bytes, roles: Sequence[ByteRole], *, split: int = 0,
                  captions: tuple[str, str] = ("", "")) -> None:
        self._data, self._roles, self._split, self._captions = data, tuple(roles), split, captions
        self.updateGeometry()
        self.resize(self.sizeHint())
        self.update()

    def cell_rect(self, i: int) -> QRect:
        x = 4 + i * (self.CELL_W + self.GAP) + (self.SPLIT_GAP if 0 < self._split <= i else 0)
        return QRect(x, self.CAPTION_H + self.CHAR_H, self.CELL_W, self.CELL_H)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        n = len(self._data)
        width = self.cell_rect(n - 1).right() + 6 if n else self.fontMetrics().horizontalAdvance(self.empty_text) + 12
        return QSize(width, self.CAPTION_H + self.CHAR_H + self.CELL_H + self.LABEL_H + 4)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        if not self._data:
            p.setPen(self.palette().placeholderText().color())
            p.drawText(self.rect().adjusted(4, 0, 0, 0), Qt.AlignVCenter | Qt.AlignLeft, self.empty_text)
            return
        self._paint_captions(p)
        for i, (byte, role) in enumerate(zip(self._data, self._roles)):
            self._paint_cell(p, i, byte, role)
        self._paint_units(p)

    def _paint_captions(self, p: QPainter) -> None:
        small = QFont(self.font())
        small.setPointSizeF(max(7.0, small.pointSizeF() * 0.85))
        p.setFont(small)
        p.setPen(self.palette().placeholderText().color())
        groups = ((0, self._split, self._captions[0]), (self._split, len(self._data), self._captions[1]))
        for start, end, caption in groups:
            if caption and end > start:
                left, right = self.cell_rect(start), self.cell_rect(end - 1)
                box = QRect(left.left(), 0, right.right() - left.left() + 1, self.CAPTION_H)
                p.drawText(box, Qt.AlignLeft | Qt.AlignVCenter, caption)
                p.drawLine(box.left(), self.CAPTION_H - 2, box.right(), self.CAPTION_H - 2)

    def _paint_cell(self, p: QPainter, i: int, byte: int, role: ByteRole) -> None:
        bg, fg, _ = ROLE_STYLE[role.role]
        rect = self.cell_rect(i)
        p.setBrush(QColor(bg))
        held = role.role == "held"
        p.setPen(QPen(QColor(HELD_EDGE), 2, Qt.DashLine) if held else QPen(QColor(bg).darker(125), 1))
        p.drawRoundedRect(rect.adjusted(1, 1, -1, -1), 4, 4)
        p.setFont(self._mono)
        p.setPen(QColor(fg))
        p.drawText(rect, Qt.AlignCenter, f"{byte:02x}")
        p.setPen(self.palette().text().color())
        label = {"ascii": "", "invalid": "✗"}.get(role.role, f"{role.offset + 1}/{role.expected}")
        small = QFont(self.font())
        small.setPointSizeF(max(7.0, small.pointSizeF() * 0.8))
        p.setFont(small)
        p.drawText(QRect(rect.left(), rect.bottom() + 1, rect.width(), self.LABEL_H), Qt.AlignCenter, label)

    def _paint_units(self, p: QPainter) -> None:
        """Above each unit (a character, an invalid run, a held tail), what it decodes to."""
        p.setFont(self.font())
        p.setPen(self.palette().text().color())
        starts = [i for i, role in enumerate(self._roles) if role.offset == 0] + [len(self._data)]
        for i, j in zip(starts, starts[1:]):
            left, right = self.cell_rect(i), self.cell_rect(j - 1)
            box = QRect(left.left(), self.CAPTION_H, right.right() - left.left() + 1, self.CHAR_H)
            if j - i > 1:  # a bracket shows which cells make the character
                p.drawLine(box.left() + 3, box.bottom() - 1, box.right() - 3, box.bottom() - 1)
            p.drawText(box.adjusted(0, 0, 0, -3), Qt.AlignCenter, self._unit_text(i, j))

    def _unit_text(self, i: int, j: int) -> str:
        role = self._roles[i].role
        if role == "invalid":
            return REPLACEMENT
        if role == "held":
            return "… waiting" if j - i > 1 else "…"
        if role == "ascii":
            return CONTROL_PICTURES.get(self._data[i], chr(self._data[i]))
        return self._data[i:j].decode("utf-8", "replace")

    def event(self, e: QEvent) -> bool:  # noqa: D102 - Qt override: per-cell tooltips
        if e.type() == QEvent.ToolTip:
            hit = next((i for i in range(len(self._data)) if self.cell_rect(i).contains(e.pos())), None)
            if hit is None:
                QToolTip.hideText()
            else:
                source = "buffer" if hit < self._split else "token"
                QToolTip.showText(e.globalPos(), f"{describe_role(self._data[hit], self._roles[hit])} (from the {source})", self)
            return True
        return super().event(e)


def legend_html() -> str:
    """The colour key for byte cells."""
    items = []
    for role, (bg, fg, label) in ROLE_STYLE.items():
        edge = f"border:2px dashed {HELD_EDGE};" if role == "held" else ""
        items.append(f'<span style="background:{bg};color:{fg};{edge}">&nbsp;{html.escape(label)}&nbsp;</span>')
    return "&nbsp; ".join(items) + "&nbsp;&nbsp; <i>1/3 = byte 1 of a 3-byte character</i>"


# ------------------------------------------------------------------ the table of steps

_DISPLAY, _FONT, _BACKGROUND, _FOREGROUND, _TOOLTIP = (int(r) for r in (
    Qt.DisplayRole, Qt.FontRole, Qt.BackgroundRole, Qt.ForegroundRole, Qt.ToolTipRole))
STOP_ROW_BG = QColor("#fbd3cf")
AFTER_STOP_FG = QColor("#80868b")


class StreamTraceModel(QAbstractTableModel):
    """The steps of a trace as rows; columns and cells come from core.stream's table.

    Cell texts are made on demand and kept for the rows that were shown, so a 20,000-step
    trace costs nothing until it is scrolled through.
    """

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._steps: list[StreamStep] = []
        self._names: list[str] = []
        self._cells: list = []
        self._rows: dict[int, tuple[str, ...]] = {}  # row -> cell texts, filled lazily
        self._mono = QFontDatabase.systemFont(QFontDatabase.FixedFont)
        self._roles = {_DISPLAY: self._display, _FONT: self._font, _BACKGROUND: self._background,
                       _FOREGROUND: self._foreground, _TOOLTIP: self._tooltip}
        self.set_trace([], with_stops=False)

    def set_trace(self, steps: list[StreamStep], *, with_stops: bool) -> None:
        self.beginResetModel()
        self._steps = steps
        columns = trace_columns(with_stops=with_stops)
        self._names, self._cells = list(columns), list(columns.values())
        self._mono_columns = {k: self._mono for k, name in enumerate(self._names) if name in ("bytes", "buffer")}
        self._rows = {}
        self.endResetModel()

    @property
    def steps(self) -> list[StreamStep]:
        return self._steps

    def row_texts(self, row: int) -> tuple[str, ...]:
        texts = self._rows.get(row)
        if texts is None:
            step = self._steps[row]
            texts = self._rows[row] = tuple(cell(step) for cell in self._cells)
        return texts

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self._steps)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self._names)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.DisplayRole) -> Any:
        handler = self._roles.get(int(role))
        if handler is None or not index.isValid():
            return None
        return handler(index.row(), index.column())

    def _display(self, row: int, column: int) -> str:
        return self.row_texts(row)[column]

    def _font(self, row: int, column: int) -> QFont | None:
        return self._mono_columns.get(column)

    def mono_columns(self) -> dict[int, QFont]:
        """{column: the monospace font} for the columns of bytes."""
        return self._mono_columns

    def row_colors(self, row: int) -> tuple[QColor | None, QColor | None]:
        """(background, text colour) of a row: the stop's row, and the steps after it."""
        return self._background(row, 0), self._foreground(row, 0)

    def _background(self, row: int, column: int) -> QColor | None:
        return STOP_ROW_BG if self._steps[row].stops_here else None

    def _foreground(self, row: int, column: int) -> QColor | None:
        step = self._steps[row]
        return AFTER_STOP_FG if step.stopped is not None and not step.stops_here else None

    def _tooltip(self, row: int, column: int) -> str:
        return describe_step(self._steps[row])

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.DisplayRole) -> Any:  # noqa: N802
        if int(role) == _DISPLAY and orientation == Qt.Horizontal:
            return self._names[section]
        return None


class StreamTable(RowPaintedTable):
    """The step table: it paints its visible rows itself (`RowPaintedTable`) from the
    model's cached cell texts (QTableView's own paint took ~8 ms per repaint): the bytes
    columns monospaced, the row where a stop string ends and the steps after it coloured."""

    def row_texts(self, row: int) -> tuple[list[str], QColor | None, str | None]:
        return list(self.model().row_texts(row)), None, None

    def row_colors(self, row: int) -> tuple[QColor | None, QColor | None]:
        return self.model().row_colors(row)

    def column_fonts(self) -> dict[int, QFont]:
        return self.model().mono_columns()


# ------------------------------------------------------------------ the player

class StreamPlayer(QWidget):
    """Play a token stream back token by token: bytes in, buffer, text out, stop strings."""

    position_changed = Signal(int)
    trace_computed = Signal()

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("streamPlayer")
        self.session = session
        self.trace = Trace()
        self._position = 0
        self._last_position = 0  # where to stay when only the stop strings change
        self._cached_ids: tuple[Any, str, list[int]] | None = None  # (tokenizer, text, ids)
        self._runner = LatestRunner(self)
        self._runner.finished.connect(self._job_finished)
        self._runner.failed.connect(lambda _tag, error: self._show_error(error))
        self._timer = QTimer(self)
        self._timer.timeout.connect(self._tick)
        self._stale = True  # the source changed while hidden: trace again when shown
        self._build()
        self._connect()
        self._update_interval()
        self._render()

    # ---- construction ------------------------------------------------------------------------
    def _build(self) -> None:
        layout = QVBoxLayout(self)
        layout.addLayout(self._build_source_row())
        layout.addLayout(self._build_transport_row())
        self.note = QLabel(objectName="streamNote", wordWrap=True)
        self.note.setVisible(False)
        layout.addWidget(self.note)
        splitter = QSplitter(Qt.Vertical)
        splitter.addWidget(self._build_detail())
        splitter.addWidget(self._build_table())
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([400, 400])
        layout.addWidget(splitter, 1)

    def _build_source_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.use_text = QRadioButton("Tokenize text", objectName="streamUseText", checked=True)
        self.use_ids = QRadioButton("Ids:", objectName="streamUseIds")
        group = QButtonGroup(self)
        group.addButton(self.use_text)
        group.addButton(self.use_ids)
        self.text_info = QLabel(objectName="streamTextInfo")
        self.ids_edit = QLineEdit(objectName="streamIds", placeholderText="token ids, e.g. 5247, 26391, 8582")
        self.stops_edit = QLineEdit(objectName="streamStops",
                                    placeholderText=r"stop strings, separated by |   (\n = newline, \| = bar)")
        row.addWidget(QLabel("Source:"))
        row.addWidget(self.use_text)
        row.addWidget(self.text_info)
        row.addSpacing(12)
        row.addWidget(self.use_ids)
        row.addWidget(self.ids_edit, 2)
        row.addSpacing(12)
        row.addWidget(QLabel("Stop:"))
        row.addWidget(self.stops_edit, 2)
        return row

    def _build_transport_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        style = self.style()
        buttons = (
            ("start_button", "streamStart", QStyle.SP_MediaSkipBackward, "Go to start (Home)", self.go_start),
            ("back_button", "streamBack", QStyle.SP_MediaSeekBackward, "Step back (Left)", self.step_back),
            ("play_button", "streamPlay", QStyle.SP_MediaPlay, "Play / pause (Space)", self.toggle_play),
            ("forward_button", "streamForward", QStyle.SP_MediaSeekForward, "Step forward (Right)", self.step_forward),
            ("end_button", "streamEnd", QStyle.SP_MediaSkipForward, "Go to end (End)", self.go_end),
        )
        for attr, name, icon, tip, slot in buttons:
            button = QToolButton(objectName=name, toolTip=tip, icon=style.standardIcon(icon))
            button.clicked.connect(slot)
            setattr(self, attr, button)
            row.addWidget(button)
        self.position_slider = QSlider(Qt.Horizontal, objectName="streamPosition", minimum=0, maximum=0)
        self.position_label = QLabel(objectName="streamPositionLabel", minimumWidth=110)
        self.speed_slider = QSlider(Qt.Horizontal, objectName="streamSpeed", minimum=1, maximum=30, value=4,
                                    toolTip="tokens per second while playing", maximumWidth=140)
        self.speed_label = QLabel(minimumWidth=60)
        row.addWidget(self.position_slider, 1)
        row.addWidget(self.position_label)
        row.addSpacing(12)
        row.addWidget(QLabel("Speed:"))
        row.addWidget(self.speed_slider)
        row.addWidget(self.speed_label)
        return row

    def _build_detail(self) -> QWidget:
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        self.step_title = QLabel(objectName="streamStepTitle", textFormat=Qt.RichText)
        self.step_text = QLabel(objectName="streamStepText", wordWrap=True)
        layout.addWidget(self.step_title)
        layout.addWidget(self.step_text)
        cells_row = QHBoxLayout()
        self.token_cells = ByteCells(empty_text="(no bytes)")
        self.token_cells.setObjectName("streamTokenCells")
        self.buffer_cells = ByteCells(empty_text="(empty: nothing held)")
        self.buffer_cells.setObjectName("streamBufferCells")
        cells_row.addWidget(self._titled("Buffer + token bytes", self._scroll(self.token_cells)), 3)
        cells_row.addWidget(self._titled("UTF-8 buffer after this step", self._scroll(self.buffer_cells)), 1)
        layout.addLayout(cells_row)
        layout.addWidget(QLabel(legend_html(), objectName="streamLegend", textFormat=Qt.RichText))
        panes = QHBoxLayout()
        self.emitted_view = self._pane("streamEmitted")
        self.naive_view = self._pane("streamNaive")
        self.stop_view = self._pane("streamStopOutput")
        self.stop_held = QLabel(objectName="streamStopHeld", textFormat=Qt.RichText)
        self.stop_status = QLabel(objectName="streamStopStatus", wordWrap=True)
        stop_box = QWidget()
        stop_layout = QVBoxLayout(stop_box)
        stop_layout.setContentsMargins(0, 0, 0, 0)
        stop_layout.addWidget(self.stop_view, 1)
        stop_layout.addWidget(self.stop_held)
        stop_layout.addWidget(self.stop_status)
        panes.addWidget(self._titled("Buffered decode: emitted so far", self.emitted_view))
        panes.addWidget(self._titled("Naive decode: each token on its own", self.naive_view))
        panes.addWidget(self._titled("After the stop matcher", stop_box))
        layout.addLayout(panes, 1)
        return box

    def _build_table(self) -> QWidget:
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        self.model = StreamTraceModel(self)
        self.table = StreamTable(objectName="streamTable")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(22)
        # Column widths come from the first rows only: measuring 20,000 rows would block.
        self.table.horizontalHeader().setResizeContentsPrecision(64)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        copy_shortcut = QShortcut(QKeySequence.Copy, self.table, context=Qt.WidgetShortcut)
        copy_shortcut.activated.connect(self.copy_selection)
        self.copy_button = QPushButton("Copy table as text", objectName="streamCopy")
        self.copy_button.clicked.connect(self.copy_table)
        row = QHBoxLayout()
        row.addWidget(QLabel("All steps (Ctrl+C copies the selected rows)"))
        row.addStretch(1)
        row.addWidget(self.copy_button)
        layout.addLayout(row)
        layout.addWidget(self.table)
        return box

    @staticmethod
    def _titled(title: str, widget: QWidget) -> QGroupBox:
        box = QGroupBox(title)
        QVBoxLayout(box).addWidget(widget)
        return box

    @staticmethod
    def _scroll(widget: QWidget) -> QScrollArea:
        area = QScrollArea()
        area.setWidget(widget)
        area.setWidgetResizable(False)
        area.setFrameShape(QScrollArea.NoFrame)
        area.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        area.setMinimumHeight(widget.sizeHint().height() + 18)
        return area

    def _pane(self, name: str) -> QTextEdit:
        pane = QTextEdit(objectName=name, readOnly=True)
        pane.setMinimumHeight(60)
        font = pane.font()
        font.setPointSizeF(font.pointSizeF() * 1.25)
        pane.setFont(font)
        return pane

    def _connect(self) -> None:
        s = self.session
        s.tokenizer_changed.connect(lambda _t: self._source_changed())
        s.text_changed.connect(self._text_changed)
        self.use_text.toggled.connect(lambda _on: self._source_changed())
        self.ids_edit.textEdited.connect(self._ids_edited)
        self.ids_edit.returnPressed.connect(self.recompute)
        self.stops_edit.textChanged.connect(lambda _t: self._source_changed())
        self.position_slider.valueChanged.connect(self.set_position)
        self.speed_slider.valueChanged.connect(self._update_interval)
        self.table.selectionModel().currentRowChanged.connect(lambda current, _prev: self.set_position(current.row()))
        keys = {Qt.Key_Space: self.toggle_play, Qt.Key_Left: self.step_back, Qt.Key_Right: self.step_forward,
                Qt.Key_Home: self.go_start, Qt.Key_End: self.go_end}
        for key, slot in keys.items():
            QShortcut(QKeySequence(key), self, context=Qt.WidgetWithChildrenShortcut).activated.connect(slot)

    # ---- the source ----------------------------------------------------------------------------
    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if self._stale:
            self.recompute()

    def _source_changed(self) -> None:
        """Trace again now if visible; a hidden player (another tab) waits until it is shown."""
        if self.isVisible():
            self.recompute()
        else:
            self._stale = True

    def _text_changed(self, _text: str) -> None:
        if self.use_text.isChecked():
            self._source_changed()
        else:
            self._update_text_info()

    def _ids_edited(self, _text: str) -> None:
        if not self.use_ids.isChecked():
            self.use_ids.setChecked(True)  # toggling traces again
        else:
            self._source_changed()

    def _update_text_info(self) -> None:
        text = self.session.text
        preview = text if len(text) <= 24 else text[:23] + "…"
        self.text_info.setText(f"{visible(preview)} ({len(text):,} chars)")

    def recompute(self) -> None:
        """Trace the current source: at once if it is small, in a worker otherwise."""
        self._stale = False
        self._update_text_info()
        self._runner.cancel()
        tokenizer = self.session.tokenizer
        if tokenizer is None:
            self._show_trace(Trace(note="Open a tokenizer to stream its tokens."))
            return
        try:
            stops, source = split_stops(self.stops_edit.text()), self._source(tokenizer)
        except ValueError as e:
            self._show_error(e)
            return
        if len(next(iter(source.values()))) <= INLINE_LIMIT:
            self._trace_now(tokenizer, stops, source)
        else:
            self.note.setText("Tracing…")
            self.note.setVisible(True)
            self._runner.submit(compute_trace, tokenizer, stops=stops, tag=tokenizer, **source)

    def _trace_now(self, tokenizer, stops: list[str], source: dict[str, Any]) -> None:
        try:
            trace = run_job(compute_trace(tokenizer, stops=stops, **source))
        except Exception as e:  # noqa: BLE001 - shown like a worker's failure, whatever the tokenizer raised
            self._show_error(e)
            return
        self._job_finished(tokenizer, trace)

    def _show_error(self, error: BaseException) -> None:
        self._show_trace(Trace(note=str(error)), error=True)

    def _source(self, tokenizer) -> dict[str, Any]:
        """{"ids": [...]} or {"text": "..."} (ids when the text was encoded before)."""
        if self.use_ids.isChecked():
            return {"ids": parse_ids(self.ids_edit.text())}
        text = self.session.text
        cached = self._cached_ids
        if cached is not None and cached[0] is tokenizer and cached[1] == text:
            return {"ids": cached[2]}
        return {"text": text}

    def _job_finished(self, tokenizer, trace: Trace) -> None:
        if self.use_text.isChecked() and trace.ids is not None:
            self._cached_ids = (tokenizer, self.session.text, trace.ids)
        self._show_trace(trace)

    # ---- showing a trace ---------------------------------------------------------------------
    def _show_trace(self, trace: Trace, *, error: bool = False) -> None:
        same_stream = [s.token_bytes for s in trace.steps] == [s.token_bytes for s in self.trace.steps]
        self.trace = trace
        self.note.setText(trace.note)
        self.note.setStyleSheet("color:#d93025" if error else "")
        self.note.setVisible(bool(trace.note))
        self.model.set_trace(trace.steps, with_stops=bool(trace.stops))
        self.table.resizeColumnsToContents()
        header = self.table.horizontalHeader()
        header.setStretchLastSection(False)  # re-arm the stretch after the resize
        header.setStretchLastSection(True)
        self.position_slider.blockSignals(True)
        self.position_slider.setMaximum(max(0, len(trace.steps) - 1))
        self.position_slider.blockSignals(False)
        if not trace.steps:
            self.pause()
        self._position = -1  # force a redraw
        self.set_position(self._position_after_new_trace(same_stream))
        self.trace_computed.emit()

    def _position_after_new_trace(self, same_stream: bool) -> int:
        return min(self._last_position, len(self.trace.steps) - 1) if same_stream else 0

    @property
    def steps(self) -> list[StreamStep]:
        return self.trace.steps

    @property
    def position(self) -> int:
        return self._position

    def set_position(self, position: int) -> None:
        """Show step `position` (clamped to the trace)."""
        position = max(0, min(position, len(self.trace.steps) - 1))
        if position == self._position:
            return
        self._position = position
        self._last_position = max(position, 0)
        self._render()
        self.position_changed.emit(position)

    def step_forward(self) -> None:
        self.set_position(self._position + 1)

    def step_back(self) -> None:
        self.set_position(self._position - 1)

    def go_start(self) -> None:
        self.set_position(0)

    def go_end(self) -> None:
        self.set_position(len(self.trace.steps) - 1)

    # ---- playing -----------------------------------------------------------------------------
    @property
    def is_playing(self) -> bool:
        return self._timer.isActive()

    def play(self) -> None:
        if not self.trace.steps:
            return
        if self._position >= len(self.trace.steps) - 1:
            self.go_start()
        self._timer.start()
        self._update_play_button()

    def pause(self) -> None:
        self._timer.stop()
        self._update_play_button()

    def toggle_play(self) -> None:
        self.pause() if self.is_playing else self.play()

    def _tick(self) -> None:
        if self._position >= len(self.trace.steps) - 1:
            self.pause()
        else:
            self.step_forward()
            if self._position >= len(self.trace.steps) - 1:
                self.pause()

    def _update_interval(self) -> None:
        speed = self.speed_slider.value()
        self._timer.setInterval(round(1000 / speed))
        self.speed_label.setText(f"{speed} tok/s")

    def _update_play_button(self) -> None:
        icon = QStyle.SP_MediaPause if self.is_playing else QStyle.SP_MediaPlay
        self.play_button.setIcon(self.style().standardIcon(icon))

    # ---- rendering one step ------------------------------------------------------------------
    def _render(self) -> None:
        steps = self.trace.steps
        for button in (self.start_button, self.back_button, self.forward_button, self.end_button, self.play_button):
            button.setEnabled(bool(steps))
        if not steps:
            self._render_empty()
            return
        step = steps[self._position]
        self._sync_controls()
        self._render_step(step)
        self._render_texts(step)

    def _render_empty(self) -> None:
        self.position_label.setText("no steps")
        self.step_title.setText("")
        self.step_text.setText("")
        self.token_cells.set_bytes(b"", ())
        self.buffer_cells.set_bytes(b"", ())
        for pane in (self.emitted_view, self.naive_view, self.stop_view):
            pane.clear()
        self.stop_held.setText("")
        self.stop_status.setText("")

    def _sync_controls(self) -> None:
        n_tokens = len(self.trace.steps) - (1 if self.trace.steps[-1].final else 0)
        self.position_slider.blockSignals(True)
        self.position_slider.setValue(self._position)
        self.position_slider.blockSignals(False)
        step = self.trace.steps[self._position]
        where = "flush" if step.final else f"step {self._position}"
        self.position_label.setText(f"{where} · {n_tokens} tokens")
        index = self.model.index(self._position, 0)
        selection = self.table.selectionModel()
        if selection.currentIndex().row() != self._position:
            selection.blockSignals(True)
            self.table.selectRow(self._position)
            selection.setCurrentIndex(index, selection.SelectionFlag.NoUpdate)
            selection.blockSignals(False)
            self.table.viewport().update()
        self.table.scrollTo(index)

    def _render_step(self, step: StreamStep) -> None:
        if step.final:
            title = "<b>End of stream</b>: flush"
        else:
            token = "raw bytes" if step.token_id is None else f"token <b>{step.token_id}</b> {html.escape(visible(step.piece))}"
            title = f"<b>Step {step.index}</b> · {token} · {len(step.token_bytes)} byte(s)"
        self.step_title.setText(title)
        self.step_text.setText(describe_step(step))
        captions = ("buffer", "end of stream" if step.final else "token")
        self.token_cells.set_bytes(step.stream_bytes, step.roles, split=len(step.buffer_before), captions=captions)
        held = len(step.buffer_after)
        self.buffer_cells.set_bytes(step.buffer_after, step.roles[len(step.roles) - held:] if held else (),
                                    captions=("held", ""))

    def _render_texts(self, step: StreamStep) -> None:
        # The held bytes trail the buffered output, so the wait is visible where the text is.
        held = [(f"[{step.buffer_after.hex(' ')}]", HELD_STYLE)] if step.buffer_after else []
        for name, pane, extra in (("emitted", self.emitted_view, held), ("naive", self.naive_view, [])):
            text, start = _tail(*self.trace.upto(name, self._position))
            pane.setHtml(runs_html([(text[:start], ""), (text[start:], CURRENT_STYLE), *extra]))
            pane.moveCursor(pane.textCursor().MoveOperation.End)
        self._render_stop(step)

    def _render_stop(self, step: StreamStep) -> None:
        text, start = _tail(*self.trace.upto("stop_emitted", self._position))
        runs = [(text[:start], ""), (text[start:], CURRENT_STYLE)]
        if step.stopped is not None:
            decoded, _ = self.trace.upto("emitted", self._position)
            runs += [(" STOP ", "background:#d93025;color:#ffffff;font-weight:bold;font-size:small"), (decoded[step.stop_offset:][:SHOWN_CHARS], SUPPRESSED_STYLE)]
        self.stop_view.setHtml(runs_html(runs))
        held = step.stop_held
        self.stop_held.setText(
            f'Stop buffer: <span style="{HELD_STYLE}">{html.escape(visible(held))}</span>'
            if self.trace.stops else "")
        self.stop_status.setText(describe_stop(self.trace, self._position))

    # ---- copying -------------------------------------------------------------------------------
    def copy_table(self) -> str:
        """Copy the whole trace as a plain-text table; returns the text."""
        return self._copy(self.trace.steps)

    def copy_selection(self) -> str:
        """Copy the selected rows (all rows when none is selected)."""
        rows = sorted({index.row() for index in self.table.selectionModel().selectedRows()})
        return self._copy([self.trace.steps[r] for r in rows] if rows else self.trace.steps)

    def _copy(self, steps: list[StreamStep]) -> str:
        text = format_trace_table(steps, with_stops=bool(self.trace.stops))
        QGuiApplication.clipboard().setText(text)
        return text

    # ---- texts for callers and tests ------------------------------------------------------------
    def text_so_far(self, name: str = "emitted") -> str:
        """The "emitted", "naive" or "stop_emitted" text up to the current step."""
        return self.trace.upto(name, self._position)[0] if self.trace.steps else ""
