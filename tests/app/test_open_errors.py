"""Corrupt files in the running app (issue 9): each failed open shows one clear error naming the
file, the problem and the offset, and what was open before stays open and usable.

test_main_window covers a garbage .model with the default open, a missing .gguf and a pickle
as the very first file; here every kind of damage is opened over GPT-2, and over a model with
weights, and the previous state is exercised afterwards.
"""
from __future__ import annotations

import os
import pickle
import shutil

import numpy as np
import pytest

from forma_gui._resources import default_tokenizer_path
from forma_gui.app.main_window import MainWindow
from tests.app._smol import gguf_dequantized, smol_path
from tests.app._window import shown_window
from tests.conftest import data_file


@pytest.fixture
def window(qtbot, tmp_path) -> MainWindow:
    return shown_window(qtbot, tmp_path)


def _truncated_gguf(tmp_path):
    path = tmp_path / "truncated.gguf"
    path.write_bytes(smol_path().read_bytes()[:1_000_000])  # inside the vocabulary array
    return path, ("at byte ", "string array count")


def _bit_flipped_model(tmp_path):
    data = bytearray(data_file("sentencepiece", "botchan_en_bpe_1000.model").read_bytes())
    data[1] ^= 0x80  # the length of the first piece record
    path = tmp_path / "flipped.model"
    path.write_bytes(bytes(data))
    return path, ("at byte ", "expected wire type")


def _garbage_json(tmp_path):
    text = data_file("hf", "qwen3", "tokenizer.json").read_bytes()
    path = tmp_path / "tokenizer.json"
    path.write_bytes(text[:5000] + b"\x00{{garbage" + text[5000:])
    return path, ("at byte 5000", "invalid JSON")


def _pickle(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(pickle.dumps({"weight": [0.5] * 8}, protocol=2))
    return path, ("pickle", "safetensors")


def _empty(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    return path, ("empty",)


def _missing(tmp_path):
    return tmp_path / "gone.model", ("no such file",)


def _vocabulary_missing_its_tokens(tmp_path):
    """Weights that open, then a tokenizer that fails: the weights must be released too."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "no-tokens.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tensor("w", np.ones((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, ("tokenizer.ggml.tokens",)


DAMAGE = {"truncated GGUF": _truncated_gguf, "bit-flipped SentencePiece": _bit_flipped_model,
          "JSON with garbage": _garbage_json, "pickle": _pickle, "empty file": _empty,
          "missing path": _missing, "GGUF without tokens": _vocabulary_missing_its_tokens}


def _open_failing(qtbot, window, path) -> list[tuple[str, str]]:
    """Open `path`, wait for the failure; the errors raised meanwhile."""
    raised: list[tuple[str, str]] = []
    window.session.error_raised.connect(lambda title, message: raised.append((title, message)))
    window.last_error = None
    window.open_path(path)
    qtbot.waitUntil(lambda: window.last_error is not None and not window.loading, timeout=30_000)
    qtbot.wait(50)  # anything queued after the failure would show up here
    return raised


def _mapped(path) -> bool:
    """Whether this process still holds `path` open or mapped (Linux)."""
    if not os.path.isdir("/proc/self/fd"):
        return False
    target = os.path.realpath(path)
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        if any(line.rstrip().endswith(target) for line in maps):
            return True
    return any(os.path.realpath(f"/proc/self/fd/{fd}") == target for fd in os.listdir("/proc/self/fd")
               if os.path.exists(f"/proc/self/fd/{fd}"))


def _still_tokenizes(qtbot, window, tokenizer) -> None:
    view = window.view("Tokenize")
    text = "The previous tokenizer still works: 12345 ☕"
    view.editor.setPlainText(text)
    qtbot.waitUntil(lambda: view.text == text and view.tokenizer is tokenizer, timeout=30_000)
    assert [t.id for t in view.tokens] == tokenizer.encode(text)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_file_shows_one_error_and_keeps_gpt2(qtbot, window, tmp_path, damage):
    before = window.session.tokenizer
    path, words = DAMAGE[damage](tmp_path)
    raised = _open_failing(qtbot, window, path)
    assert len(raised) == 1, raised
    message = window.last_error
    assert raised[0][1] == message
    assert str(path) in message, message
    for word in words:
        assert word in message, message
    box = window._error_box
    assert box.isVisible() and box.text() == message
    assert "embedded GPT-2 vocabulary is still open" in box.informativeText()
    box.close()
    assert window.session.tokenizer is before
    assert window.session.path == str(default_tokenizer_path())
    assert window.session.weights is None
    if path.exists():
        assert not _mapped(path), "the failed open left the file open or mapped"
    _still_tokenizes(qtbot, window, before)


def test_a_damaged_file_keeps_an_open_model_and_its_weights(qtbot, window, tmp_path):
    """With a model open (tokenizer and weights), two failures in a row change nothing."""
    model = tmp_path / "smol.gguf"
    shutil.copyfile(smol_path(), model)
    window.open_path(model)
    qtbot.waitUntil(lambda: window.session.weights is not None and not window.loading, timeout=30_000)
    tokenizer, weights = window.session.tokenizer, window.session.weights
    for make in (_truncated_gguf, _pickle):
        path, words = make(tmp_path)
        raised = _open_failing(qtbot, window, path)
        assert len(raised) == 1 and all(w in window.last_error for w in words), raised
        window._error_box.close()
        assert window.session.tokenizer is tokenizer and window.session.weights is weights
        assert window.session.path == str(model)
        assert "smol.gguf is still open" in window._error_box.informativeText()
    # the weights still read: the token embedding matrix equals gguf-py's
    from forma_gui.app.tensor_support import dequantize_range, source_from_weights

    source = source_from_weights(weights, "token_embd.weight")
    steps = dequantize_range(source, 0, source.blocks_per_row * 4)
    with pytest.raises(StopIteration) as done:
        while True:
            next(steps)
    expected = gguf_dequantized("token_embd.weight")[:4].reshape(-1)
    assert np.array_equal(done.value.value, expected)
    _still_tokenizes(qtbot, window, tokenizer)
