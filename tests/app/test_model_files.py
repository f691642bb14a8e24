"""Model files in the running app (issue 9): a file that shrinks or disappears while it is
open (memory-mapped) is reported through the window's one error handler, never a crash
(reading past the end of a truncated map is SIGBUS), and model files are never written."""
from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np
import pytest

from forma_gui.app.main_window import MainWindow
from tests.app._smol import gguf_dequantized, smol_path
from tests.app._window import shown_window


@pytest.fixture
def window(qtbot, tmp_path) -> MainWindow:
    return shown_window(qtbot, tmp_path, default=False)


@pytest.fixture
def smol_copy(tmp_path):
    path = tmp_path / "smol.gguf"
    shutil.copyfile(smol_path(), path)
    return path


def _open(qtbot, window, path) -> None:
    window.open_path(path)
    qtbot.waitUntil(lambda: window.session.weights is not None and not window.loading, timeout=30_000)
    assert window.last_error is None


def _show(qtbot, window, title: str):
    view = window.view(title)
    window.tabs.setCurrentIndex(window.tabs.indexOf(view.parentWidget()))
    qtbot.waitUntil(view.isVisible, timeout=5_000)
    return view


class Errors:
    """Every error the window shows, in order."""

    def __init__(self, window: MainWindow) -> None:
        self.window, self.seen = window, []
        window.session.error_raised.connect(lambda title, message: self.seen.append(message))

    def expect_one(self, qtbot, action, *words: str) -> str:
        """Do `action`; exactly one error follows, and it holds every word."""
        before = len(self.seen)
        action()
        qtbot.waitUntil(lambda: len(self.seen) > before, timeout=30_000)
        qtbot.wait(100)  # a second error would arrive meanwhile
        assert len(self.seen) == before + 1, self.seen[before:]
        message = self.seen[-1]
        assert message == self.window.last_error
        for word in words:
            assert word in message, message
        self.window._error_box.close()
        return message


def test_a_file_truncated_while_open_is_reported_in_every_view(qtbot, window, smol_copy):
    _open(qtbot, window, smol_copy)
    errors = Errors(window)
    layout = _show(qtbot, window, "Layout")
    qtbot.waitUntil(lambda: layout.result is not None, timeout=30_000)
    quant = _show(qtbot, window, "Quantization")
    qtbot.waitUntil(lambda: quant.result is not None, timeout=30_000)
    size = os.path.getsize(smol_copy)
    os.truncate(smol_copy, size // 2)
    shrank = (str(smol_copy), "shrank", f"at byte {size // 2}")

    # picking another tensor in the Layout view, then showing the (hidden) Quantization view
    layout = _show(qtbot, window, "Layout")
    errors.expect_one(qtbot, lambda: layout.picker.tensor_picked.emit("blk.1.attn_k.weight"), *shrank)
    errors.expect_one(qtbot, lambda: _show(qtbot, window, "Quantization"), *shrank)
    # the tensor it still shows: opening a block, requantizing rows
    errors.expect_one(qtbot, lambda: quant.open_block(3), *shrank)
    errors.expect_one(qtbot, quant.requant.run, *shrank)
    # re-striding the Layout view's tensor reads nothing: its values are already in memory
    layout = _show(qtbot, window, "Layout")
    layout.transpose()
    qtbot.waitUntil(lambda: layout.result is not None and not layout.runner.busy, timeout=30_000)
    # selecting another tensor in the Tensors view, then looking at it in each view
    tensors = _show(qtbot, window, "Tensors")
    proxy = tensors.tensorTable.model()
    row = next(r for r in range(proxy.rowCount()) if proxy.index(r, 0).data() == "blk.3.ffn_up.weight")
    tensors.tensorTable.setCurrentIndex(proxy.index(row, 0))
    assert window.session.tensor == "blk.3.ffn_up.weight"
    assert not errors.seen[4:]  # the hidden views read nothing yet
    errors.expect_one(qtbot, lambda: _show(qtbot, window, "Layout"), *shrank)
    errors.expect_one(qtbot, lambda: _show(qtbot, window, "Quantization"), *shrank)
    # a token's embedding row
    tokenize = _show(qtbot, window, "Tokenize")
    tokenize.editor.setPlainText("Hello world")
    qtbot.waitUntil(lambda: tokenize.text == "Hello world" and len(tokenize.tokens) > 0, timeout=30_000)
    qtbot.waitUntil(lambda: bool(tokenize._embedding), timeout=30_000)
    errors.expect_one(qtbot, lambda: tokenize.select_index(0), *shrank)
    # the window is alive and still tokenizes
    tokenize.editor.setPlainText("still alive")
    qtbot.waitUntil(lambda: tokenize.text == "still alive", timeout=30_000)
    assert [t.id for t in tokenize.tokens] == window.session.tokenizer.encode("still alive")


def test_a_file_deleted_while_open_still_reads(qtbot, window, smol_copy):
    """A deleted file's data lives on until it is closed: the views keep showing it."""
    _open(qtbot, window, smol_copy)
    errors = Errors(window)
    os.remove(smol_copy)
    layout = _show(qtbot, window, "Layout")
    window.session.select_tensor("blk.0.attn_q.weight")
    qtbot.waitUntil(lambda: layout.result is not None and layout.source.name == "blk.0.attn_q.weight",
                    timeout=30_000)
    assert np.array_equal(layout.result.image, gguf_dequantized("blk.0.attn_q.weight"))
    assert errors.seen == []


def _fingerprint(path) -> tuple[int, int, str]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest()


def _writable_maps(path) -> list[str]:
    """This process's mappings of `path` that allow writing (Linux)."""
    target = os.path.realpath(path)
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        return [line for line in maps if line.rstrip().endswith(target) and line.split()[1][1] == "w"]


def test_model_files_are_never_written(qtbot, window, smol_copy):
    before = _fingerprint(smol_copy)
    _open(qtbot, window, smol_copy)
    if os.path.exists("/proc/self/maps"):
        assert not _writable_maps(smol_copy)
    tensors = _show(qtbot, window, "Tensors")
    tensors.filter_edit.setText("blk.2")
    tensors.group_box.setChecked(True)
    tensors.planner.budget.setText("60 MB")
    layout = _show(qtbot, window, "Layout")
    qtbot.waitUntil(lambda: layout.result is not None, timeout=30_000)
    layout.transpose()
    layout.apply_slice("1:, ::3")
    qtbot.waitUntil(lambda: layout.result is not None and not layout.runner.busy, timeout=30_000)
    quant = _show(qtbot, window, "Quantization")
    qtbot.waitUntil(lambda: quant.result is not None, timeout=30_000)
    assert quant.open_block(5) is not None
    quant.requant.run()
    qtbot.waitUntil(lambda: quant.requant.result is not None, timeout=30_000)
    tokenize = _show(qtbot, window, "Tokenize")
    tokenize.editor.setPlainText("Model files are read, never written.")
    qtbot.waitUntil(lambda: len(tokenize.tokens) > 0 and tokenize.text.startswith("Model"), timeout=30_000)
    qtbot.waitUntil(lambda: bool(tokenize._embedding), timeout=30_000)
    tokenize.select_index(1)
    vocab = _show(qtbot, window, "Vocabulary")
    vocab.search.setText("read")
    vocab._run_search()
    qtbot.waitUntil(lambda: vocab.model.rows is not None, timeout=30_000)
    assert window.last_error is None
    window.open_default()  # closes the model file
    qtbot.waitUntil(lambda: window.session.weights is None and not window.loading, timeout=30_000)
    assert _fingerprint(smol_copy) == before


def test_a_shard_of_a_split_model_opens_the_whole_model(qtbot, window, tmp_path):
    """Opening the second of three shards shows every shard's tensors and the first shard's
    tokenizer; a tensor of the last shard opens in the Layout view."""
    from tests.formats.test_gguf_split import STORED, _vocab_kv, write_model

    paths = write_model(tmp_path / "split.gguf", _vocab_kv(), split_max_tensors=2)
    _open(qtbot, window, paths[1])
    weights = window.session.weights
    assert weights.files == [str(p) for p in paths]
    assert window.session.tokenizer is not None and window.session.tokenizer.vocab_size == 258
    tensors = _show(qtbot, window, "Tensors")
    proxy = tensors.tensorTable.model()
    assert sorted(proxy.index(r, 0).data() for r in range(proxy.rowCount())) == sorted(STORED)
    assert "3 files" in tensors.summary.text()
    layout = _show(qtbot, window, "Layout")
    assert weights.tensor("output.weight").file == str(paths[2])
    layout.picker.tensor_picked.emit("output.weight")
    qtbot.waitUntil(lambda: layout.result is not None and layout.result.name == "output.weight",
                    timeout=30_000)
    values = STORED["output.weight"][0]  # F32, written by gguf-py into the third shard
    assert (layout.result.stats["min"], layout.result.stats["max"]) == (values.min(), values.max())
    assert window.last_error is None


def test_a_folder_of_one_split_model_opens_weights_and_tokenizer(tmp_path):
    """Open Folder on a split model's shards: all tensors and the first shard's tokenizer."""
    from forma_gui.app.opening import load_path
    from tests.formats.test_gguf_split import STORED, _vocab_kv, write_model

    paths = write_model(tmp_path / "split.gguf", _vocab_kv(), split_max_tensors=2)
    opened = load_path(str(tmp_path))
    try:
        assert opened.weights.files == [str(p) for p in paths]
        assert sorted(t.name for t in opened.weights.tensors) == sorted(STORED)
        assert opened.tokenizer is not None and opened.tokenizer.vocab_size == 258
    finally:
        opened.weights.close()
