"""The vocabulary browser: search by substring, id and hex bytes; selection synced both ways."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QItemSelectionModel, Qt

from forma_gui.app.state import Session
from forma_gui.app.vocab_view import Query, VocabIndex, VocabView, parse_query, rendered_bytes
from tests.app._stub_tokenizer import StubTokenizer


def _gpt2():
    """The embedded GPT-2 vocabulary, when its loader is part of this build."""
    try:
        import forma_gui.formats.gpt2_files  # noqa: F401
    except ImportError:
        return None
    import forma_gui
    from forma_gui._resources import default_tokenizer_path

    return forma_gui.load_tokenizer(default_tokenizer_path())


@pytest.fixture(scope="module", params=["stub", "gpt2"])
def tokenizer(request):
    tok = StubTokenizer() if request.param == "stub" else _gpt2()
    if tok is None:
        pytest.skip("the GPT-2 loader is not in this build yet")
    return tok


@pytest.fixture(scope="module")
def index(tokenizer):
    return VocabIndex(tokenizer)


def _reference(tokenizer, needle: str) -> set[int]:
    """Slow, obvious search: every id whose piece or decoded text contains the needle."""
    fold = needle == needle.lower()
    hits = set()
    for i in range(tokenizer.vocab_size):
        piece, text = tokenizer.piece(i), tokenizer.token_bytes(i).decode("utf-8", "replace")
        if fold:
            piece, text = piece.lower(), text.lower()
        if needle in piece or needle in text:
            hits.add(i)
    return hits


def _reference_bytes(tokenizer, needle: bytes) -> set[int]:
    return {i for i in range(tokenizer.vocab_size) if needle in tokenizer.token_bytes(i)}


@pytest.mark.parametrize("text,expected", [
    ("", Query("all")), ("  #42 ", Query("id", 42)), ("42", Query("number", 42)),
    ("0x e2 82", Query("hex", b"\xe2\x82")), ("0xE282AC", Query("hex", b"\xe2\x82\xac")),
    ("\\xe2\\x82", Query("hex", b"\xe2\x82")), ("e282ac", Query("hex", b"\xe2\x82\xac")),
    ("e2 82 ac", Query("hex", b"\xe2\x82\xac")), ("cafe", Query("text", "cafe")),
    ("Ġthe", Query("text", "Ġthe")), ("0xyz", Query("text", "0xyz")), ("abc1", Query("text", "abc1")),
])
def test_parse_query(text, expected):
    assert parse_query(text) == expected


@pytest.mark.parametrize("needle", ["the", "The", "Ġw", "wor", "'t", "\n", "é", "x" * 30, "€"])
def test_substring_search_matches_reference(tokenizer, index, needle):
    found = index.search(Query("text", needle))
    assert set(found.tolist()) == _reference(tokenizer, needle)
    assert len(set(found.tolist())) == len(found)


@pytest.mark.parametrize("needle", [b"\xe2\x82", b" t", b"\xe6", b"\x00", b"ing"])
def test_hex_search_matches_reference(tokenizer, index, needle):
    found = index.search(Query("hex", needle))
    assert set(found.tolist()) == _reference_bytes(tokenizer, needle)


def test_id_search(tokenizer, index):
    assert index.search(Query("id", 5)).tolist() == [5]
    assert index.search(Query("id", tokenizer.vocab_size)).tolist() == []
    number = index.search(Query("number", 7))
    assert number[0] == 7 and set(number[1:].tolist()) == _reference(tokenizer, "7") - {7}


def test_exact_piece_comes_first(tokenizer, index):
    piece = tokenizer.piece(tokenizer.vocab_size - 2)
    assert index.search(Query("text", piece))[0] == tokenizer.vocab_size - 2


def test_rendered_bytes():
    assert rendered_bytes(b" a\n") == "·a↵"
    assert rendered_bytes(b"\xe2\x82") == "⟨E2 82⟩"


@pytest.fixture
def view(qtbot):
    session = Session()
    session.set_tokenizer(StubTokenizer(), "stub")
    widget = VocabView(session)
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitUntil(lambda: widget.index is not None, timeout=10_000)
    return widget


def _search(qtbot, view, text: str) -> None:
    view.search.setText(text)
    view._run_search()
    qtbot.waitUntil(lambda: not view._search_runner.busy, timeout=10_000)


def test_view_lists_every_token_lazily(view):
    assert view.table.objectName() == "vocabTable"
    tok = view.session.tokenizer
    assert view.model.rowCount() == tok.vocab_size
    assert view.model.rows is None  # no per-row objects until a search narrows it
    euro = tok.id_of(tok.piece(tok.vocab_size - 2))
    index = view.model.index(euro, 2)
    assert view.model.data(index) == rendered_bytes(tok.token_bytes(euro))
    assert view.model.data(view.model.index(3, 3)) == tok.token_type(3)


def test_view_search_modes(qtbot, view):
    tok = view.session.tokenizer
    _search(qtbot, view, "#260")
    assert [view.model.token_id(r) for r in range(view.model.rowCount())] == [260]
    _search(qtbot, view, "0x e2 82")
    ids = {view.model.token_id(r) for r in range(view.model.rowCount())}
    assert ids == _reference_bytes(tok, b"\xe2\x82")
    _search(qtbot, view, "world")
    ids = {view.model.token_id(r) for r in range(view.model.rowCount())}
    assert ids == _reference(tok, "world")
    assert "match" in view.status.text()
    _search(qtbot, view, "")
    assert view.model.rowCount() == tok.vocab_size


def test_selection_syncs_both_ways(qtbot, view):
    session = view.session
    session.select_token(200)
    current = view.table.selectionModel().currentIndex()
    assert view.model.token_id(current.row()) == 200
    # selecting a row here tells the session (and so the Tokenize view)
    with qtbot.waitSignal(session.token_selected) as blocker:
        view.table.selectionModel().setCurrentIndex(
            view.model.index(65, 0), QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
    assert blocker.args == [65]
    # an id hidden by the filter clears the filter so it can be shown
    _search(qtbot, view, "#3")
    session.select_token(100)
    assert view.model.rows is None
    assert view.model.token_id(view.table.selectionModel().currentIndex().row()) == 100


def test_view_follows_tokenizer_change(qtbot, view):
    _search(qtbot, view, "world")
    other = StubTokenizer(name="other")
    view.session.set_tokenizer(other)
    qtbot.waitUntil(lambda: view.index is not None and view.index.tokenizer is other, timeout=10_000)
    qtbot.waitUntil(lambda: not view._search_runner.busy and view.model.rows is not None, timeout=10_000)
    assert {view.model.token_id(r) for r in range(view.model.rowCount())} == _reference(other, "world")


def test_click_on_row_selects_token(qtbot, view):
    rect = view.table.visualRect(view.model.index(2, 1))
    with qtbot.waitSignal(view.session.token_selected) as blocker:
        qtbot.mouseClick(view.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert blocker.args == [2]


def test_status_counts_one_match_in_the_singular(qtbot, view):
    _search(qtbot, view, "#260")
    assert view.status.text().startswith("1 match (")


def test_a_token_picked_before_the_view_is_shown_is_centred(qtbot):
    """Picked in another tab before this one was first shown, the row used to sit on the
    table's bottom edge."""
    session = Session()
    session.set_tokenizer(StubTokenizer(), "stub")
    session.select_token(200)
    view = VocabView(session)
    qtbot.addWidget(view)
    qtbot.waitUntil(lambda: view.index is not None, timeout=10_000)
    view.resize(900, 600)
    view.show()

    def centred():
        rect = view.table.visualRect(view.table.currentIndex())
        return abs(rect.center().y() - view.table.viewport().height() / 2) < rect.height() * 2
    qtbot.waitUntil(centred, timeout=2000)


def _viewport_image(view):
    view.table.viewport().repaint()
    return view.table.viewport().grab().toImage()


def test_each_visible_row_is_painted_as_its_token(qtbot, view):
    """The table paints its rows itself (VocabTable): each row's swatch has its token's
    colour, the selected row the highlight, odd rows the alternate base; also after a search
    narrows the rows and when none are left."""
    from forma_gui.app.palette import hue_index, token_color

    view.resize(900, 600)
    view.table.scrollTo(view.model.index(120, 0), view.table.ScrollHint.PositionAtTop)
    view.session.select_token(123)
    palette = view.table.palette()
    for query in ("", "o"):
        if query:
            _search(qtbot, view, query)
        image = _viewport_image(view)
        first = view.table.rowAt(0)
        rows = range(first, min(view.model.rowCount(), first + 12))
        assert len(rows) > 5
        for row in rows:
            swatch = view.table.visualRect(view.model.index(row, 0))
            color = image.pixelColor(swatch.left() + 3 + 8, swatch.center().y())
            assert color.rgb() == token_color(hue_index(view.model.token_id(row))).rgb(), row
            blank = view.table.visualRect(view.model.index(row, 3))  # "normal": room on its right
            background = image.pixelColor(blank.right() - 6, blank.center().y())
            if view.model.token_id(row) == 123 and not query:
                assert background.rgb() == palette.highlight().color().rgb()
            else:
                assert background.rgb() == (palette.alternateBase() if row % 2 else palette.base()).color().rgb()
    _search(qtbot, view, "no such piece anywhere")
    assert view.model.rowCount() == 0
    image = _viewport_image(view)
    assert image.pixelColor(10, 10).rgb() == palette.base().color().rgb()
