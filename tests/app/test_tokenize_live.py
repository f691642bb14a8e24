"""The Tokenize view follows typing with the incremental encoder: a large document is encoded
once, then every keystroke re-encodes only around itself, and the table always equals a fresh
encode of the editor's text."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from forma_gui.app.state import Session
from forma_gui.app.tokenize_view import INLINE_CHARS, TokenizeView
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import data_file

LINE = "The quick brown fox can't jump 1234 times; Привет, мир! 東京は日本の首都です。 👩‍💻\n"


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer(data_file("gpt2", "encoder.json"))


@pytest.fixture
def view(qtbot, gpt2):
    session = Session()
    session.set_tokenizer(gpt2)
    view = TokenizeView(session)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    return view


def _load(qtbot, view, text: str):
    view.editor.setPlainText(text)
    qtbot.waitUntil(lambda: view.text == text and view._live is not None, timeout=60_000)
    return view._live


def _move_to(view, position: int) -> None:
    """Put the caret at a Python character offset."""
    cursor = view.editor.textCursor()
    before = view.mirror.text[:position]
    cursor.setPosition(len(before.encode("utf-16-le")) // 2)
    view.editor.setTextCursor(cursor)


def _assert_matches_fresh_encode(view, tokenizer) -> None:
    text = view.mirror.text
    expected = tokenizer.encode(text)
    assert view.table.model().rowCount() == len(expected)
    assert list(view.tokens.ids) == expected
    fresh = tokenizer.segment(text)
    for k in (0, len(fresh) // 2, len(fresh) - 1):
        got, want = view.tokens[k], fresh[k]
        assert (got.id, got.start, got.end, got.partial) == (want.id, want.start, want.end, want.partial)


def test_typing_into_a_large_document_re_encodes_locally(qtbot, view, gpt2):
    text = LINE * 3000  # ~250 KB: above INLINE_CHARS, so the first encode runs in the worker
    assert len(text) > INLINE_CHARS
    live = _load(qtbot, view, text)
    for position, typed in ((len(text) // 2, "x'll 42"), (17, " "), (len(text) - 3, "")):
        _move_to(view, position)
        qtbot.keyClicks(view.editor, typed)
        qtbot.keyClick(view.editor, Qt.Key.Key_Return)
        qtbot.keyClick(view.editor, Qt.Key.Key_Backspace)
        qtbot.keyClick(view.editor, Qt.Key.Key_Backspace)
        qtbot.waitUntil(lambda: view.text is view.mirror.text, timeout=10_000)
        _assert_matches_fresh_encode(view, gpt2)
    assert view._live is live and live.full_encodes == 0  # every keystroke went through it
    assert live.last_splice.removed < 20


def _in_view(view, k: int) -> bool:
    """Whether token k is laid out and inside the canvas's viewport."""
    rect = view.canvas.token_rect(k)
    return rect is not None and rect.top() >= 0 and rect.bottom() <= view.canvas.viewport().height()


def _caret_token(view) -> int:
    """The index of the token at the editor's caret, from the tokens' Python offsets."""
    units = view.mirror.text.encode("utf-16-le")[:2 * view.editor.textCursor().position()]
    at = len(units.decode("utf-16-le"))
    return max(k for k in range(len(view.tokens)) if view.tokens.starts[k] <= at)


def test_the_token_panes_follow_the_caret(qtbot, view, gpt2):
    """Typing or moving far down a long text scrolls the token canvas and the table to the
    token at the caret; typing where that token is already shown scrolls nothing."""
    text = LINE * 400
    _load(qtbot, view, text)
    qtbot.waitUntil(lambda: view.canvas.laid_out, timeout=20_000)
    assert _in_view(view, 0)
    _move_to(view, len(text) * 3 // 4)  # a caret move alone
    k = _caret_token(view)
    qtbot.waitUntil(lambda: _in_view(view, k), timeout=5_000)
    assert not _in_view(view, 0)
    rows = view.table.rowAt(0), view.table.rowAt(view.table.viewport().height() - 1)
    assert rows[0] <= k <= (rows[1] if rows[1] >= 0 else len(view.tokens))
    _move_to(view, 5)
    qtbot.keyClicks(view.editor, "typed ")  # an edit near the top: the panes come back
    qtbot.waitUntil(lambda: view.text is view.mirror.text, timeout=10_000)
    k = _caret_token(view)
    qtbot.waitUntil(lambda: _in_view(view, k), timeout=5_000)
    top = view.canvas.verticalScrollBar().value()
    qtbot.keyClicks(view.editor, "more")  # inside what is shown: no scroll
    qtbot.waitUntil(lambda: view.text is view.mirror.text, timeout=10_000)
    assert view.canvas.verticalScrollBar().value() == top
    _assert_matches_fresh_encode(view, gpt2)


def test_an_edit_that_is_not_local_goes_to_the_worker(qtbot, view):
    """A combining mark that makes Qwen3's NFC text not NFC needs the whole document
    re-encoded: the view drops the live encoder rather than re-encode on the GUI thread."""
    qwen3 = load_tokenizer(data_file("hf", "qwen3", "tokenizer.json"))
    view.session.set_tokenizer(qwen3)
    text = LINE * 3000
    live = _load(qtbot, view, text)
    _move_to(view, 3)  # after "The"
    view.editor.textCursor().insertText("\u0301")  # as an input method would (keyClicks is ASCII)
    assert live.full_encodes == 0  # it raised EditNotLocal rather than encode 250 KB in place
    assert view._live is not live
    qtbot.waitUntil(lambda: view.text is view.mirror.text, timeout=60_000)
    assert view.mirror.text.startswith("The\u0301 quick")
    _assert_matches_fresh_encode(view, qwen3)


def test_selection_replace_and_undo_stay_exact(qtbot, view, gpt2):
    _load(qtbot, view, LINE * 50)
    cursor = view.editor.textCursor()
    cursor.setPosition(30)
    cursor.setPosition(400, QTextCursor.MoveMode.KeepAnchor)
    view.editor.setTextCursor(cursor)
    qtbot.keyClicks(view.editor, "Z")
    qtbot.keyClick(view.editor, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)  # undo
    qtbot.waitUntil(lambda: view.text is view.mirror.text, timeout=10_000)
    _assert_matches_fresh_encode(view, gpt2)


def test_special_toggle_and_new_tokenizer_start_afresh(qtbot, view, gpt2):
    live = _load(qtbot, view, "a <|endoftext|> b " * 10)
    view.special_box.setChecked(True)
    qtbot.waitUntil(lambda: view._live is not None and view._live is not live, timeout=10_000)
    assert view._live.special and list(view.tokens.ids) == gpt2.encode(view.mirror.text, special=True)
    spm = load_tokenizer(data_file("sentencepiece", "botchan_en_bpe_1000.model"))
    view.session.set_tokenizer(spm)  # a live encoder of its own (SentencePiece BPE edits locally)
    qtbot.waitUntil(lambda: view.tokenizer is spm, timeout=10_000)
    assert view._live is not None and view._live.tokenizer is spm and view._live.special
    assert list(view.tokens.ids) == spm.encode(view.mirror.text, special=True)
    unigram = load_tokenizer(data_file("sentencepiece", "botchan_en_unigram_1000.model"))
    view.session.set_tokenizer(unigram)  # SentencePiece unigram edits locally too (its path scores kept)
    qtbot.waitUntil(lambda: view.tokenizer is unigram, timeout=10_000)
    assert view._live is not None and view._live.tokenizer is unigram
    assert list(view.tokens.ids) == unigram.encode(view.mirror.text, special=True)


#: the GGUF files of the live-encoder test: two one-stage pre-tokenizers, and SmolLM2's two
#: stages (digits, then GPT-2's regex), which edit through one regex (llama_pre.ONE_REGEX)
GGUF_BPE = {"llama-bpe": ("gguf-vocab", "ggml-vocab-llama-bpe.gguf"),
            "qwen2": ("gguf-vocab", "ggml-vocab-qwen2.gguf"),
            "smollm2": ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")}


@pytest.mark.parametrize("name", sorted(GGUF_BPE))
def test_gguf_bpe_typing_goes_through_the_live_encoder(qtbot, view, name):
    """llama.cpp's byte-level BPE follows typing too (core.incremental), the first encode of a
    large document in the worker; Qwen2's user-defined [PAD...] tokens are cut out as typed."""
    tok = load_tokenizer(data_file(*GGUF_BPE[name]))
    view.session.set_tokenizer(tok)
    text = LINE * 200  # above INLINE_CHARS: the worker builds the encoder
    assert len(text) > INLINE_CHARS
    live = _load(qtbot, view, text)
    assert live.tokenizer is tok and live.incremental
    for position, typed in ((len(text) // 2, "x'll 42"), (17, "[PAD151646]"), (len(text) - 3, "")):
        _move_to(view, position)
        qtbot.keyClicks(view.editor, typed)
        qtbot.keyClick(view.editor, Qt.Key.Key_Return)
        qtbot.keyClick(view.editor, Qt.Key.Key_Backspace)
        qtbot.waitUntil(lambda: view.text is view.mirror.text, timeout=10_000)
        _assert_matches_fresh_encode(view, tok)
    assert view._live is live and live.full_encodes == 0


def test_gguf_spm_typing_goes_through_the_live_encoder(qtbot, view, monkeypatch):
    """A Llama-2-style GGUF follows typing with the live encoder (core.incremental: its words,
    the space prefix of every fragment), built from segment()'s columns, never Token objects;
    the view always equals segment() of the editor's text, token by token."""
    tok = load_tokenizer(data_file("gguf-vocab", "ggml-vocab-llama-spm.gguf"))
    _typing_re_segments_through_columns(qtbot, view, monkeypatch, tok, "  x", "</s>", live=True)


def test_gguf_wordpiece_typing_goes_through_the_live_encoder(qtbot, view, monkeypatch):
    """A BERT GGUF (llama.cpp's WordPiece) follows typing with the live encoder (core.incremental:
    cuts where preprocess ends a word), built from segment()'s columns, never Token objects."""
    tok = load_tokenizer(data_file("gguf-vocab", "ggml-vocab-bert-bge.gguf"))
    _typing_re_segments_through_columns(qtbot, view, monkeypatch, tok, "  [CLS]x", "[SEP]", live=True)


def test_sentencepiece_model_typing_goes_through_the_live_encoder(qtbot, view, monkeypatch):
    """The same for a SentencePiece BPE .model (mistral v3: byte fallback, user-defined pieces,
    added control tokens): the live encoder (core.incremental: cuts of its normalizer and
    pieces), built from SentencePieceTokenizer.segment_columns, never segment()."""
    tok = load_tokenizer(data_file("sentencepiece", "mistral_instruct_tokenizer_240323.model.v3"))
    _typing_re_segments_through_columns(qtbot, view, monkeypatch, tok, "  [INST]x\t</s>",
                                        "[INST]  x [/INST]", live=True)


def test_sentencepiece_unigram_typing_goes_through_the_live_encoder(qtbot, view, monkeypatch):
    """A unigram .model follows typing with the live encoder too (core.incremental: the region
    starts from the path score before it, the words after it are walked until the scores
    meet), built from segment_columns(live=True), never segment()."""
    tok = load_tokenizer(data_file("sentencepiece", "botchan_en_unigram_1000.model"))
    _typing_re_segments_through_columns(qtbot, view, monkeypatch, tok, "  <s>x\t</s>", "<s>  x </s>",
                                        live=True)


def _typing_re_segments_through_columns(qtbot, view, monkeypatch, tok, head: str,
                                        tail: str, *, live: bool = False) -> None:
    """Type (ASCII only: keyClicks aborts on other text) in the middle, at the start and at
    the end, special off, on, off; after each edit the view equals segment() of its text;
    live: the view keeps a live encoder that never re-encoded in full."""
    calls, segment = [], type(tok).segment
    monkeypatch.setattr(tok, "segment", lambda *a, **k: calls.append(a) or segment(tok, *a, **k))
    view.session.set_tokenizer(tok)
    text = LINE * 200  # above INLINE_CHARS: the worker segments it
    view.editor.setPlainText(text)
    qtbot.waitUntil(lambda: view.text == text and view.tokenizer is tok, timeout=60_000)
    middle, end = len(text) // 2, len(text) - 3
    edits = ((False, middle, " <s>x'll 42"), (True, 0, head), (False, end, tail))
    for special, position, typed in edits:
        if special != view.special:
            view.special_box.setChecked(special)
        _move_to(view, position)
        qtbot.keyClicks(view.editor, typed)
        qtbot.keyClick(view.editor, Qt.Key.Key_Return)
        qtbot.keyClick(view.editor, Qt.Key.Key_Backspace)
        qtbot.waitUntil(lambda: view.text is view.mirror.text, timeout=20_000)
        want = segment(tok, view.text, special=special)
        got = view.tokens
        assert list(got.ids) == [t.id for t in want]
        assert list(got.starts) == [t.start for t in want]
        assert list(got.ends) == [t.end for t in want]
        assert list(got.flags) == [t.partial | t.special << 1 for t in want]
        assert got.nbytes == sum(len(t.data) for t in want)
        assert got[5] == want[5]
    assert not calls  # segment() never ran
    if live:
        assert view._live is not None and view._live.incremental and view._live.full_encodes == 0
    else:
        assert view._live is None
