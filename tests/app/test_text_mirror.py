"""The editor's text mirror equals the document's raw text after any sequence of edits."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st
from PySide6.QtGui import QTextCursor, QTextDocument

from forma_gui.app.text_mirror import Edit, TextMirror, raw_text
from tests.conftest import MAX_EXAMPLES

ALPHABET = st.sampled_from(list("ab \n\t\u00a0\u2028é東😀👩\u200d💻🇯🇵\r"))
TEXTS = st.lists(ALPHABET, max_size=12).map("".join)
EDITS = st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), TEXTS), max_size=12)


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _apply(doc: QTextDocument, at: float, span: float, new: str) -> None:
    """Replace a few characters at a relative position, as typing or pasting would."""
    text = raw_text(doc)
    start = int(at * len(text))
    end = min(len(text), start + int(span * 4))
    cursor = QTextCursor(doc)  # positions in UTF-16 units, never inside a surrogate pair
    cursor.setPosition(_units(text[:start]))
    cursor.setPosition(_units(text[:end]), QTextCursor.MoveMode.KeepAnchor)
    cursor.insertText(new)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(TEXTS, EDITS)
def test_mirror_follows_random_edits(qapp, initial, edits):
    doc = QTextDocument()
    doc.setPlainText(initial)
    mirror = TextMirror(doc)
    for at, span, new in edits:
        _apply(doc, at, span, new)
        assert mirror.text == raw_text(doc)
        assert _units(mirror.text) == doc.characterCount() - 1


def test_mirror_keeps_what_to_plain_text_rewrites(qapp):
    doc = QTextDocument()
    mirror = TextMirror(doc)
    QTextCursor(doc).insertText("a\u00a0b\u2028c\nd")
    assert mirror.text == "a\u00a0b\u2028c\nd"
    assert doc.toPlainText() != mirror.text  # the reason the mirror exists


def test_typing_does_not_reread_the_document(qapp):
    doc = QTextDocument()
    doc.setPlainText("😀 " * 1000)
    mirror = TextMirror(doc)
    before = mirror.resyncs
    cursor = QTextCursor(doc)
    cursor.setPosition(doc.characterCount() - 1)
    for ch in "hello 👩‍💻":
        cursor.insertText(ch)
    cursor.setPosition(2)
    cursor.deletePreviousChar()
    assert mirror.text == raw_text(doc)
    assert mirror.resyncs == before
    last = mirror.edits[-1]
    assert (last.start, last.removed, last.added) == (0, 1, 0)


@settings(max_examples=max(10, MAX_EXAMPLES // 5), deadline=None)
@given(TEXTS, st.lists(TEXTS, min_size=1, max_size=6), st.booleans())
def test_batch_of_insertions_is_spliced_once(qapp, initial, pieces, jump):
    doc = QTextDocument()
    doc.setPlainText(initial)
    mirror = TextMirror(doc)
    cursor = QTextCursor(doc)
    cursor.setPosition(_units(initial[:len(initial) // 2]))
    mirror.begin_batch()
    for i, piece in enumerate(pieces):
        if jump and i == 1:  # not contiguous: the batch falls back to re-reading
            cursor.setPosition(0)
        cursor.insertText(piece)
    mirror.end_batch()
    assert mirror.text == raw_text(doc)


def test_huge_paste_goes_in_slices_as_one_undo_step(qtbot):
    from forma_gui.app.tokenize_view import LARGE_PASTE, TokenInput

    editor = TokenInput()
    qtbot.addWidget(editor)
    editor.setPlainText("before")
    editor.selectAll()
    text = "\ufeffBOM first, CRLF\r\nline 😀 東京\u00a0nbsp\r" * (LARGE_PASTE // 20)
    editor.paste_in_slices(text)
    assert editor.pasting and editor.isReadOnly()
    qtbot.waitUntil(lambda: not editor.pasting, timeout=60_000)
    assert not editor.isReadOnly()
    assert editor.mirror.text == raw_text(editor.document())
    assert "\u00a0nbsp" in editor.mirror.text
    editor.document().undo()
    assert editor.mirror.text == raw_text(editor.document()) == "before"


def _big_editor(qtbot, text: str):
    from forma_gui.app.tokenize_view import TokenInput

    editor = TokenInput()
    qtbot.addWidget(editor)
    editor.setPlainText(text)
    editor.document().clearUndoRedoStacks()
    return editor


def _select(editor, start: int, end: int) -> None:
    """Select UTF-16 units start..end."""
    cursor = editor.textCursor()
    cursor.setPosition(start)
    cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
    editor.setTextCursor(cursor)


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def test_a_huge_selection_is_replaced_in_slices_as_one_undo_step(qtbot, monkeypatch):
    """Pasting over a selection of over LARGE_PASTE characters removes it in slices (of 4096
    UTF-16 units here, many of them ending inside an emoji), then inserts: the document, the
    mirror and its one edit are those of the replacement, and one undo brings the text back."""
    from forma_gui.app import tokenize_view
    from forma_gui.app.tokenize_view import LARGE_PASTE

    monkeypatch.setattr(tokenize_view, "REMOVE_CHUNK", 4096)
    monkeypatch.setattr(tokenize_view, "_next_size", lambda size, took, most: size)
    body = "😀a😀\n東京 é" * (LARGE_PASTE // 7)
    original = "head 😀 " + body + " tail 😀"
    editor = _big_editor(qtbot, original)
    start = _units("head 😀 ")
    _select(editor, start, start + _units(body))
    new = "new 😀 text\n" * 40
    editor.mirror.edits.clear()
    resyncs = editor.mirror.resyncs
    editor.paste_in_slices(new)
    assert editor.pasting
    qtbot.waitUntil(lambda: not editor.pasting, timeout=60_000)
    expected = "head 😀 " + new + " tail 😀"
    assert raw_text(editor.document()) == editor.mirror.text == expected
    assert editor.mirror.resyncs == resyncs  # (the batch's one splice, not a re-read)
    assert editor.mirror.edits == [Edit(len("head 😀 "), len(body), len(new))]
    editor.document().undo()
    assert raw_text(editor.document()) == editor.mirror.text == original


def test_delete_backspace_and_typing_over_a_huge_selection_go_in_slices(qtbot, monkeypatch):
    from PySide6.QtCore import Qt

    from forma_gui.app import tokenize_view
    from forma_gui.app.tokenize_view import LARGE_PASTE

    removed = []
    original_slice = tokenize_view.TokenInput._paste_slice
    monkeypatch.setattr(tokenize_view.TokenInput, "_paste_slice",
                        lambda self: (removed.append(self._paste.left), original_slice(self)))
    body = "x😀 y\n" * (LARGE_PASTE // 4)
    for key, typed, expected in ((Qt.Key.Key_Delete, "", "ab"), (Qt.Key.Key_Backspace, "", "ab"),
                                 (Qt.Key.Key_Q, "q", "aqb")):
        editor = _big_editor(qtbot, "a" + body + "b")
        _select(editor, 1, 1 + _units(body))
        removed.clear()
        qtbot.keyClick(editor, key) if not typed else qtbot.keyClicks(editor, typed)
        assert editor.replacing == ("pasting" if typed else "deleting")
        qtbot.waitUntil(lambda e=editor: not e.pasting, timeout=60_000)
        assert raw_text(editor.document()) == editor.mirror.text == expected
        assert removed[0] == _units(body) and len([r for r in removed if r]) > 1  # in slices
        editor.document().undo()
        assert raw_text(editor.document()) == editor.mirror.text == "a" + body + "b"
    _select(editor, 1, 1 + _units(body))  # Shift+Delete cuts (Qt's own way): not in slices
    qtbot.keyClick(editor, Qt.Key.Key_Delete, Qt.KeyboardModifier.ShiftModifier)
    assert not editor.pasting and raw_text(editor.document()) == "ab"


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=st.text(alphabet="ab\r\n😀東é\x00\ufeff", max_size=60), size=st.integers(1, 9))
def test_paste_source_slices_never_split_a_character_or_crlf(text, size):
    """...nor start with U+FEFF after the first, which Qt would drop from an insertion."""
    from forma_gui.app.tokenize_view import PasteSource

    for source in (PasteSource(text), PasteSource(memoryview(text.encode("utf-8", "surrogatepass")))):
        pieces, at = [], 0
        while at < len(source):
            piece, at = source.take(at, size)
            pieces.append(piece)
        assert "".join(pieces) == text
        assert not any(a.endswith("\r") and b.startswith("\n") for a, b in zip(pieces, pieces[1:]))
        assert not any(p.startswith("\ufeff") for p in pieces[1:])


def test_clipboard_paste_is_decoded_in_slices_like_the_text(qtbot):
    """A big clipboard text is read as UTF-8 bytes and decoded slice by slice (QMimeData.text()
    of 10 MB blocks for 100+ ms): the document ends up the same as pasting the str."""
    from PySide6.QtCore import QMimeData

    from forma_gui.app.tokenize_view import LARGE_PASTE, PasteSource, TokenInput

    text = "CRLF\r\nline 😀 東京\u00a0nbsp é\u0301 \ufeff" * (LARGE_PASTE // 25)
    mime = QMimeData()
    mime.setText(text)
    assert not PasteSource.from_mime(mime).is_text  # the bytes route
    editors = []
    for paste in (lambda e: e.insertFromMimeData(mime), lambda e: e.paste_in_slices(text)):
        editor = TokenInput()
        qtbot.addWidget(editor)
        paste(editor)
        assert editor.pasting
        qtbot.waitUntil(lambda e=editor: not e.pasting, timeout=60_000)
        assert editor.mirror.text == raw_text(editor.document())
        editors.append(editor)
    assert editors[0].mirror.text == editors[1].mirror.text == text.replace("\r\n", "\n")
    bom = QMimeData()
    bom.setData("text/plain", b"\xff\xfea\x00")  # UTF-16 with a BOM: Qt's own decoding
    assert PasteSource.from_mime(bom).is_text
