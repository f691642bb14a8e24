"""The Stream player: stepping, playing, sources, stops and copying, driven with pytest-qt."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from forma_gui.app import stream_view
from forma_gui.app.state import Session
from forma_gui.app.stream_view import StreamPlayer, StreamTraceModel, describe_role, describe_step
from forma_gui.core.stream import REPLACEMENT, format_trace_table, trace_columns
from forma_gui.core.tokenizer import Tokenizer
from tests.core.test_stream import load_gpt2, r50k

TEXT = "Go€→🙂 日本語"


@pytest.fixture(scope="module")
def tokenizer():
    return load_gpt2()


@pytest.fixture
def session(tokenizer):
    s = Session()
    s.set_tokenizer(tokenizer)
    s.set_text(TEXT)
    return s


@pytest.fixture
def player(qtbot, session):
    p = StreamPlayer(session)
    qtbot.addWidget(p)
    p.show()  # a hidden player traces lazily, when shown
    return p


def decoded_so_far(tokenizer, ids: list[int], k: int, pending: bytes) -> str:
    """What a streaming decoder must have printed after k+1 tokens: everything but the held tail."""
    data = tokenizer.decode_bytes(ids[:k + 1])
    return data[:len(data) - len(pending)].decode("utf-8", "replace")


def test_object_name_and_initial_state(player, tokenizer):
    ids = tokenizer.encode(TEXT)
    assert [s.token_id for s in player.steps[:-1]] == ids == r50k().encode_ordinary(TEXT)
    assert player.objectName() == "streamPlayer"
    assert len(player.steps) == len(ids) + 1 and player.steps[-1].final
    assert player.position == 0
    assert player.text_so_far() == "Go"


def test_step_forward_and_back_track_the_decoder(qtbot, player, tokenizer):
    ids = tokenizer.encode(TEXT)
    for k in range(1, len(ids)):
        qtbot.mouseClick(player.forward_button, Qt.LeftButton)
        step = player.steps[player.position]
        assert player.position == k
        assert player.text_so_far() == decoded_so_far(tokenizer, ids, k, step.buffer_after)
    qtbot.mouseClick(player.back_button, Qt.LeftButton)
    assert player.position == len(ids) - 2


def test_mid_character_step_shows_held_bytes_and_naive_replacement(player):
    mid = next(s for s in player.steps if s.buffer_after)
    player.set_position(mid.index)
    assert player.buffer_cells._data == mid.buffer_after
    assert "[" + mid.buffer_after.hex(" ") + "]" in player.emitted_view.toPlainText()
    assert REPLACEMENT in player.text_so_far("naive")
    assert REPLACEMENT in player.naive_view.toPlainText()
    assert REPLACEMENT not in player.text_so_far()


def test_end_and_start(qtbot, player, tokenizer):
    qtbot.mouseClick(player.end_button, Qt.LeftButton)
    assert player.steps[player.position].final
    assert player.text_so_far() == tokenizer.decode(tokenizer.encode(TEXT)) == TEXT
    assert "End of stream" in player.step_text.text()
    qtbot.mouseClick(player.start_button, Qt.LeftButton)
    assert player.position == 0


def test_play_runs_to_the_end(qtbot, player, tokenizer):
    player.speed_slider.setValue(player.speed_slider.maximum())
    qtbot.mouseClick(player.play_button, Qt.LeftButton)
    assert player.is_playing
    qtbot.waitUntil(lambda: not player.is_playing, timeout=10_000)
    assert player.steps[player.position].final
    assert player.text_so_far() == tokenizer.decode(tokenizer.encode(TEXT))


def test_pause_and_play_again_from_the_end(qtbot, player):
    player.speed_slider.setValue(player.speed_slider.maximum())
    player.go_end()
    player.toggle_play()  # at the end, play starts over
    assert player.is_playing and player.position == 0
    player.toggle_play()
    assert not player.is_playing


def test_keyboard_shortcuts(qtbot, player):
    qtbot.waitExposed(player)
    player.activateWindow()
    qtbot.waitUntil(lambda: QGuiApplication.focusWindow() is not None, timeout=2000)
    target = player.emitted_view  # a child that does not handle these keys itself
    target.setFocus()
    qtbot.keyClick(target, Qt.Key_End)
    assert player.steps[player.position].final
    qtbot.keyClick(target, Qt.Key_Left)
    assert player.position == len(player.steps) - 2
    qtbot.keyClick(target, Qt.Key_Home)
    assert player.position == 0
    qtbot.keyClick(target, Qt.Key_Right)
    assert player.position == 1
    qtbot.keyClick(target, Qt.Key_Space)
    assert player.is_playing
    qtbot.keyClick(target, Qt.Key_Space)
    assert not player.is_playing
    player.table.setFocus()
    player.table.selectRow(3)
    QGuiApplication.clipboard().clear()
    qtbot.keyClick(player.table, Qt.Key_C, Qt.ControlModifier)
    assert QGuiApplication.clipboard().text() == format_trace_table(player.steps[3:4])


def test_typing_in_the_ids_field_does_not_step(qtbot, player):
    qtbot.keyClicks(player.ids_edit, "5247, 26391")
    qtbot.keyClick(player.ids_edit, Qt.Key_Left)
    assert player.use_ids.isChecked()
    assert [s.token_id for s in player.steps[:-1]] == [5247, 26391]
    assert player.text_so_far() == "Go" and player.position == 0


def test_ids_source_with_cjk(player, tokenizer):
    ids = tokenizer.encode("日本語")
    player.ids_edit.setText(" ".join(map(str, ids)))
    player.use_ids.setChecked(True)
    player.go_end()
    assert player.text_so_far() == "日本語" == tokenizer.decode(ids)


def test_bad_ids_show_an_error(player, tokenizer):
    player.use_ids.setChecked(True)
    player.ids_edit.setText("1, banana")
    player.recompute()
    assert player.steps == [] and "banana" in player.note.text() and player.note.isVisibleTo(player)
    player.ids_edit.setText(str(tokenizer.vocab_size))
    player.recompute()
    assert "out of range" in player.note.text()


def test_follows_the_session_text(player, session, tokenizer):
    session.set_text("本語🙂")
    player.go_end()
    assert player.text_so_far() == "本語🙂"
    assert "本語" in player.text_info.text()


def test_ids_mode_ignores_text_changes(player, session):
    player.ids_edit.setText("5247")
    player.use_ids.setChecked(True)
    session.set_text("something else")
    assert [s.token_id for s in player.steps[:-1]] == [5247]


def test_stop_string_spanning_characters(player, tokenizer):
    player.stops_edit.setText("🙂 日|zzz")
    player.go_end()
    assert player.text_so_far("stop_emitted") == "Go€→"
    assert player.text_so_far() == TEXT                       # the decoder itself goes on
    stop = next(s for s in player.steps if s.stops_here)
    assert f"step {stop.index}" in player.stop_status.text()
    assert "日本語" in player.stop_view.toPlainText()          # shown, struck through
    assert player.model.columnCount() == len(trace_columns(with_stops=True))


def test_changing_stops_keeps_the_position(player):
    player.set_position(5)
    player.stops_edit.setText("語")
    assert player.position == 5


def test_hidden_player_traces_when_shown(qtbot, session):
    p = StreamPlayer(session)
    qtbot.addWidget(p)
    assert p.steps == []
    session.set_text("日本")
    assert p.steps == []
    p.show()
    p.go_end()
    assert p.text_so_far() == "日本"


def test_no_tokenizer(qtbot):
    p = StreamPlayer(Session())
    qtbot.addWidget(p)
    p.show()
    assert p.steps == [] and "tokenizer" in p.note.text()
    p.step_forward()
    p.play()
    assert not p.is_playing


def test_copy_table_and_selection(qtbot, player):
    text = player.copy_table()
    assert QGuiApplication.clipboard().text() == text == format_trace_table(player.steps)
    player.table.setFocus()
    player.set_position(2)
    player.table.selectRow(2)
    assert player.copy_selection().splitlines()[2] == format_trace_table(player.steps[2:3]).splitlines()[2]


def test_descriptions():
    from forma_gui.core.stream import byte_roles, trace_chunks

    held, bad, flush = trace_chunks([b"a\xe6", b"\x97\xff"])[0], trace_chunks([b"\xff"])[0], \
        trace_chunks([b"\xe6"])[-1]
    assert "Holding e6: 1 of the 3 bytes" in describe_step(held)
    assert "1 invalid sequence(s)" in describe_step(bad)
    assert "flushed as one U+FFFD" in describe_step(flush)
    assert "lead byte of a 4-byte" in describe_role(0xF0, byte_roles(b"\xf0\x9f\x99\x82")[0])


def test_table_model_mirrors_the_trace(player):
    model = player.model
    assert isinstance(model, StreamTraceModel)
    assert model.rowCount() == len(player.steps)
    assert [model.headerData(c, Qt.Horizontal) for c in range(model.columnCount())] == list(trace_columns(with_stops=False))
    lines = format_trace_table(player.steps).splitlines()
    assert model.index(0, 2).data() in lines[2] and model.index(len(player.steps) - 1, 0).data() == "end"


def test_clicking_a_row_moves_the_player(player):
    player.table.selectionModel().setCurrentIndex(player.model.index(4, 0),
                                                  player.table.selectionModel().SelectionFlag.ClearAndSelect)
    assert player.position == 4


def test_long_text_is_traced_in_a_worker(qtbot, player, session, tokenizer):
    text = "日本語 🙂 " * 800
    with qtbot.waitSignal(player.trace_computed, timeout=30_000):
        session.set_text(text)
    player.go_end()
    assert len(player.steps) == len(tokenizer.encode(text)) + 1
    assert player.text_so_far() == text


def test_very_long_input_is_capped(qtbot, player, monkeypatch, tokenizer):
    monkeypatch.setattr(stream_view, "MAX_STEPS", 50)
    ids = tokenizer.encode("日本語 " * 40)
    player.use_ids.setChecked(True)
    player.ids_edit.setText(",".join(map(str, ids)))
    player.recompute()
    assert len(player.steps) == 50 and not player.steps[-1].final
    assert "first 50" in player.note.text()


class Failing(Tokenizer):
    """A tokenizer whose encoder breaks: the player must say so, not crash."""

    vocab_size = 256

    def piece(self, token_id: int) -> str:
        return chr(token_id)

    def id_of(self, piece: str) -> int | None:
        return None

    def token_bytes(self, token_id: int) -> bytes:
        return bytes([token_id])

    def _encode_ordinary(self, text: str) -> list[int]:
        raise RuntimeError("encoder exploded")


@pytest.mark.parametrize("text", ["short", "long " * 1000])
def test_tokenizer_failure_is_shown(qtbot, text):
    session = Session()
    session.set_tokenizer(Failing())
    session.set_text(text)
    p = StreamPlayer(session)
    qtbot.addWidget(p)
    p.show()
    qtbot.waitUntil(lambda: "exploded" in p.note.text(), timeout=10_000)
    assert p.steps == []


def test_the_step_table_paints_each_step_in_its_row(qtbot, session):
    """The step table paints its rows itself (StreamTable): each row's texts are the model's
    display texts, the stop's row has the stop background, the steps after it are greyed,
    the selected row has the highlight, and the bytes columns have the model's font."""
    from forma_gui.app.stream_view import AFTER_STOP_FG, STOP_ROW_BG, StreamTable

    session.set_text("Tokenizers don't see words: they see pieces, and pieces again.")
    player = StreamPlayer(session)
    qtbot.addWidget(player)
    player.resize(1200, 800)
    player.show()
    player.stops_edit.setText("they")
    table, model = player.table, player.model
    qtbot.waitUntil(lambda: model.rowCount() > 10 and any(s.stops_here for s in model.steps), timeout=10_000)
    assert isinstance(table, StreamTable)
    fonts = table.column_fonts()
    assert fonts and all(model.index(0, c).data(Qt.FontRole) == f for c, f in fonts.items())
    stop = next(k for k, s in enumerate(model.steps) if s.stops_here)
    table.selectRow(0)
    table.viewport().repaint()
    image = table.viewport().grab().toImage()
    palette = table.palette()
    last = table.model().columnCount() - 1
    for row in range(min(model.rowCount(), stop + 3)):
        texts, _, _ = table.row_texts(row)
        assert texts == [model.index(row, c).data() for c in range(model.columnCount())]
        cell = table.visualRect(model.index(row, last))
        background = image.pixelColor(cell.right() - 3, cell.center().y())
        expected = (palette.highlight().color() if row == 0 else STOP_ROW_BG if row == stop
                    else palette.base().color())
        assert background.rgb() == expected.rgb(), row
        if row > stop:  # greyed text: its darkest pixels are the after-stop colour's
            token = table.visualRect(model.index(row, 1))
            ink = [image.pixelColor(x, y) for x in range(token.left(), token.right())
                   for y in range(token.top(), token.bottom())]
            darkest = min(ink, key=lambda c: c.lightness())
            assert abs(darkest.lightness() - AFTER_STOP_FG.lightness()) < 40, darkest.name()
