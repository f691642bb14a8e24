"""Drive the main window: open files, type, check the segmentation and its renderings."""
from __future__ import annotations

import logging

import pytest
from PySide6.QtCore import QMimeData, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QTableView

from forma_gui._resources import default_tokenizer_path
from forma_gui.app import main_window as mw
from forma_gui.app.main_window import MainWindow
from forma_gui.app.token_canvas import SHOWN
from forma_gui.app.tokenize_view import INLINE_CHARS


@pytest.fixture
def settings(tmp_path) -> QSettings:
    """Settings in a file under tmp_path: the user's own settings are never touched."""
    return QSettings(str(tmp_path / "forma-gui.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def window(qtbot, settings) -> MainWindow:
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    win.open_default()
    qtbot.waitUntil(lambda: win.session.tokenizer is not None and not win.loading, timeout=20_000)
    return win


def _tokenize_view(win: MainWindow):
    return win.view("Tokenize")


def _open_and_type(qtbot, win: MainWindow, parts: tuple[str, ...], text: str):
    """(the path, the Tokenize view) once the shared data file `parts` is open and `text` shown."""
    from tests.conftest import data_file

    path = data_file(*parts)
    win.open_path(path)
    qtbot.waitUntil(lambda: win.session.path == str(path) and not win.loading, timeout=30_000)
    view = _tokenize_view(win)
    view.editor.setPlainText(text)
    _wait_tokens(qtbot, view, text)
    return path, view


def _wait_tokens(qtbot, view, text: str) -> None:
    """Wait until the view shows the segmentation of `text`."""
    qtbot.waitUntil(lambda: view.text == text and view.canvas.laid_out, timeout=30_000)


def test_opens_on_embedded_default(window):
    tok = window.session.tokenizer
    assert window.session.path == str(default_tokenizer_path())
    assert f"{tok.vocab_size:,} tokens" in window.vocab_label.text()
    assert window.last_error is None


def test_typing_matches_encode(qtbot, window):
    view = _tokenize_view(window)
    view.editor.clear()
    qtbot.keyClicks(view.editor, "Hello world, it's   42 tokens!")
    text = view.mirror.text
    _wait_tokens(qtbot, view, text)
    ids = window.session.tokenizer.encode(text)
    assert view.table.objectName() == "tokenTable"
    assert view.model.rowCount() == len(ids)
    assert [view.model.tokens[r].id for r in range(len(ids))] == ids
    assert window.session.text == text
    assert f"<b>{len(ids):,}</b> tokens" in view.stats.text()


def test_unicode_text_renders_partial_tokens_as_hex(qtbot, window):
    view = _tokenize_view(window)
    text = "Привет 東京 👩‍💻 €"
    view.editor.setPlainText(text)
    _wait_tokens(qtbot, view, text)
    tok = window.session.tokenizer
    assert [t.id for t in view.tokens] == tok.encode(text)
    partial = [k for k, t in enumerate(view.tokens) if t.partial]
    assert partial, "expected at least one token that splits a character"
    for k in range(len(view.tokens)):
        assert "\ufffd" not in view.canvas.label(k)
    for k in partial:
        data = view.tokens[k].data
        assert any(f"{b:02X}" in view.canvas.label(k) for b in data if b >= 0x80)


def test_toggles_change_rendering(qtbot, window):
    view = _tokenize_view(window)
    text = "Hello world\n"
    view.editor.setPlainText(text)
    _wait_tokens(qtbot, view, text)
    world = next(k for k, t in enumerate(view.tokens) if t.data == b" world")
    canvas = view.canvas
    assert canvas.label(world) == " world"
    view.ws_box.setChecked(True)
    assert canvas.label(world) == "·world"
    newline = next(k for k, t in enumerate(view.tokens) if t.data == b"\n")
    assert canvas.label(newline) == "↵"
    view.stored_box.setChecked(True)
    assert canvas.label(world) == view.tokens[world].piece == "Ġworld"
    height = canvas._line_h
    view.ids_box.setChecked(True)
    assert canvas._line_h > height
    qtbot.waitUntil(lambda: canvas.laid_out)
    view.stored_box.setChecked(False)
    view.ws_box.setChecked(False)
    assert canvas.label(world) == " world"


def test_byte_pieces_of_one_character_form_a_group(qtbot, window):
    view = _tokenize_view(window)
    text = "a東b"
    view.editor.setPlainText(text)
    _wait_tokens(qtbot, view, text)
    tokens = view.tokens
    parts = [k for k, t in enumerate(tokens) if t.start == 1 and t.end == 2]
    if len(parts) < 2:
        pytest.skip("this vocabulary encodes 東 as a single token")
    canvas = view.canvas
    item = canvas._item_of_token(parts[0])
    assert canvas._item_tokens(item) == (parts[0], parts[-1] + 1)
    assert canvas._group_char(parts[0], parts[-1] + 1) == "東"
    assert all(tokens[k].partial for k in parts)


def test_click_selects_token_everywhere(qtbot, window):
    view = _tokenize_view(window)
    text = "Hello world"
    view.editor.setPlainText(text)
    _wait_tokens(qtbot, view, text)
    k = next(k for k, t in enumerate(view.tokens) if t.data == b" world")
    rect = view.canvas.token_rect(k)
    with qtbot.waitSignal(window.session.token_selected) as blocker:
        qtbot.mouseClick(view.canvas.viewport(), Qt.MouseButton.LeftButton, pos=rect.center().toPoint())
    tok = view.tokens[k]
    assert blocker.args == [tok.id]
    assert view.canvas.selected == k
    assert view.table.selectionModel().isRowSelected(k)
    (selection,) = view.editor.extraSelections()
    assert (selection.cursor.selectionStart(), selection.cursor.selectionEnd()) == (tok.start, tok.end)
    steps = window.session.tokenizer.merge_steps(" world")
    assert view.merge_model.rowCount() == (len(steps) + 1 if steps else 0)
    assert "id" in view.canvas.tooltip(k) and "20 77 6F 72 6C 64" in view.canvas.tooltip(k)


def test_large_input_tokenizes_in_worker(qtbot, window):
    view = _tokenize_view(window)
    text = "The quick brown fox jumps over the lazy dog. " * (INLINE_CHARS // 20)
    view.editor.setPlainText(text)
    qtbot.waitUntil(lambda: view._runner.busy or view.text == text, timeout=5_000)
    _wait_tokens(qtbot, view, text)
    assert view.model.rowCount() == len(window.session.tokenizer.encode(text))


def test_corrupt_file_keeps_previous_tokenizer(qtbot, window, tmp_path):
    before = window.session.tokenizer
    bad = tmp_path / "broken.model"
    bad.write_bytes(b"\x00\x01\x02 definitely not a tokenizer")
    window.open_path(bad)
    qtbot.waitUntil(lambda: window.last_error is not None and not window.loading, timeout=10_000)
    assert str(bad) in window.last_error
    assert "at byte 0" in window.last_error
    assert window.session.tokenizer is before
    assert window.session.path == str(default_tokenizer_path())
    assert window._error_box.isVisible()
    window._error_box.close()
    view = _tokenize_view(window)
    view.editor.setPlainText("still works")
    _wait_tokens(qtbot, view, "still works")
    assert view.model.rowCount() == len(before.encode("still works"))


def test_missing_file_names_it(qtbot, window, tmp_path):
    missing = tmp_path / "nope.gguf"
    window.open_path(missing)
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=10_000)
    assert str(missing) in window.last_error


def test_open_folder_and_recent_files(qtbot, window, settings, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("encoder.json", "vocab.bpe"):
        (folder / name).write_bytes((default_tokenizer_path().parent / name).read_bytes())
    window.open_path(folder)
    qtbot.waitUntil(lambda: window.session.path == str(folder) and not window.loading, timeout=20_000)
    assert window.last_error is None
    assert window.recent_files()[0] == str(folder)
    assert QSettings(settings.fileName(), QSettings.Format.IniFormat).value("recentFiles") is not None


def test_drop_opens_the_dropped_path(qtbot, window, tmp_path, monkeypatch):
    opened = []
    monkeypatch.setattr(window, "open_path", opened.append)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path))])
    event = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)
    assert opened == [str(tmp_path)]


def test_missing_view_is_left_out(qtbot, settings, monkeypatch, caplog):
    monkeypatch.setattr(mw, "VIEWS", {"Tokenize": mw.VIEWS["Tokenize"],
                                      "Nothing": "forma_gui.app.no_such_view:Nope"})
    with caplog.at_level(logging.WARNING):
        win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    titles = [win.tabs.tabText(i) for i in range(win.tabs.count())]
    assert titles == ["Tokenize"]
    assert "no_such_view" in caplog.text


def test_views_are_built_lazily(qtbot, window):
    assert "Vocabulary" not in window.views
    index = next(i for i in range(window.tabs.count()) if window.tabs.tabText(i) == "Vocabulary")
    window.tabs.setCurrentIndex(index)
    assert window.views["Vocabulary"].objectName() == "vocabView"
    assert window.views["Vocabulary"].findChild(QTableView, "vocabTable") is not None


@pytest.mark.parametrize("parts,piece_prefix", [
    (("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"), "Ġ"),
    (("sentencepiece", "mistral_instruct_tokenizer_240323.model.v3"), "▁"),
])
def test_model_tokenizers_render_and_search(qtbot, window, parts, piece_prefix):
    """Issue 3: open a GGUF and a SentencePiece model, type, check rendering and search."""
    from tests.conftest import data_file

    path = data_file(*parts)
    window.open_path(path)
    qtbot.waitUntil(lambda: window.session.path == str(path) and not window.loading, timeout=30_000)
    assert window.last_error is None
    tok = window.session.tokenizer
    view = _tokenize_view(window)
    text = "Hello world, 東京 costs 3€ 👩‍💻"
    view.editor.setPlainText(text)
    _wait_tokens(qtbot, view, text)
    assert [t.id for t in view.tokens] == tok.encode(text)
    labels = [view.canvas.label(k) for k in range(len(view.tokens))]
    assert all("\ufffd" not in label for label in labels)
    view.stored_box.setChecked(True)
    stored = [view.canvas.label(k) for k in range(len(view.tokens))]
    assert any(label.startswith(piece_prefix) for label in stored)
    assert stored == [t.piece.translate(SHOWN) for t in view.tokens]  # invisibles named
    view.stored_box.setChecked(False)

    vocab = window.view("Vocabulary")
    qtbot.waitUntil(lambda: vocab.index is not None and vocab.index.tokenizer is tok, timeout=30_000)
    world = piece_prefix + "world"
    vocab.search.setText(world)
    vocab._run_search()
    qtbot.waitUntil(lambda: not vocab._search_runner.busy and vocab.model.rows is not None, timeout=10_000)
    assert vocab.model.token_id(0) == tok.id_of(world)
    found = {vocab.model.token_id(r) for r in range(vocab.model.rowCount())}
    assert all(world.lower() in tok.piece(i).lower() or "world" in tok.decode([i]).lower() for i in found)
    # hex search finds the byte pieces of €
    vocab.search.setText("0x e2 82")
    vocab._run_search()
    qtbot.waitUntil(lambda: not vocab._search_runner.busy, timeout=10_000)
    ids = [vocab.model.token_id(r) for r in range(vocab.model.rowCount())]
    assert ids and all(b"\xe2\x82" in tok.token_bytes(i) for i in ids)


def test_bad_first_file_falls_back_to_default(qtbot, settings, tmp_path):
    bad = tmp_path / "weights.bin"
    bad.write_bytes(b"\x80\x02}q\x00.")  # a pickle: refused, never unpickled
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.open_path(bad)
    qtbot.waitUntil(lambda: win.session.tokenizer is not None and not win.loading, timeout=20_000)
    assert str(bad) in win.last_error and "pickle" in win.last_error
    assert win.session.path == str(default_tokenizer_path())
    win._error_box.close()


def test_special_token_toggle(qtbot, window):
    view = _tokenize_view(window)
    tok = window.session.tokenizer
    text = "a<|endoftext|>b" if tok.vocab_size > 50000 else "a<|end|>b"
    view.editor.setPlainText(text)
    _wait_tokens(qtbot, view, text)
    assert [t.id for t in view.tokens] == tok.encode(text)
    view.special_box.setChecked(True)
    qtbot.waitUntil(lambda: any(t.special for t in view.tokens), timeout=10_000)
    assert [t.id for t in view.tokens] == tok.encode(text, special=True)
    k = next(k for k, t in enumerate(view.tokens) if t.special)
    assert view.canvas.label(k) == view.tokens[k].piece
    assert "special token" in view.canvas.tooltip(k)


def test_safetensors_opens_weights_and_keeps_the_tokenizer(qtbot, window, tmp_path):
    np = pytest.importorskip("numpy")
    save_file = pytest.importorskip("safetensors.numpy").save_file
    path = tmp_path / "model.safetensors"
    save_file({"embed.weight": np.zeros((4, 3), dtype=np.float32)}, str(path))
    tokenizer = window.session.tokenizer
    window.open_path(path)
    qtbot.waitUntil(lambda: window.session.weights is not None and not window.loading, timeout=10_000)
    assert window.last_error is None
    assert window.session.tokenizer is tokenizer
    assert window.session.path == str(path)
    assert "tensor" in window.kind_label.text()


def test_a_t5_gguf_token_shows_the_cuts_of_its_word(qtbot, window, tmp_path):
    """llama.cpp's unigram (GGUF t5, built from botchan's model): the same panel, the same
    cuts as sentencepiece's n-best search over that model."""
    import sentencepiece as spm

    from tests.conftest import data_file
    from tests.formats.test_gguf_tokenizer import _t5_from

    model = data_file("sentencepiece", "botchan_en_unigram_1000.model")
    path = _t5_from(model, tmp_path / "t5.gguf")
    window.open_path(path)
    qtbot.waitUntil(lambda: window.session.path == str(path) and not window.loading, timeout=30_000)
    view = _tokenize_view(window)
    text = "The restrictions of this eBook are few."
    view.editor.setPlainText(text)
    _wait_tokens(qtbot, view, text)
    at = text.index("restrictions")  # (llama.cpp's spans leave the space before a word out)
    first = next(k for k, t in enumerate(view.tokens) if t.start <= at < t.end)
    view.select_index(first + 2)
    model_rows = view.merge_model.rows
    expected = spm.SentencePieceProcessor(model_file=str(model)).nbest_encode_as_pieces(" restrictions", nbest_size=6)
    assert [row[2] for row in model_rows] == [tuple(p) for p in expected]
    assert model_rows[0][0] == "chosen" and model_rows[0][2][model_rows[0][3]] == view.tokens[first + 2].piece


def test_a_unigram_token_shows_the_cuts_of_its_word(qtbot, window):
    """With a unigram .model the merge panel lists the word's cuts: the one encoding picked,
    with the selected token's piece outlined, then the next best, as sentencepiece's n-best
    search ranks them; a BPE model keeps its merge steps."""
    import sentencepiece as spm

    text = "It is a restrictions-free eBook."
    path, view = _open_and_type(qtbot, window, ("sentencepiece", "botchan_en_unigram_1000.model"), text)
    word = " restrictions-free"
    first = next(k for k, t in enumerate(view.tokens) if t.start == text.index(word))
    k = first + 1  # the word's second piece
    view.select_index(k)
    model = view.merge_model
    assert [model.headerData(c, Qt.Orientation.Horizontal) for c in range(3)] == ["#", "score", "pieces"]
    sp = spm.SentencePieceProcessor(model_file=str(path))
    n_best = sp.nbest_encode_as_pieces(word, nbest_size=6)
    assert [model.rows[r][2] for r in range(model.rowCount())] == [tuple(p) for p in n_best]
    rank, score, pieces, hot = model.rows[0]
    assert rank == "chosen" and hot == k - first and pieces[hot] == view.tokens[k].piece
    assert all(row[3] == -1 for row in model.rows[1:])
    assert "restrictions-free" in view.merge_note.text()
    view.select_index(first)  # its span starts with the space before the word: the same word
    assert [model.rows[r][2] for r in range(model.rowCount())] == [tuple(p) for p in n_best]
    assert model.rows[0][3] == 0
    # a vocabulary entry picked elsewhere (not in the text): the cuts of its own text
    tok = window.session.tokenizer
    piece = "utenberg"
    window.session.select_token(tok.id_of(piece))
    expected = sp.nbest_encode_as_pieces(piece, nbest_size=6)
    assert [model.rows[r][2] for r in range(model.rowCount())] == [tuple(p) for p in expected]
    assert model.rows[0][3] == expected[0].index(piece)  # outlined where the chosen cut has it
    window.open_default()  # GPT-2: merges again
    qtbot.waitUntil(lambda: not window.loading and window.session.tokenizer.kind != "SentencePiece unigram",
                    timeout=30_000)
    view.editor.setPlainText("Hello world")
    _wait_tokens(qtbot, view, "Hello world")
    view.select_index(1)
    assert model.headers == model.HEADERS


def test_a_wordpiece_token_shows_its_longest_matches(qtbot, window):
    """With a WordPiece GGUF the panel lists each piece greedy longest-match took in the
    selected token's word (a token whose span starts with the space before its word shows
    that word, not the one before)."""
    text = "Unaffable tokenization, naive"
    _, view = _open_and_type(qtbot, window, ("gguf-vocab", "ggml-vocab-bert-bge.gguf"), text)
    tok = window.session.tokenizer
    k = next(k for k, t in enumerate(view.tokens) if t.piece == "▁token")
    assert text[view.tokens[k].start] == " "  # the span holds the space before the word
    view.select_index(k)
    model = view.merge_model
    assert [model.headerData(c, Qt.Orientation.Horizontal) for c in range(3)] == ["#", "longest match", "pieces"]
    expected = [tok.piece(i) for i in tok.encode(" tokenization,")]
    assert [row[1] for row in model.rows] == expected
    assert model.rows[0][2] == (expected[0], "ization")  # the piece taken, the rest of the word
    assert model.rows[1][2] == tuple(expected[:2]) and model.rows[1][3] == 1
    assert "tokenization" in view.merge_note.text() and "Unaffable" not in view.merge_note.text()


@pytest.mark.parametrize("parts, title, headers", [
    (("sentencepiece", "botchan_en_unigram_1000.model"), "Segmentations", ["#", "score", "pieces"]),
    (("gguf-vocab", "ggml-vocab-bert-bge.gguf"), "Longest matches", ["#", "longest match", "pieces"]),
    (("sentencepiece", "botchan_en_bpe_1000.model"), "Merge steps", ["rank", "merge", "symbols"]),
])
def test_the_explainer_panel_is_titled_for_the_model_before_a_click(qtbot, window, parts, title, headers):
    """Before any token is selected, the side panel already names what explains a token
    with this model and shows that table's headers; opening another model retitles it."""
    view = _tokenize_view(window)
    assert "Merge steps" in view.merge_box.caption.text()  # the default: GPT-2's BPE
    _open_and_type(qtbot, window, parts, "It is a fine day.")
    assert title in view.merge_box.caption.text()
    model = view.merge_model
    assert [model.headerData(c, Qt.Orientation.Horizontal) for c in range(3)] == headers
    assert model.rowCount() == 0 and view.merge_note.text() == ""
    window.open_default()
    qtbot.waitUntil(lambda: not window.loading and window.session.tokenizer.kind == "byte-level BPE", timeout=30_000)
    assert "Merge steps" in view.merge_box.caption.text() and model.headers == model.HEADERS


def test_a_view_built_after_the_model_opened_is_titled_for_it(qtbot, settings):
    """The Tokenize view is built lazily: one built once a unigram model is open starts
    with that model's panel, not BPE's."""
    from forma_gui.app.tokenize_view import TokenizeView
    from forma_gui.app.state import Session
    from forma_gui.formats.loader import load_tokenizer
    from tests.conftest import data_file

    session = Session()
    session.set_tokenizer(load_tokenizer(data_file("sentencepiece", "botchan_en_unigram_1000.model")))
    view = TokenizeView(session)
    qtbot.addWidget(view)
    assert "Segmentations" in view.merge_box.caption.text()
    assert view.merge_model.headers == view.merge_model.CUT_HEADERS


def test_the_token_tables_span_column_fits_a_large_documents_offsets(window):
    """Spans deep in a large document ("500016–500022") show whole, not elided."""
    view = _tokenize_view(window)
    wide = view.table.fontMetrics().horizontalAdvance("99999999–99999999")
    assert view.table.horizontalHeader().sectionSize(4) > wide
