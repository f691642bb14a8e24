"""The Train view: learn BPE merges one step at a time, with the pair counts in view.

Layout: a toolbar (mode, number of merges, pattern, Load text…, Train, progress + Cancel,
Use this tokenizer, Export…) over a splitter. Left: the corpus editor (`trainCorpus`),
prefilled with the example of Sennrich et al. (2016) as `symbols:frequency` lines, and the
list of merges learned (`trainMergeList`). Right: the stepper (first, back, forward, run to
end, a slider over the merge index), a sentence saying what the step did, the pair-count
table (`trainPairTable`: sorted best first, ties marked, the chosen pair highlighted), and
the corpus re-segmented after the step, each symbol a coloured box (`trainSegments`).

Position k on the slider means "k merges applied": the table shows the counts from which
merge k was chosen (at k = 0: the counts for the first merge, marked "next"), and the boxes
show the corpus after merge k with the new symbol outlined.

Word-dictionary training of a small dictionary runs inline (the paper's example takes
microseconds); byte-level training and large dictionaries run in a worker, with progress
and Cancel. All views of the result go through a `Trace` (WordTrace / ByteTrace): one
object that knows how to spell a symbol and how the corpus looks after k merges.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import (QAbstractListModel, QAbstractTableModel, QModelIndex, QRectF, QSize,
                            Qt, Signal)
from PySide6.QtGui import QBrush, QColor, QFont, QFontDatabase, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QFileDialog, QHBoxLayout,
                               QHeaderView, QLabel, QListView, QPlainTextEdit, QProgressBar,
                               QPushButton, QScrollArea, QSizePolicy, QSlider, QSpinBox,
                               QSplitter, QStyle, QTableView, QToolButton, QVBoxLayout, QWidget)

from forma_gui.app.palette import assign_shades, border_color, token_color
from forma_gui.core.bpe import (PAPER_EXAMPLE, PAPER_MERGES, ByteLevelTrainer, ByteLevelTraining,
                                PairCount, Step, Training, format_words, learn_bpe, parse_words,
                                pattern_names)

log = logging.getLogger(__name__)

#: mode key -> what the mode combo says
MODES = {
    "words": "Word dictionary (Sennrich et al.)",
    "bytes": "Byte-level BPE on raw text",
}
#: mode key -> the hint above the corpus editor
HINTS = {
    "words": "One word per line: its symbols separated by spaces, a colon, its frequency. "
             "<code>&lt;/w&gt;</code> ends a word. Prefilled with the example of Sennrich "
             "et al. (2016), 10 merges.",
    "bytes": "Raw text. The pattern cuts it into pre-tokens; each starts as its UTF-8 bytes "
             "(256 base tokens) and merges never cross a pre-token.",
}
#: mode key -> how ties are broken, said when a step had one
TIE_RULES = {
    "words": "the pair seen first (words in order, symbols left to right) wins",
    "bytes": "the smallest pair wins (bytes in GPT-2 character order, then by rank), "
             "as in HF tokenizers' trainer",
}
#: the byte-level default corpus: the paper's dictionary written out as running text
PAPER_TEXT = " ".join(w.replace(" ", "").removesuffix("</w>")
                      for w, f in PAPER_EXAMPLE.items() for _ in range(f))

TABLE_ROWS = 24            # runner-up pairs kept per step for the table
INLINE_WORDS = 2_000       # up to this many words, word-dictionary training runs inline
PREVIEW_CHARS = 4_000      # byte level: the start of the corpus shown re-segmented
PREVIEW_LINES = 80
CHOSEN_BG = QColor(255, 226, 140)
VISIBLE_WS = str.maketrans({" ": "·", "\n": "↵", "\t": "⇥", "\r": "␍"})


@dataclass
class ModeInput:
    """What the user typed for one mode; each mode keeps its own."""

    text: str
    merges: int


# ---- traces: a training result as the view shows it ------------------------------------

@dataclass(frozen=True)
class Chip:
    label: str
    key: int           # colour key: the symbol's id
    new: bool = False  # made by the current merge


Row = tuple[list[Chip], str]  # (boxes, text after them)


class WordTrace:
    """A word-dictionary `Training` for the view."""

    mode = "words"

    def __init__(self, training: Training) -> None:
        self.training = training
        self.steps: list[Step] = training.steps
        self._ids: dict[str, int] = {}
        for word in training.initial:
            for symbol in word.split():
                self._ids.setdefault(symbol, len(self._ids))
        for symbol in training.symbols:
            self._ids.setdefault(symbol, len(self._ids))

    def render(self, symbol: str) -> str:
        return symbol

    def rows_at(self, k: int) -> list[Row]:
        """Each word after k merges, its symbols as chips, then `×frequency`."""
        new = self.training.symbols[k - 1] if k else None
        return [([Chip(s, self._ids.get(s, 0), s == new) for s in word.split()], f"×{freq}")
                for word, freq in self.training.words_at(k).items()]


class ByteTrace:
    """A `ByteLevelTraining` for the view: symbols are token ids, spelled GPT-2 style."""

    mode = "bytes"

    def __init__(self, training: ByteLevelTraining, preview: str) -> None:
        self.training = training
        self.steps: list[Step] = training.steps
        self.preview = _preview(preview)
        self._ranks = list(training.ranks.items())  # in rank order

    def render(self, token_id: int) -> str:
        """A token's text, whitespace made visible, bytes of a split character as \\xNN."""
        return visible(self.training.token_bytes(token_id))

    def tokenizer(self, k: int | None = None):
        """The trained tokenizer after k merges (all of them by default)."""
        from forma_gui.core.bytelevel import ByteLevelBPETokenizer

        k = len(self.steps) if k is None else k
        return ByteLevelBPETokenizer.from_ranks(dict(self._ranks[:256 + k]),
                                                pattern=self.training.pattern,
                                                name=f"trained BPE ({k} merges)")

    def rows_at(self, k: int) -> list[Row]:
        """The preview text encoded after k merges, one row per line."""
        rows: list[Row] = [([], "")]
        for token_id in self.tokenizer(k).encode(self.preview):
            data = self.training.token_bytes(token_id)
            rows[-1][0].append(Chip(visible(data), token_id, k > 0 and token_id == 255 + k))
            if data.endswith(b"\n") and len(rows) < PREVIEW_LINES:
                rows.append(([], ""))
        return rows if rows[-1][0] else rows[:-1]


def _preview(text: str) -> str:
    """The start of the corpus, cut at a line end."""
    if len(text) <= PREVIEW_CHARS:
        return text
    cut = text.rfind("\n", 0, PREVIEW_CHARS)
    return text[: cut + 1 if cut > 0 else PREVIEW_CHARS]


def visible(data: bytes) -> str:
    """Token bytes as text with whitespace made visible, stray bytes as \\xNN.

    >>> visible(b" the\\n"), visible(b"\\xe2\\x82")
    ('·the↵', '\\\\xe2\\\\x82')
    """
    return data.decode("utf-8", "backslashreplace").translate(VISIBLE_WS)


def describe_step(trace, k: int) -> str:
    """The sentence over the table: what merge k did (k = 0: what comes next)."""
    if not trace.steps:
        return "No pair to merge: every word is a single symbol."
    step = trace.steps[max(k - 1, 0)]
    a, b = trace.render(step.pair[0]), trace.render(step.pair[1])
    what = f"<b>{_html(a)} + {_html(b)} → {_html(a + b)}</b>, count {step.count}"
    if k == 0:
        text = f"Before any merge. Next: {what}."
    else:
        text = f"Merge {k} of {len(trace.steps)}: {what}, changing {step.n_changed} " \
               f"word{'s' if step.n_changed != 1 else ''}."
    tied = [p for p in step.runners_up if p.tied]
    if tied:
        others = ", ".join(f"{_html(trace.render(p.pair[0]))} + {_html(trace.render(p.pair[1]))}"
                           for p in tied[:4]) + (", …" if len(tied) > 4 else "")
        text += f" Tie with {others}: {TIE_RULES[trace.mode]}."
    return text


def _html(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---- Qt models ---------------------------------------------------------------------------

class PairTableModel(QAbstractTableModel):
    """The pair counts of one step: the chosen (or next) pair first, then the runner-ups."""

    HEADERS = ("left", "right", "merged", "count", "note")

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: tuple[PairCount, ...] = ()
        self.render = str
        self.chosen_label = "chosen"

    def set_step(self, step: Step | None, render, chosen_label: str) -> None:
        self.beginResetModel()
        self.rows = step.ranking if step is not None else ()
        self.render, self.chosen_label = render, chosen_label
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt override
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt override
        return 0 if parent.isValid() else len(self.HEADERS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802
        if role != Qt.DisplayRole:
            return None
        return self.HEADERS[section] if orientation == Qt.Horizontal else str(section + 1)

    def data(self, index, role=Qt.DisplayRole):
        row, col = self.rows[index.row()], index.column()
        if role == Qt.DisplayRole:
            return self._text(index.row(), row, col)
        if role == Qt.BackgroundRole and index.row() == 0:
            return QBrush(CHOSEN_BG)
        if role == Qt.FontRole and index.row() == 0:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.TextAlignmentRole and col == 3:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == Qt.ToolTipRole and row.tied:
            return "same count as the chosen pair; the tie rule decided"
        return None

    def _text(self, r: int, row: PairCount, col: int) -> str:
        a, b = self.render(row.pair[0]), self.render(row.pair[1])
        if col < 4:
            return (a, b, a + b, str(row.count))[col]
        if r == 0:
            return self.chosen_label + (" (won tie)" if row.tied else "")
        return "tie" if row.tied else ""


class MergeListModel(QAbstractListModel):
    """Every merge of the training; those after the current position are greyed."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.steps: list[Step] = []
        self.render = str
        self.position = 0

    def set_trace(self, trace) -> None:
        self.beginResetModel()
        self.steps, self.render, self.position = trace.steps, trace.render, 0
        self.endResetModel()

    def set_position(self, k: int) -> None:
        self.position = k
        if self.steps:
            self.dataChanged.emit(self.index(0), self.index(len(self.steps) - 1))

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt override
        return 0 if parent.isValid() else len(self.steps)

    def data(self, index, role=Qt.DisplayRole):
        step, i = self.steps[index.row()], index.row()
        if role == Qt.DisplayRole:
            a, b = self.render(step.pair[0]), self.render(step.pair[1])
            return f"{i + 1}. {a} + {b} → {a + b}  ({step.count})"
        if role == Qt.UserRole:
            return self.render(step.pair[0]) + self.render(step.pair[1])
        if role == Qt.ForegroundRole and i >= self.position:
            return QBrush(QColor(150, 150, 150))
        if role == Qt.FontRole and i == self.position - 1:
            font = QFont()
            font.setBold(True)
            return font
        return None


# ---- the re-segmented corpus -------------------------------------------------------------

class ChipRows(QWidget):
    """Rows of coloured symbol boxes, wrapped to the widget's width."""

    PAD, GAP, LINE_GAP, MARGIN = 4.0, 3.0, 6.0, 8.0

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("trainSegments")
        self.rows: list[Row] = []
        self._font = QFontDatabase.systemFont(QFontDatabase.FixedFont)
        self._font.setPointSizeF(self._font.pointSizeF() * 1.15)
        self._metrics = QFontMetricsF(self._font)
        self._boxes: list[tuple[QRectF, str, int, int, bool]] = []  # rect, label, slot, shade, new
        self._notes: list[tuple[QRectF, str]] = []
        self._height = 0
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Preferred)

    def set_rows(self, rows: list[Row]) -> None:
        self.rows = rows
        self._relayout()
        self.update()

    @property
    def chip_labels(self) -> list[list[str]]:
        """The labels of every row (what the test reads)."""
        return [[chip.label for chip in chips] for chips, _ in self.rows]

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(400, max(self._height, 60))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        self._relayout()
        super().resizeEvent(event)

    def _relayout(self) -> None:
        from forma_gui.app.palette import hue_index

        line_h = self._metrics.height() + 2 * self.PAD
        width = max(self.width(), 200) - self.MARGIN
        self._boxes, self._notes = [], []
        y = self.MARGIN
        for chips, note in self.rows:
            slots, shades = assign_shades([hue_index(c.key) for c in chips])
            x = self.MARGIN
            for chip, slot, shade in zip(chips, slots, shades):
                w = self._metrics.horizontalAdvance(chip.label) + 2 * self.PAD
                if x + w > width and x > self.MARGIN:
                    x, y = self.MARGIN, y + line_h + self.GAP
                self._boxes.append((QRectF(x, y, w, line_h), chip.label, slot, shade, chip.new))
                x += w + self.GAP
            if note:
                w = self._metrics.horizontalAdvance(note) + self.PAD
                self._notes.append((QRectF(x + self.PAD, y, w, line_h), note))
            y += line_h + self.LINE_GAP
        self._height = int(y + self.MARGIN)
        if self.minimumHeight() != self._height:
            self.setMinimumHeight(self._height)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        p.setFont(self._font)
        visible = QRectF(event.rect())
        for rect, label, slot, shade, new in self._boxes:
            if not rect.intersects(visible):
                continue
            p.setBrush(token_color(slot, shade))
            p.setPen(QPen(QColor(20, 20, 20), 2.5) if new else QPen(border_color(slot), 0.8))
            p.drawRoundedRect(rect, 3, 3)
            p.setPen(QColor(20, 20, 20))
            p.drawText(rect, Qt.AlignCenter, label)
        p.setPen(self.palette().color(self.foregroundRole()).lighter(150))
        for rect, note in self._notes:
            if rect.intersects(visible):
                p.drawText(rect, Qt.AlignVCenter | Qt.AlignLeft, note)


# ---- the view ----------------------------------------------------------------------------

class TrainView(QWidget):
    """Train BPE on the corpus in the editor and step through the merges."""

    training_finished = Signal(object)   # the Training / ByteLevelTraining
    step_changed = Signal(int)           # merges applied at the current position

    def __init__(self, session, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("trainView")
        self.session = session
        self.trace: WordTrace | ByteTrace | None = None
        self.position = 0
        self._worker = None
        self._inputs = {"words": ModeInput(format_words(PAPER_EXAMPLE), PAPER_MERGES),
                        "bytes": ModeInput(PAPER_TEXT, 30)}
        self._mode = "words"
        self._build()
        self._load_inputs("words")
        self.train()

    # ---- construction --------------------------------------------------------------------
    def _build(self) -> None:
        layout = QVBoxLayout(self)
        layout.addLayout(self._build_toolbar())
        splitter = QSplitter(Qt.Horizontal, self)
        splitter.addWidget(self._build_left())
        splitter.addWidget(self._build_right())
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        layout.addWidget(splitter, 1)

    def _named(self, widget, name: str, tip: str = ""):
        widget.setObjectName(name)
        if tip:
            widget.setToolTip(tip)
        return widget

    def _build_toolbar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.mode_box = self._named(QComboBox(), "trainMode")
        for key, label in MODES.items():
            self.mode_box.addItem(label, key)
        self.mode_box.currentIndexChanged.connect(self._mode_picked)
        self.merges_box = self._named(QSpinBox(), "trainMerges", "number of merges to learn")
        self.merges_box.setRange(0, 200_000)
        self.pattern_box = self._named(QComboBox(), "trainPattern", "pre-tokenizer pattern")
        self.pattern_box.addItems(pattern_names())
        self.load_button = self._named(QPushButton("Load text…"), "trainLoad")
        self.load_button.clicked.connect(self._ask_load)
        self.train_button = self._named(QPushButton("Train"), "trainRun")
        self.train_button.clicked.connect(self.train)
        self.progress = self._named(QProgressBar(), "trainProgress")
        self.progress.setMaximumWidth(160)
        self.cancel_button = self._named(QPushButton("Cancel"), "trainCancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.use_button = self._named(QPushButton("Use this tokenizer"), "trainUse",
                                      "load the byte-level result into the Tokenize view")
        self.use_button.clicked.connect(self.use_tokenizer)
        self.export_button = self._named(QPushButton("Export…"), "trainExport",
                                         "write vocab.json, merges.txt, tokenizer.json and "
                                         "ranks.tiktoken to a folder")
        self.export_button.clicked.connect(self._ask_export)
        for label, widget in (("Mode", self.mode_box), ("Merges", self.merges_box),
                              ("Pattern", self.pattern_box)):
            bar.addWidget(QLabel(label))
            bar.addWidget(widget)
        for widget in (self.load_button, self.train_button, self.progress, self.cancel_button):
            bar.addWidget(widget)
        bar.addStretch(1)
        bar.addWidget(self.use_button)
        bar.addWidget(self.export_button)
        self._set_busy(False)
        return bar

    def _build_left(self) -> QWidget:
        box = QWidget()
        col = QVBoxLayout(box)
        col.setContentsMargins(0, 0, 0, 0)
        self.hint = self._named(QLabel(), "trainHint")
        self.hint.setWordWrap(True)
        self.editor = self._named(QPlainTextEdit(), "trainCorpus")
        self.editor.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        self.editor.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.merge_model = MergeListModel(self)
        self.merge_list = self._named(QListView(), "trainMergeList", "click a merge to go there")
        self.merge_list.setModel(self.merge_model)
        self.merge_list.setUniformItemSizes(True)
        self.merge_list.clicked.connect(lambda index: self.set_position(index.row() + 1))
        col.addWidget(self.hint)
        col.addWidget(self.editor, 3)
        col.addWidget(QLabel("Merges learned"))
        col.addWidget(self.merge_list, 2)
        return box

    def _build_right(self) -> QWidget:
        box = QWidget()
        col = QVBoxLayout(box)
        col.setContentsMargins(0, 0, 0, 0)
        col.addLayout(self._build_stepper())
        self.step_text = self._named(QLabel(), "trainStepText")
        self.step_text.setWordWrap(True)
        self.step_text.setTextFormat(Qt.RichText)
        self.pair_model = PairTableModel(self)
        self.pair_table = self._named(QTableView(), "trainPairTable")
        self.pair_table.setModel(self.pair_model)
        self.pair_table.setSelectionMode(QAbstractItemView.NoSelection)
        self.pair_table.verticalHeader().setDefaultSectionSize(22)
        self.pair_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.pair_table.horizontalHeader().setStretchLastSection(True)
        self.chips = ChipRows()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.chips)
        splitter = QSplitter(Qt.Vertical)
        splitter.addWidget(self._titled("Pair counts at this step", self.pair_table))
        splitter.addWidget(self._titled("The corpus after this step", scroll))
        col.addWidget(self.step_text)
        col.addWidget(splitter, 1)
        return box

    def _titled(self, title: str, widget: QWidget) -> QWidget:
        box = QWidget()
        col = QVBoxLayout(box)
        col.setContentsMargins(0, 4, 0, 0)
        col.addWidget(QLabel(title))
        col.addWidget(widget)
        return box

    def _build_stepper(self) -> QHBoxLayout:
        row = QHBoxLayout()
        # the style's media icons, as the Stream view's: "⏮" and "⏭" are missing from many fonts
        buttons = ((QStyle.StandardPixmap.SP_MediaSkipBackward, "trainFirst", "back to no merges",
                    lambda: self.set_position(0)),
                   (QStyle.StandardPixmap.SP_MediaSeekBackward, "trainStepBack", "undo one merge", self.step_back),
                   (QStyle.StandardPixmap.SP_MediaSeekForward, "trainStepForward", "apply the next merge",
                    self.step_forward),
                   (QStyle.StandardPixmap.SP_MediaSkipForward, "trainToEnd", "run to the end", self.run_to_end))
        for icon, name, tip, slot in buttons:
            button = self._named(QToolButton(), name, tip)
            button.setIcon(self.style().standardIcon(icon))
            button.clicked.connect(slot)
            row.addWidget(button)
        self.slider = self._named(QSlider(Qt.Horizontal), "trainSlider", "merge index")
        self.slider.valueChanged.connect(self.set_position)
        self.position_label = self._named(QLabel(), "trainPosition")
        row.addWidget(self.slider, 1)
        row.addWidget(self.position_label)
        return row

    # ---- inputs and modes ------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self._mode

    def set_mode(self, mode: str) -> None:
        """Switch between "words" and "bytes"; each keeps its own corpus; retrains."""
        self.mode_box.setCurrentIndex(list(MODES).index(mode))

    def _mode_picked(self, index: int) -> None:
        mode = list(MODES)[index]
        if mode == self._mode:
            return
        self._save_inputs()
        self._mode = mode
        self._load_inputs(mode)
        self.train()

    def _save_inputs(self) -> None:
        self._inputs[self._mode] = ModeInput(self.editor.toPlainText(), self.merges_box.value())

    def _load_inputs(self, mode: str) -> None:
        self.editor.setPlainText(self._inputs[mode].text)
        self.merges_box.setValue(self._inputs[mode].merges)
        self.pattern_box.setEnabled(mode == "bytes")
        self.hint.setText(HINTS[mode])

    def set_corpus(self, text: str, merges: int | None = None) -> None:
        """Put `text` in the editor (and the number of merges); call `train()` to learn."""
        self.editor.setPlainText(text)
        if merges is not None:
            self.merges_box.setValue(merges)

    def load_text_file(self, path: str | Path) -> bool:
        """Load a UTF-8 text file as the byte-level corpus and train on it."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            self.session.error_raised.emit("Cannot load the corpus", f"{path}: {e}")
            return False
        self._inputs["bytes"] = ModeInput(text, max(self._inputs["bytes"].merges, 1000))
        if self._mode == "bytes":
            self._load_inputs("bytes")
            self.train()
        else:
            self.set_mode("bytes")
        return True

    def _ask_load(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load a text corpus", "",
                                              "Text (*.txt);;All files (*)")
        if path:
            self.load_text_file(path)

    # ---- training ----------------------------------------------------------------------------
    def train(self) -> None:
        """Learn from the editor's corpus with the current settings."""
        self.cancel()
        text, merges = self.editor.toPlainText(), self.merges_box.value()
        if self._mode == "words":
            self._train_words(text, merges)
        else:
            self._start(_train_bytes_job, text, merges, self.pattern_box.currentText())

    def _train_words(self, text: str, merges: int) -> None:
        try:
            vocab = parse_words(text)
        except ValueError as e:
            self.hint.setText(f"<span style='color:#b00020'>{_html(str(e))}</span>")
            return
        self.hint.setText(HINTS["words"])
        if len(vocab) <= INLINE_WORDS:
            self._finished(WordTrace(learn_bpe(vocab, merges, top=TABLE_ROWS)))
        else:
            self._start(_train_words_job, vocab, merges)

    def _start(self, job, *args) -> None:
        from forma_gui.app.workers import run_in_thread

        self._set_busy(True)
        self._worker = run_in_thread(job, *args, on_done=self._finished, on_error=self._failed,
                                     on_progress=self._progressed, on_cancel=self._cancelled)

    def cancel(self) -> None:
        """Stop a running training; what was shown before stays."""
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None
            self._set_busy(False)

    @property
    def busy(self) -> bool:
        return self._worker is not None

    def _set_busy(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.train_button.setEnabled(not busy)

    def _progressed(self, fraction: float) -> None:
        if fraction < 0:
            self.progress.setRange(0, 0)
        else:
            self.progress.setValue(int(fraction * 1000))

    def _finished(self, trace) -> None:
        self._worker = None
        self._set_busy(False)
        self.trace = trace
        self.merge_model.set_trace(trace)
        self.slider.blockSignals(True)
        self.slider.setRange(0, len(trace.steps))
        self.slider.blockSignals(False)
        is_bytes = trace.mode == "bytes"
        self.use_button.setEnabled(is_bytes)
        self.export_button.setEnabled(is_bytes)
        self.position = -1
        self.set_position(0)
        requested = self.merges_box.value()
        if len(trace.steps) < requested:
            self.session.status_posted.emit(
                f"training stopped after {len(trace.steps)} of {requested} merges: no pair left")
        self.training_finished.emit(trace.training)

    def _failed(self, error: BaseException) -> None:
        self._worker = None
        self._set_busy(False)
        self.session.error_raised.emit("Training failed", str(error))

    def _cancelled(self) -> None:
        self.session.status_posted.emit("training cancelled")

    @property
    def training(self):
        return None if self.trace is None else self.trace.training

    # ---- stepping ----------------------------------------------------------------------------
    def set_position(self, k: int) -> None:
        """Show the state after k merges."""
        if self.trace is None:
            return
        k = max(0, min(k, len(self.trace.steps)))
        if k == self.position:
            return
        self.position = k
        self.slider.blockSignals(True)
        self.slider.setValue(k)
        self.slider.blockSignals(False)
        self._show_position()
        self.step_changed.emit(k)

    def step_forward(self) -> None:
        self.set_position(self.position + 1)

    def step_back(self) -> None:
        self.set_position(self.position - 1)

    def run_to_end(self) -> None:
        if self.trace is not None:
            self.set_position(len(self.trace.steps))

    def _show_position(self) -> None:
        trace, k = self.trace, self.position
        n = len(trace.steps)
        self.position_label.setText(f"{k} / {n}")
        step = trace.steps[k - 1] if k else (trace.steps[0] if n else None)
        self.pair_model.set_step(step, trace.render, "chosen" if k else "next")
        self.step_text.setText(describe_step(trace, k))
        self.merge_model.set_position(k)
        if k:
            self.merge_list.scrollTo(self.merge_model.index(k - 1))
        self.chips.set_rows(trace.rows_at(k))

    @property
    def displayed_merges(self) -> list[str]:
        """The new symbols of the merges applied so far, as the merge list shows them."""
        model = self.merge_model
        return [model.data(model.index(i), Qt.UserRole) for i in range(self.position)]

    # ---- results -----------------------------------------------------------------------------
    def use_tokenizer(self) -> None:
        """Load the byte-level result into the other views (the Tokenize view).

        Like opening a tokenizer-only file, this closes the open model: its path and its
        embedding rows belong to its own ids, not to the trained ones.
        """
        if isinstance(self.trace, ByteTrace):
            tokenizer = self.trace.tokenizer()
            self.session.path = None
            if self.session.weights is not None:
                self.session.set_weights(None)
            self.session.set_tokenizer(tokenizer)
            self.session.status_posted.emit(f"using {tokenizer.name}")

    def export_to(self, folder: str | Path) -> list[Path]:
        """Write the byte-level result in the four file formats; the paths written."""
        from forma_gui.formats.bpe_export import export_all

        if not isinstance(self.trace, ByteTrace):
            return []
        try:
            written = export_all(self.trace.training, folder)
        except OSError as e:
            self.session.error_raised.emit("Export failed", f"{folder}: {e}")
            return []
        self.session.status_posted.emit(f"exported {len(written)} files to {folder}")
        return written

    def _ask_export(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Export the trained tokenizer to")
        if folder:
            self.export_to(folder)


# ---- worker jobs (run on a pool thread) ------------------------------------------------------

def _train_bytes_job(text: str, merges: int, pattern: str):
    """Generator job: yields (done, total) after each merge, returns a ByteTrace."""
    trainer = ByteLevelTrainer(text, merges, pattern=pattern, top=TABLE_ROWS)
    for done in trainer.run():
        yield done, merges
    return ByteTrace(trainer.training, text)


def _train_words_job(vocab: dict[str, int], merges: int) -> WordTrace:
    return WordTrace(learn_bpe(vocab, merges, top=TABLE_ROWS))
