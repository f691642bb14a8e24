"""The chip rendering: the fast layout equals the reference one; labels never show U+FFFD."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from forma_gui.app.palette import assign_shades, hue_index
from forma_gui.app.token_canvas import TokenCanvas, utf8_runs
from tests.app._stub_tokenizer import StubTokenizer
from tests.conftest import MAX_EXAMPLES

TEXT = ("Hello world! don't\n\n\n\tthe cat is €5 東京 👩\u200d💻 <|end|> "
        + "x" * 400 + "\r\n" + "Привет\u0301 мир\n")


@pytest.fixture
def canvas(qtbot):
    widget = TokenCanvas()
    qtbot.addWidget(widget)
    widget.resize(600, 400)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def _layout(canvas: TokenCanvas, fast: bool) -> tuple:
    canvas.fast_layout = fast
    canvas._reset_layout()
    canvas._timer.stop()
    while not canvas.laid_out:
        canvas._layout_slice()
        canvas._timer.stop()
    return (list(canvas._item_first), list(canvas._item_x), list(canvas._item_w),
            list(canvas._line_item), bytes(canvas._slot), bytes(canvas._shade))


@pytest.mark.parametrize("stored,ws,ids", list(itertools.product([False, True], repeat=3)))
def test_fast_layout_equals_reference(canvas, stored, ws, ids):
    tok = StubTokenizer()
    canvas.set_segmentation(TEXT, tok.segment(TEXT, special=True))
    canvas.set_options(as_stored=stored, visible_ws=ws, show_ids=ids)
    assert _layout(canvas, fast=True) == _layout(canvas, fast=False)


def test_items_tile_the_tokens_and_lines_are_ordered(canvas):
    tokens = StubTokenizer().segment(TEXT)
    canvas.set_segmentation(TEXT, tokens)
    first, xs, widths, lines, slots, shades = _layout(canvas, fast=True)
    assert first[0] == 0 and first == sorted(set(first))
    assert list(lines) == sorted(lines)
    assert len(slots) == len(tokens)
    # colours: hue from the id, shade alternates exactly where palette.assign_shades says
    assert list(slots) == [hue_index(t.id) for t in tokens]
    assert list(shades) == assign_shades([t.id for t in tokens])[1]
    for item, x, w in zip(range(len(first)), xs, widths):
        assert x >= 0 and x + w <= canvas.viewport().width()


def test_one_character_in_bytes_is_one_group(canvas):
    tokens = StubTokenizer().segment("a東b")  # 東 = E6 9D B1, three byte tokens
    canvas.set_segmentation("a東b", tokens)
    _layout(canvas, fast=True)
    assert [t.partial for t in tokens] == [False, True, True, True, False]
    assert canvas._item_tokens(canvas._item_of_token(1)) == (1, 4)
    assert canvas._group_char(1, 4) == "東"
    assert [canvas.label(k) for k in (1, 2, 3)] == ["E6", "9D", "B1"]
    assert "partial" in canvas.tooltip(2) and "9D" in canvas.tooltip(2)


def test_clicks_hit_the_token_under_the_mouse(canvas):
    tokens = StubTokenizer().segment(TEXT)
    canvas.set_segmentation(TEXT, tokens)
    _layout(canvas, fast=True)
    for k in range(0, len(tokens), 7):
        rect = canvas.token_rect(k)
        if rect.bottom() > canvas.viewport().height():
            break
        assert canvas.token_at(rect.center()) == k


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.binary(max_size=24))
def test_runs_cover_the_bytes_without_replacement_characters(data):
    runs = utf8_runs(data)
    rebuilt = b"".join(bytes.fromhex(t) if is_hex else t.encode() for t, is_hex in runs)
    assert rebuilt == data
    assert all("\ufffd" not in t for t, is_hex in runs if not is_hex) or "\ufffd".encode() in data


WORDS = st.sampled_from(["Hello", " world", "!", " the", " cat", "\n", "\n\n", " ", "東京", "€",
                         "👩\u200d💻", " is", "x" * 90, "don't", "<|end|>", "\t", "ab"])
DOCS = st.lists(WORDS, min_size=1, max_size=120).map("".join)


@settings(max_examples=max(20, MAX_EXAMPLES // 2), deadline=None)
@given(DOCS, st.floats(0, 1), st.integers(0, 12), st.lists(WORDS, max_size=4).map("".join),
       st.booleans())
def test_relayout_after_an_edit_equals_a_fresh_layout(qapp, text, at, removed, added, finish_old):
    tok = StubTokenizer()
    start = int(at * len(text))
    edited = text[:start] + added + text[start + removed:]
    reused, fresh = TokenCanvas(), TokenCanvas()
    for canvas in (reused, fresh):
        canvas.resize(420, 300)
        canvas.show()
        canvas.deleteLater()
    reused.set_segmentation(text, tok.segment(text))
    reused._timer.stop()
    while not reused.laid_out and (finish_old or reused._next_token < len(reused.tokens) // 2):
        reused._layout_slice()
        reused._timer.stop()
    reused.set_segmentation(edited, tok.segment(edited))
    fresh.reuse_layout = False
    fresh.set_segmentation(edited, tok.segment(edited))
    assert _layout_rest(reused) == _layout_rest(fresh)


@settings(max_examples=max(20, MAX_EXAMPLES // 2), deadline=None)
@given(DOCS, st.lists(st.tuples(st.floats(0, 1), st.integers(0, 6), st.lists(WORDS, max_size=3).map("".join)),
                      min_size=1, max_size=3), st.booleans())
def test_relayout_by_the_encoders_splice_equals_a_fresh_layout(qapp, text, edits, finish_old):
    """The Tokenize view hands the canvas the live encoder's splices since the tokens it
    shows (`Splice.then` of each edit's): the layout kept by them equals a fresh one."""
    from forma_gui.app.token_store import TokenStore
    from forma_gui.core.incremental import IncrementalEncoder
    from forma_gui.formats.loader import load_tokenizer
    from tests.conftest import data_file

    tok = load_tokenizer(data_file("gpt2", "encoder.json"))
    enc = IncrementalEncoder(tok, text)
    reused, fresh = TokenCanvas(), TokenCanvas()
    for canvas in (reused, fresh):
        canvas.resize(420, 300)
        canvas.show()
        canvas.deleteLater()
    store = lambda: TokenStore.from_columns(tok, enc.ids, enc.starts, enc.ends, enc.flags, enc.nbytes)  # noqa: E731
    reused.set_segmentation(text, store())
    reused._timer.stop()
    while not reused.laid_out and (finish_old or reused._next_token < len(reused.tokens) // 2):
        reused._layout_slice()
        reused._timer.stop()
    changed = None
    for at, removed, added in edits:
        start = int(at * len(text))
        removed = min(removed, len(text) - start)
        enc.apply_edit(start, removed, added)
        text = text[:start] + added + text[start + removed:]
        changed = enc.last_splice if changed is None else changed.then(enc.last_splice)
    assert list(enc.ids) == tok.encode(text)
    reused.set_segmentation(text, store(), changed)
    fresh.reuse_layout = False
    fresh.set_segmentation(text, store())
    assert _layout_rest(reused) == _layout_rest(fresh)


def _layout_rest(canvas: TokenCanvas) -> tuple:
    """Finish the layout already begun (no reset) and return its arrays."""
    canvas._timer.stop()
    while not canvas.laid_out:
        canvas._layout_slice()
        canvas._timer.stop()
    return (list(canvas._item_first), list(canvas._item_x), list(canvas._item_w),
            list(canvas._line_item), bytes(canvas._slot), bytes(canvas._shade))


def test_typing_near_the_end_keeps_the_layout_before_it(qtbot):
    tok = StubTokenizer()
    text = "Hello world!\n" * 400
    canvas = TokenCanvas()
    qtbot.addWidget(canvas)
    canvas.resize(420, 300)
    canvas.set_segmentation(text, tok.segment(text))
    _layout_rest(canvas)
    edited = text[:-7] + " cat" + text[-7:]
    canvas.set_segmentation(edited, tok.segment(edited))
    assert canvas._next_token > 0.9 * len(canvas.tokens)  # only the last lines are redone
    edited = " the" + edited
    canvas.set_segmentation(edited, tok.segment(edited))
    _layout_rest(canvas)
    assert canvas._tail is None


# ---- painting: chips are drawn once per look and copied (TokenCanvas._chip_pixmap) ----------

def _image(canvas: TokenCanvas):
    canvas.viewport().repaint()
    return canvas.viewport().grab().toImage()


def _laid_out(qtbot, text: str, **options) -> TokenCanvas:
    canvas = TokenCanvas()
    qtbot.addWidget(canvas)
    canvas.resize(600, 400)
    canvas.show()
    qtbot.waitExposed(canvas)
    canvas.set_segmentation(text, StubTokenizer().segment(text, special=True))
    canvas.set_options(**options)
    _layout_rest(canvas)
    return canvas


@pytest.mark.parametrize("change", ["show_ids", "visible_ws", "as_stored", "palette"])
def test_kept_chips_are_not_shown_after_the_look_changes(qtbot, change):
    """A canvas whose chips were drawn before a toggle or palette change paints exactly as
    one made with the new look (fails when kept pixmaps outlive the look they were drawn in:
    chips whose width stays the same would keep their old text, ids or colours)."""
    from PySide6.QtGui import QColor, QPalette

    dark = QPalette()
    for role, colour in ((QPalette.ColorRole.Base, "#1e1f24"), (QPalette.ColorRole.Text, "#eeeeee"),
                         (QPalette.ColorRole.Window, "#26272c")):
        dark.setColor(role, QColor(colour))

    def apply(canvas):
        if change == "palette":
            canvas.setPalette(dark)
            _layout_rest(canvas)
        else:
            canvas.set_options(**{change: True})
            _layout_rest(canvas)

    before = _laid_out(qtbot, TEXT)
    _image(before)  # its chips are drawn and kept
    assert before._chips
    apply(before)
    fresh = _laid_out(qtbot, TEXT)
    apply(fresh)
    assert _image(before) == _image(fresh)


def test_outlines_cover_only_the_selected_and_highlighted_chips(qtbot):
    """Selecting a token outlines its chip only, and unselecting leaves no trace of it (the
    kept pixmaps hold no outline); the highlight outlines every chip with that id."""
    canvas = _laid_out(qtbot, TEXT)
    plain = _image(canvas)
    k = next(k for k in range(3, len(canvas.tokens)) if canvas.tokens.ids[k] != canvas.tokens.ids[2])
    canvas.set_selected(k, scroll=False)
    selected = _image(canvas)
    assert _changed_within(plain, selected, [canvas.token_rect(k)])
    canvas.set_selected(None)
    assert _image(canvas) == plain
    tid = canvas.tokens.ids[2]
    same = [j for j in range(len(canvas.tokens)) if canvas.tokens.ids[j] == tid and canvas.token_rect(j) is not None
            and canvas.token_rect(j).bottom() < canvas.viewport().height()]
    canvas.set_highlight_id(tid)
    assert _changed_within(plain, _image(canvas), [canvas.token_rect(j) for j in same])
    canvas.set_highlight_id(None)
    assert _image(canvas) == plain


def _changed_within(a, b, rects) -> bool:
    """Whether images a and b differ, and only inside these rectangles grown by 2 pixels."""
    import numpy as np

    def pixels(image):
        from PySide6.QtGui import QImage

        image = image.convertToFormat(QImage.Format.Format_RGB32)
        rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
        return rows[:, :4 * image.width()].reshape(image.height(), image.width(), 4)

    dpr = a.devicePixelRatio()
    changed = np.any(pixels(a) != pixels(b), axis=2)
    inside = np.zeros_like(changed)
    for r in rects:
        y0, y1 = int((r.top() - 2) * dpr), int((r.bottom() + 3) * dpr)
        x0, x1 = int((r.left() - 2) * dpr), int((r.right() + 3) * dpr)
        inside[max(0, y0):y1, max(0, x0):x1] = True
    return bool(changed.any()) and not (changed & ~inside).any()
