"""The Quantization view on SmolLM2's Q4_1 tensors, checked against gguf-py and the core."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtTest import QTest

import forma_gui
from forma_gui.app.quant_view import QuantView, fill_formula
from forma_gui.app.state import Session
from forma_gui.app.tensor_support import demo_matrix
from forma_gui.core import quant
from tests.app._smol import gguf_dequantized, gguf_tensor, smol_path as _smol_path
from tests.conftest import data_file

TENSOR = "blk.0.ffn_down.weight"      # (576, 1536) Q4_1: 48 blocks per row


@pytest.fixture(scope="module")
def smol_path():
    return _smol_path()


@pytest.fixture
def view(qtbot, smol_path):
    session = Session()
    session.set_weights(forma_gui.open_weights(smol_path))
    v = QuantView(session)
    qtbot.addWidget(v, before_close_func=lambda w: stop(qtbot, w))
    yield v
    session.weights.close()  # without a signal: the views are being torn down


def stop(qtbot, view) -> None:
    """Let the workers end before pytest-qt deletes the view they report to."""
    for runner in (view.runner, view.requant.runner):
        runner.cancel()
        qtbot.waitUntil(lambda r=runner: not r.busy, timeout=20000)


def select(qtbot, view, name):
    """Select `name`, wait for its scales (a view opens a file on its first quantized matrix)."""
    if view.source is not None and view.source.name == name:
        view.session.select_tensor(name)
        qtbot.waitUntil(lambda: view.result is not None, timeout=30000)
        return
    with qtbot.waitSignal(view.scales_ready, timeout=30000):
        view.session.select_tensor(name)


def test_scale_plot_equals_block_scales(qtbot, view):
    select(qtbot, view, TENSOR)
    raw = view.session.weights.raw(TENSOR)
    scales = quant.block_scales(raw, "Q4_1")
    curve = view.curves["d"]                # the series plotted (drawn as a per-pixel envelope)
    assert np.array_equal(curve.y, scales["d"])
    assert np.array_equal(curve.x, np.arange(scales["d"].size))
    assert np.array_equal(view.curves["m"].y, scales["m"])
    # independent of the core: a Q4_1 block starts with d then m, both little-endian f16
    blocks = gguf_tensor(TENSOR).data.reshape(-1, 20)
    assert np.array_equal(curve.y, blocks[:, 0:2].copy().view("<f2")[:, 0].astype(np.float32))
    assert np.array_equal(view.curves["m"].y,
                          blocks[:, 2:4].copy().view("<f2")[:, 0].astype(np.float32))
    # the heatmap is rows × blocks of the same numbers
    image = view.heat_image.image
    assert image.shape == (576, 48) and np.array_equal(image.reshape(-1), scales["d"])


@pytest.mark.parametrize("block", [0, 47, 48, 13_337, 27_647])
def test_block_microscope_values_equal_dequantize(qtbot, view, block):
    select(qtbot, view, TENSOR)
    view.open_block(block)
    t = gguf_tensor(TENSOR)
    expected = gguf_dequantized(TENSOR).reshape(-1)[block * 32:(block + 1) * 32]
    model = view.microscope.values_model
    assert model.rowCount() == 32
    shown = np.array([np.float32(model.index(i, 4).data()) for i in range(32)])
    assert np.array_equal(shown, expected)
    assert np.array_equal(shown, quant.dequantize(view.session.weights.raw(TENSOR), "Q4_1")
                          [block * 32:(block + 1) * 32])
    # the hex cells are the block's bytes in the file
    raw = t.data.reshape(-1, 20)[block]
    assert np.array_equal(view.microscope.hex.raw, raw)
    # low nibbles are elements 0-15, high nibbles 16-31
    qs = raw[4:20]
    grid = view.microscope.nibbles.layout_
    assert np.array_equal(grid.lo, qs & 15) and np.array_equal(grid.lo_element, np.arange(16))
    assert np.array_equal(grid.hi, qs >> 4) and np.array_equal(grid.hi_element, np.arange(16, 32))
    # the formula column puts this element's numbers into d · q + m
    d = np.float32(raw[0:2].view("<f2")[0])
    m = np.float32(raw[2:4].view("<f2")[0])
    q = int(qs[3] & 15)
    terms = {"d": str(d), "q": str(q), "m": str(m) if m >= 0 else f"({str(m)})"}
    assert model.index(3, 3).data() == fill_formula("d · q + m", terms)
    assert np.float32(d * np.float32(q) + m) == shown[3]


def test_click_on_heatmap_opens_that_block(qtbot, view):
    select(qtbot, view, TENSOR)
    view.resize(1400, 900)
    view.show()
    qtbot.waitExposed(view)
    vb = view.heatmap.getPlotItem().vb
    row, col = 200, 31
    qtbot.wait(50)                                      # let the first layout and auto-range settle
    vb.setRange(xRange=(24, 40), yRange=(195, 205), padding=0)    # rows many pixels tall
    qtbot.wait(50)
    pos = view.heatmap.mapFromScene(vb.mapViewToScene(QPointF(col + 0.5, row + 0.5)))
    QTest.mouseClick(view.heatmap.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    qtbot.waitUntil(lambda: view.block == row * 48 + col, timeout=3000)
    assert view.microscope.info.index == row * 48 + col


def test_requantize_errors_match_gguf_py(qtbot, view):
    select(qtbot, view, TENSOR)
    view.requant.first_row.setValue(10)
    view.requant.n_rows.setValue(8)
    with qtbot.waitSignal(view.requant.runner.finished, timeout=30000):
        view.requant.run()
    x = gguf_dequantized(TENSOR)[10:18]
    rows = {r[0]: r for r in view.requant.result.rows}
    assert list(rows) == ["Q8_0", "Q4_0", "Q4_1", "Q5_0"]
    for fmt, row in rows.items():
        qt = gguf.GGMLQuantizationType[fmt]
        err = gguf.quants.dequantize(gguf.quants.quantize(x, qt), qt) - x
        assert row[2] == pytest.approx(np.sqrt(np.mean(err.astype(np.float64) ** 2)), rel=1e-12)
        assert row[3] == np.abs(err).max()
        assert view.requant.result.counts[fmt].sum() == x.size
    assert rows["Q8_0"][1] == 8.5 and rows["Q4_0"][1] == 4.5


def test_demo_tensor_without_a_file(qtbot):
    session = Session()
    view = QuantView(session)
    qtbot.addWidget(view, before_close_func=lambda w: stop(qtbot, w))
    qtbot.waitUntil(lambda: view.result is not None, timeout=10000)
    assert view.source.name == "demo" and view.source.dtype == "Q4_0"
    expected = gguf.quants.quantize(demo_matrix(), gguf.GGMLQuantizationType.Q4_0)
    assert np.array_equal(view.source.raw.reshape(-1), expected.reshape(-1))
    d = expected.reshape(-1, 18)[:, 0:2].copy().view("<f2")[:, 0].astype(np.float32)
    assert np.array_equal(view.curves["d"].y, d)
    view.open_block(5)
    shown = [np.float32(view.microscope.values_model.index(i, 4).data()) for i in range(32)]
    deq = gguf.quants.dequantize(expected, gguf.GGMLQuantizationType.Q4_0).reshape(-1)
    assert np.array_equal(shown, deq[5 * 32:6 * 32])
    qtbot.waitUntil(lambda: view.requant.result is not None, timeout=20000)
    assert view.requant.result.n_values == demo_matrix()[:64].size


def test_non_quantized_tensor_has_no_scales(qtbot, view):
    view.session.select_tensor("blk.0.attn_norm.weight")
    assert "not block-quantized" in view.header.text()
    assert not view.curve_items and view.open_block(0) is None


def random_blocks(dtype: str, n_blocks: int, rng) -> np.ndarray:
    """Random bytes for `n_blocks` blocks, with finite f16 scales where the format has them."""
    from forma_gui.core.quant_layout import BLOCK_FIELDS, field_offsets

    size = sum(f.nbytes for f in BLOCK_FIELDS[dtype])
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for f in BLOCK_FIELDS[dtype]:
        if f.kind == "f16":
            a, b = field_offsets(dtype)[f.name]
            scales = rng.uniform(0.001, 0.1, n_blocks).astype("<f2")
            raw[:, a:b] = scales.view(np.uint8).reshape(-1, 2)
    return raw


@pytest.fixture
def k_view(qtbot, tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "k.gguf"
    w = gguf.GGUFWriter(path, "test")
    for name, dtype, rows, cols in (("k4", "Q4_K", 6, 512), ("q5", "Q5_0", 4, 64)):
        bs, ts = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[dtype]]
        raw = random_blocks(dtype, rows * cols // bs, rng).reshape(rows, cols // bs * ts)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType[dtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    session = Session()
    session.set_weights(forma_gui.open_weights(path))
    v = QuantView(session)
    qtbot.addWidget(v, before_close_func=lambda w: stop(qtbot, w))
    yield v
    session.weights.close()


def test_k_quant_sub_block_scales_and_microscope(qtbot, k_view):
    select(qtbot, k_view, "k4")
    raw = k_view.session.weights.raw("k4")
    scales = quant.block_scales(raw, "Q4_K")
    curves = {k: curve.y for k, curve in k_view.curves.items()}
    assert set(curves) == {"d", "dmin", "sub-block scales", "sub-block mins"}
    assert np.array_equal(curves["d"], scales["d"])
    assert np.array_equal(curves["dmin"], scales["dmin"])
    assert np.array_equal(curves["sub-block scales"],
                          (scales["d"][:, None] * scales["scales"].astype(np.float32)).reshape(-1))
    assert k_view.heat_image.image.shape == (6, 2)
    k_view.open_block(5)
    block = raw.reshape(-1, 144)[5]
    expected = gguf.quants.dequantize(block[None], gguf.GGMLQuantizationType.Q4_K).reshape(-1)
    model = k_view.microscope.values_model
    shown = np.array([np.float32(model.index(i, 4).data()) for i in range(model.rowCount())])
    assert shown.size == 256 and np.array_equal(shown, expected)


def test_q5_nibbles_and_high_bits(qtbot, k_view):
    select(qtbot, k_view, "q5")
    k_view.open_block(3)
    block = k_view.session.weights.raw("q5").reshape(-1, 22)[3]
    qh = int.from_bytes(block[2:6].tobytes(), "little")
    grid = k_view.microscope.nibbles.layout_
    assert np.array_equal(grid.lo, block[6:22] & 15) and np.array_equal(grid.hi, block[6:22] >> 4)
    assert [int(b) for b in grid.high_bits] == [(qh >> j) & 1 for j in range(32)]
    expected = gguf.quants.dequantize(block[None], gguf.GGMLQuantizationType.Q5_0).reshape(-1)
    model = k_view.microscope.values_model
    assert [np.float32(model.index(i, 4).data()) for i in range(32)] == list(expected)


def test_click_on_scale_plot_and_exports(qtbot, view, tmp_path):
    import pyqtgraph.exporters as exporters

    select(qtbot, view, TENSOR)
    view.resize(1400, 900)
    view.show()
    qtbot.waitExposed(view)
    vb = view.scale_plot.getPlotItem().vb
    qtbot.wait(50)
    vb.setXRange(1000, 1100, padding=0)
    qtbot.wait(50)
    y = float(view.curves["d"].y[1042])
    pos = view.scale_plot.mapFromScene(vb.mapViewToScene(QPointF(1042, y)))
    QTest.mouseClick(view.scale_plot.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    qtbot.waitUntil(lambda: view.block == 1042, timeout=3000)
    # pyqtgraph's CSV export holds what is drawn: zoomed in, every block's scale
    path = tmp_path / "scales.csv"
    exporters.CSVExporter(view.scale_plot.getPlotItem()).export(str(path))
    rows = np.loadtxt(path, delimiter=",", skiprows=1)
    scales = quant.block_scales(view.session.weights.raw(TENSOR), "Q4_1")["d"]
    x = rows[:, 0].astype(int)
    assert x[0] <= 1000 and x[-1] >= 1100 and np.array_equal(x, np.arange(x[0], x[-1] + 1))
    assert np.allclose(rows[:, 1], scales[x], rtol=1e-6)
    exporters.ImageExporter(view.heatmap.getPlotItem()).export(str(tmp_path / "heat.png"))
    assert (tmp_path / "heat.png").stat().st_size > 1000


def test_block_values_copy_as_tsv(qtbot, view):
    from PySide6.QtGui import QGuiApplication, QKeySequence

    select(qtbot, view, TENSOR)
    view.open_block(9)
    table = view.microscope.values_table
    table.selectRow(4)
    QTest.keySequence(table, QKeySequence(QKeySequence.StandardKey.Copy))
    header, row = QGuiApplication.clipboard().text().splitlines()
    assert header.split("\t") == ["element", "tensor index", "q", "formula", "value"]
    assert row.split("\t")[4] == view.microscope.values_model.index(4, 4).data()


def test_event_loop_stays_responsive_for_the_largest_scale_plot(qtbot, view):
    """884,736 block scales of token_embd: read in the worker, drawn as a per-pixel envelope.

    The view is not shown: this measures the work the view does on the GUI thread, not the
    machine's painting speed.
    """
    import time

    from PySide6.QtCore import QCoreApplication, QEvent, QTimer

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
    timer.start()
    with qtbot.waitSignal(view.scales_ready, timeout=60000):
        view.session.select_tensor("token_embd.weight")
    vb = view.scale_plot.getPlotItem().vb
    for lo in (0, 400_000, 800_000):                      # zooming re-draws the envelope
        vb.setXRange(lo, lo + 50_000, padding=0)
        qtbot.wait(20)
    timer.stop()
    curve = view.curves["d"]
    assert curve.y.size == 49152 * 18 and curve.item.yData.size < 10_000
    assert view.heat_image.image.shape == (2048, 18)            # 24 rows per pixel row, max
    assert max(gaps) < 0.1, f"the event loop stalled for {max(gaps) * 1000:.0f} ms"


def test_models_pass_qt_model_tester(qtbot, qtmodeltester, view):
    select(qtbot, view, TENSOR)
    view.open_block(77)
    qtmodeltester.check(view.microscope.values_model)
    with qtbot.waitSignal(view.requant.runner.finished, timeout=30000):
        view.requant.run()
    qtmodeltester.check(view.requant.model)


def test_a_vocabulary_only_gguf_shows_the_demo_and_says_why(qtbot):
    """A GGUF with no tensors is a weight file, but there is nothing to plot: the view works
    on the demo, as with no file, and names the file instead of asking to open one."""
    session = Session()
    weights = forma_gui.open_weights(data_file("gguf-vocab", "ggml-vocab-llama-spm.gguf"))
    session.set_weights(weights)
    view = QuantView(session)
    qtbot.addWidget(view, before_close_func=lambda w: stop(qtbot, w))
    qtbot.waitUntil(lambda: view.result is not None, timeout=10000)
    assert view.source.name == "demo" and "d" in view.curves
    assert "ggml-vocab-llama-spm.gguf holds no tensors" in view.header.text()
    session.set_weights(None)
    weights.close()
