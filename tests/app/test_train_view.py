"""The Train view, driven with pytest-qt: the paper's example step by step, byte-level
training in a worker, cancel, "Use this tokenizer" and "Export…" (acceptance 3 of issue 7)."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QThreadPool
from PySide6.QtWidgets import QLabel, QPushButton, QSlider, QTableView, QToolButton

from forma_gui.app.state import Session
from forma_gui.app.train_view import PairTableModel, TrainView
from forma_gui.core.bpe import pattern_regex
from tests.conftest import data_file

# Sennrich et al. (2016): the ten merges of the example, and the words after them
PAPER_SYMBOLS = "es est est</w> lo low ne new newest</w> low</w> wi".split()
PAPER_WORDS = [["low</w>"], ["low", "e", "r", "</w>"], ["newest</w>"], ["wi", "d", "est</w>"]]


@pytest.fixture
def session():
    return Session()


@pytest.fixture
def view(qtbot, session):
    v = TrainView(session)
    qtbot.addWidget(v)
    v.resize(1200, 800)
    yield v
    v.cancel()
    QThreadPool.globalInstance().waitForDone(10_000)


def click(qtbot, view, name: str) -> None:
    qtbot.mouseClick(view.findChild(QToolButton, name), Qt.LeftButton)


def table_rows(view) -> list[list[str]]:
    model: PairTableModel = view.findChild(QTableView, "trainPairTable").model()
    return [[model.index(r, c).data() for c in range(model.columnCount())]
            for r in range(model.rowCount())]


def test_opens_with_the_paper_example(view):
    assert view.objectName() == "trainView"
    assert view.mode == "words"
    assert "l o w </w>:5" in view.editor.toPlainText()
    assert view.merges_box.value() == 10
    assert view.position == 0
    assert view.chips.chip_labels[0] == ["l", "o", "w", "</w>"]
    # before any merge the table shows the first decision, marked "next"
    assert table_rows(view)[:3] == [["e", "s", "es", "9", "next (won tie)"],
                                    ["s", "t", "st", "9", "tie"],
                                    ["t", "</w>", "t</w>", "9", "tie"]]


def test_stepping_through_the_paper_example(qtbot, view):
    for k in range(1, 11):
        click(qtbot, view, "trainStepForward")
        assert view.displayed_merges == PAPER_SYMBOLS[:k]
        assert table_rows(view)[0][2] == PAPER_SYMBOLS[k - 1]
        assert table_rows(view)[0][4].startswith("chosen")
    assert view.findChild(QLabel, "trainPosition").text() == "10 / 10"
    assert view.chips.chip_labels == PAPER_WORDS
    click(qtbot, view, "trainStepForward")  # past the end: stays
    assert view.position == 10
    assert "Merge 10 of 10" in view.step_text.text() and "w + i" in view.step_text.text()


def test_back_first_end_and_slider(qtbot, view):
    click(qtbot, view, "trainToEnd")
    assert view.position == 10
    click(qtbot, view, "trainStepBack")
    assert view.position == 9 and view.displayed_merges == PAPER_SYMBOLS[:9]
    assert view.findChild(QSlider, "trainSlider").value() == 9
    view.findChild(QSlider, "trainSlider").setValue(3)
    assert view.displayed_merges == ["es", "est", "est</w>"]
    assert ["n", "e", "w", "est</w>"] in view.chips.chip_labels
    new = [c.label for chips, _ in view.chips.rows for c in chips if c.new]
    assert new == ["est</w>", "est</w>"]  # the symbol merge 3 made is outlined
    click(qtbot, view, "trainFirst")
    assert view.position == 0 and view.displayed_merges == []


def test_edited_dictionary_retrains_and_bad_input_is_shown(qtbot, view):
    view.set_corpus("a b a b:3\nb c:1", merges=5)
    qtbot.mouseClick(view.findChild(QPushButton, "trainRun"), Qt.LeftButton)
    click(qtbot, view, "trainToEnd")
    assert view.displayed_merges[0] == "ab"
    assert view.chips.chip_labels == [["abab"], ["bc"]]
    before = view.training
    view.set_corpus("a b c")  # no frequency
    view.train()
    assert view.training is before
    assert "symbols:frequency" in view.hint.text()


@pytest.fixture(scope="module")
def botchan() -> str:
    return data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")


def train_bytes(qtbot, view, text: str, merges: int) -> None:
    with qtbot.waitSignal(view.training_finished, timeout=60_000):
        view.set_mode("bytes")
        view.set_corpus(text, merges)
        view.train()


def test_bytelevel_training_use_and_export(qtbot, view, session, botchan, tmp_path):
    tiktoken = pytest.importorskip("tiktoken")
    train_bytes(qtbot, view, botchan[:20000], 120)
    assert view.mode == "bytes" and len(view.training.merges) == 120
    assert view.displayed_merges == []
    assert not any(c.new for chips, _ in view.chips.rows for c in chips)
    click(qtbot, view, "trainStepForward")
    assert view.displayed_merges == ["·t"]  # " t" is the most frequent pair in English
    new = {c.label for chips, _ in view.chips.rows for c in chips if c.new}
    assert new == {"·t"}
    qtbot.mouseClick(view.findChild(QPushButton, "trainUse"), Qt.LeftButton)
    enc = tiktoken.Encoding("t", pat_str=pattern_regex("gpt2"),
                            mergeable_ranks=view.training.ranks, special_tokens={})
    assert session.tokenizer is not None
    assert session.tokenizer.encode(botchan[:3000]) == enc.encode_ordinary(botchan[:3000])
    written = view.export_to(tmp_path)
    assert sorted(p.name for p in written) == [
        "merges.txt", "ranks.tiktoken", "tokenizer.json", "vocab.json"]


def test_long_training_shows_progress_and_cancels(qtbot, view, botchan):
    before = view.training
    view.set_mode("bytes")
    with qtbot.waitSignal(view.training_finished, timeout=60_000):
        pass  # switching mode trains the (short) byte-level default text
    view.set_corpus(botchan, 20_000)
    view.train()
    assert view.busy and not view.progress.isHidden() and not view.cancel_button.isHidden()
    qtbot.wait(200)
    current = view.training
    qtbot.mouseClick(view.cancel_button, Qt.LeftButton)
    assert not view.busy and view.progress.isHidden() and view.train_button.isEnabled()
    QThreadPool.globalInstance().waitForDone(10_000)
    qtbot.wait(50)
    assert view.training is current and current is not before


def test_load_text_file_switches_to_bytes(qtbot, view, tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("low lower newest widest " * 20, encoding="utf-8")
    with qtbot.waitSignal(view.training_finished, timeout=60_000):
        assert view.load_text_file(path)
    assert view.mode == "bytes" and view.editor.toPlainText().startswith("low lower")
    errors = []
    view.session.error_raised.connect(lambda title, msg: errors.append(msg))
    assert not view.load_text_file(tmp_path / "missing.txt")
    assert errors and "missing.txt" in errors[0]


class _Weights:
    """Stands in for an open model file: only close() is called on it."""

    closed = False

    def close(self) -> None:
        self.closed = True


def test_use_this_tokenizer_lets_go_of_the_open_model(qtbot, view, session, botchan):
    """The trained ids are not the open model's: its weights (embedding rows) and its path
    must not stay beside them, as when a tokenizer-only file is opened."""
    weights = _Weights()
    session.set_tokenizer(object(), "/models/some.gguf")
    session.set_weights(weights)
    train_bytes(qtbot, view, botchan[:5000], 20)
    view.use_tokenizer()
    assert session.tokenizer.name.startswith("trained")
    assert session.weights is None and weights.closed
    assert session.path is None
