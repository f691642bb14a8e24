"""The Layout view against numpy: strides, offsets and values of transposed and sliced views."""
from __future__ import annotations

import time

import gguf
import numpy as np
import pytest
from PySide6.QtCore import QCoreApplication, QEvent, Qt, QTimer
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication

import forma_gui
from forma_gui.app.layout_view import LayoutView, parse_axes, parse_index
from forma_gui.app.state import Session
from tests.app._smol import gguf_dequantized, smol_path as _smol_path
from tests.conftest import data_file

Q4_1_TENSOR = "blk.0.ffn_down.weight"      # (576, 1536) Q4_1
F32_TENSOR = "blk.0.attn_norm.weight"      # (576,) F32


@pytest.fixture(scope="module")
def smol_path():
    return _smol_path()


@pytest.fixture
def view(qtbot, smol_path):
    session = Session()
    session.set_weights(forma_gui.open_weights(smol_path))
    v = LayoutView(session)
    qtbot.addWidget(v, before_close_func=lambda w: stop(qtbot, w))
    yield v
    session.weights.close()  # without a signal: the views are being torn down


def stop(qtbot, view) -> None:
    """Let the worker end before pytest-qt deletes the view it reports to."""
    view.runner.cancel()
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=20000)


def shown(view: LayoutView, key: str) -> str:
    return view.info[key].text()


def element_offset(a: np.ndarray, base: np.ndarray) -> int:
    """Element offset of a view's first element inside `base` (numpy's own bookkeeping)."""
    delta = a.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return delta // base.itemsize


def select(qtbot, view: LayoutView, name: str):
    """Select `name` and wait for its values (a view opens a file on its first quantized matrix)."""
    if view.session.tensor == name:
        qtbot.waitUntil(lambda: view.result is not None and view.result.name == name, timeout=30000)
        return view.result
    with qtbot.waitSignal(view.values_ready, timeout=30000):
        view.session.select_tensor(name)
    return view.result


# ------------------------------------------------------------------ parsing

def test_parse_index_matches_numpy_semantics():
    a = np.arange(24).reshape(2, 3, 4)
    for text in ("1, ::-1", "..., 1:3", ":, 2", "0", "-1, ::2, 1::2", "", "::-1, ..."):
        assert np.array_equal(a[parse_index(text, 3)], a[eval(f"np.s_[{text}]") if text else ()])


@pytest.mark.parametrize("text", ["1:2:0", "a", "1, 2, 3, 4", "..., ..."])
def test_parse_index_rejects(text):
    with pytest.raises(ValueError):
        parse_index(text, 3)


def test_parse_axes():
    assert parse_axes("2, 0 1", 3) == (2, 0, 1)
    with pytest.raises(ValueError):
        parse_axes("0, 0", 2)


# ------------------------------------------------------------------ strides against numpy

def test_quantized_tensor_strides_follow_numpy_through_transpose_and_slice(qtbot, view):
    select(qtbot, view, Q4_1_TENSOR)
    base = np.empty((576, 1536), dtype=np.float32)           # same shape, numpy's strides
    assert shown(view, "shape") == str(base.shape)
    assert shown(view, "strides") == str(tuple(s // 4 for s in base.strides))
    assert shown(view, "contiguous") == "yes"

    view.transpose()
    t = base.T
    assert shown(view, "shape") == str(t.shape)
    assert shown(view, "strides") == str(tuple(s // 4 for s in t.strides))
    assert shown(view, "contiguous") == "no"

    view.apply_slice("2:10:2, ::-1")
    s = t[2:10:2, ::-1]
    assert shown(view, "shape") == str(s.shape)
    assert shown(view, "strides") == str(tuple(st // 4 for st in s.strides))
    assert shown(view, "offset").startswith(f"{element_offset(s, base)} elements")
    assert "did not move" in view.moved.text()
    assert shown(view, "expression") == "t.T[2:10:2, ::-1]"


def test_f32_byte_strides_equal_numpy(qtbot, view):
    select(qtbot, view, F32_TENSOR)
    base = np.empty(576, dtype=np.float32)
    view.apply_slice("100::-3")
    s = base[100::-3]
    assert shown(view, "byte_strides") == str(s.strides)
    assert shown(view, "strides") == str(tuple(st // 4 for st in s.strides))
    off = element_offset(s, base)
    assert shown(view, "offset") == f"{off} elements = {off * 4} bytes"


def test_permute_of_a_3d_f16_tensor(qtbot, tmp_path):
    path = tmp_path / "three.gguf"
    w = gguf.GGUFWriter(path, "test")
    data = np.arange(4 * 5 * 6, dtype=np.float16).reshape(4, 5, 6)
    w.add_tensor("cube", data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    session = Session()
    session.set_weights(forma_gui.open_weights(path))
    view = LayoutView(session)
    qtbot.addWidget(view, before_close_func=lambda w: stop(qtbot, w))
    with qtbot.waitSignal(view.values_ready, timeout=10000):
        session.select_tensor("cube")
    view.permute("2, 0, 1")
    p = data.transpose(2, 0, 1)
    assert shown(view, "byte_strides") == str(p.strides)
    view.apply_slice("1:, 3, ::-2")
    s = p[1:, 3, ::-2]
    assert shown(view, "shape") == str(s.shape)
    assert shown(view, "byte_strides") == str(s.strides)
    with qtbot.waitSignal(view.values_ready, timeout=10000):
        view.compute_values()
    assert np.array_equal(view.result.image, s.astype(np.float32))
    session.weights.close()  # without a signal: the views are being torn down


# ------------------------------------------------------------------ drawing and hovering

def test_hover_shows_offset_sum_and_block(qtbot, view):
    select(qtbot, view, Q4_1_TENSOR)
    view.transpose()
    view.apply_slice("::3, 5:")
    lay = view.layout_
    index = (1, 2)
    expected = lay.offset + sum(i * s for i, s in zip(index, lay.strides))
    view.diagram.hover_index(index)
    text = view.formula.text()
    assert f"= {expected}" in text.splitlines()[0]
    block = expected // 32
    start = view.source.offset + block * 20
    assert f"block {block} " in text and f"0x{start:X}–0x{start + 19:X}" in text
    # the strip lists exactly the window's offsets, ascending, with gaps where they skip
    offsets = [c.offset for c in view.diagram.strip if hasattr(c, "offset")]
    assert offsets == sorted(c.offset for c in view.diagram.cells)


def test_mouse_over_a_strip_cell_highlights_its_grid_cell(qtbot, view):
    select(qtbot, view, Q4_1_TENSOR)
    view.transpose()
    diagram = view.diagram
    cell = next(c for c in diagram.cells if c.index == (3, 1))
    pos = cell.strip.center()
    move = QMouseEvent(QEvent.Type.MouseMove, pos, diagram.mapToGlobal(pos),
                       Qt.MouseButton.NoButton, Qt.MouseButton.NoButton,
                       Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(diagram.hovered) as hovered:
        QApplication.sendEvent(diagram, move)
    assert hovered.args == [(3, 1)] and diagram.hover is cell
    assert f"= {3 * 1 + 1 * 1536}" in view.formula.text()


def test_window_cells_carry_numpy_offsets(qtbot, view):
    select(qtbot, view, Q4_1_TENSOR)
    view.apply_slice("3:, ::-5")
    base = np.arange(576 * 1536).reshape(576, 1536)
    s = base[3:, ::-5]
    for cell in view.diagram.cells:
        assert cell.offset == s[cell.index]


# ------------------------------------------------------------------ values

def test_values_of_a_transposed_slice_equal_gguf_py(qtbot, view):
    select(qtbot, view, Q4_1_TENSOR)
    expected_full = gguf_dequantized(Q4_1_TENSOR)
    st = view.result.stats
    assert st["min"] == expected_full.min() and st["max"] == expected_full.max()
    assert st["mean"] == pytest.approx(expected_full.mean(dtype=np.float64), rel=1e-9)
    assert st["std"] == pytest.approx(expected_full.std(dtype=np.float64), rel=1e-9)
    assert st["nan"] == 0 and st["inf"] == 0 and st["count"] == expected_full.size
    assert view.result.counts.sum() == expected_full.size

    view.transpose()
    with qtbot.waitSignal(view.values_ready, timeout=30000):
        view.apply_slice("7:300:3, ::-2")
    expected = expected_full.T[7:300:3, ::-2]
    assert view.result.image_step == (1, 1)
    assert np.array_equal(view.result.image, expected)


def test_cancel_stops_the_job(qtbot, view):
    view.session.select_tensor("token_embd.weight")
    qtbot.waitUntil(lambda: view.progress.isVisibleTo(view), timeout=5000)
    view.progress.cancel_button.click()
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=20000)
    assert view.result is None and not view.progress.isVisibleTo(view)


def test_event_loop_stays_responsive_while_a_large_tensor_dequantizes(qtbot, view):
    """Responsiveness, not speed: the GUI thread keeps ticking while the worker runs."""
    # widgets of earlier tests are deleted on the next event loop: get that done first
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    qtbot.wait(50)
    gaps, last = [], [time.perf_counter()]

    def tick():
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    started = time.perf_counter()
    timer.start()
    with qtbot.waitSignal(view.values_ready, timeout=60000):
        view.session.select_tensor("token_embd.weight")        # 28M values, Q8_0
    elapsed = time.perf_counter() - started
    timer.stop()
    assert view.result.stats["count"] == 49152 * 576
    assert elapsed > 0.3, "the job was too short to say anything about responsiveness"
    assert max(gaps) < 0.1, f"the event loop stalled for {max(gaps) * 1000:.0f} ms"


def test_big_endian_f32_values(qtbot, tmp_path):
    path = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(path, "test", endianess=gguf.GGUFEndian.BIG)
    data = np.linspace(-3, 5, 6 * 40, dtype=np.float32).reshape(6, 40)
    w.add_tensor("m", data.copy())          # the writer byte-swaps it
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    session = Session()
    session.set_weights(forma_gui.open_weights(path))
    assert session.weights.raw("m").dtype == np.dtype(">f4")
    view = LayoutView(session)
    qtbot.addWidget(view, before_close_func=lambda v: stop(qtbot, v))
    qtbot.waitUntil(lambda: view.result is not None, timeout=10000)   # opens on its only tensor
    assert np.array_equal(view.result.image, data)
    with qtbot.waitSignal(view.values_ready, timeout=10000):
        view.apply_slice("::-1, 3::7")
    assert np.array_equal(view.result.image, data[::-1, 3::7])
    assert shown(view, "byte_strides") == str(data[::-1, 3::7].strides)
    session.weights.close()


def test_huge_slices_are_sampled_from_their_blocks(qtbot, view, monkeypatch):
    """Past FULL_LIMIT only the blocks of every k-th row and column are dequantized."""
    import forma_gui.app.layout_view as lv

    monkeypatch.setattr(lv, "FULL_LIMIT", 10_000)
    monkeypatch.setattr(lv, "SAMPLE_SIDE", 64)
    name = "blk.1.ffn_down.weight"                         # (576, 1536) Q4_1, not cached yet
    expected = gguf_dequantized(name)
    result = select(qtbot, view, name)
    assert result.sample_step == (9, 24) and result.cache is None
    assert np.array_equal(result.image, expected[::9, ::24])
    view.transpose()
    with qtbot.waitSignal(view.values_ready, timeout=30000):
        view.apply_slice("::-1, 5:")
    assert np.array_equal(view.result.image, expected.T[::-1, 5:][::24, ::9])
    assert view.result.stats["max"] == view.result.image.max()


def test_empty_slice(qtbot, view):
    select(qtbot, view, Q4_1_TENSOR)
    view.apply_slice("5:5")
    assert shown(view, "shape") == "(0, 1536)" and "empty" in view.slice_label.text()


def test_a_vocabulary_only_gguf_shows_the_demo_and_says_why(qtbot):
    session = Session()
    weights = forma_gui.open_weights(data_file("gguf-vocab", "ggml-vocab-llama-spm.gguf"))
    session.set_weights(weights)
    view = LayoutView(session)
    qtbot.addWidget(view, before_close_func=lambda w: stop(qtbot, w))
    assert view.source is not None and view.source.name == "demo"
    assert "ggml-vocab-llama-spm.gguf holds no tensors" in view.header.text()
    assert "pick one" not in view.header.text()
    session.set_weights(None)
    weights.close()


def test_the_side_panel_scrolls_rather_than_cutting_the_note_off(qtbot, view):
    """In a short window the info box's wrapped note keeps its lines: the panel scrolls."""
    from PySide6.QtWidgets import QScrollArea

    select(qtbot, view, Q4_1_TENSOR)
    view.resize(1100, 560)
    view.show()
    qtbot.waitExposed(view)
    QApplication.processEvents()
    note = view.moved
    assert note.isVisible() and note.text()
    assert note.height() >= note.heightForWidth(note.width())
    panel = view.findChild(QScrollArea, "layoutSidePanel")
    bar = panel.verticalScrollBar()
    assert bar.maximum() > 0  # the panel is taller than the pane: it scrolls
    panel.ensureWidgetVisible(note)
    QApplication.processEvents()
    top = note.mapTo(panel.viewport(), note.rect().topLeft()).y()
    assert 0 <= top and top + note.height() <= panel.viewport().height()
