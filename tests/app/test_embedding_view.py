"""Tokens meet weights: the selected token's embedding row, checked against dequantize."""
from __future__ import annotations

import numpy as np
import pytest

import forma_gui
from forma_gui.app.embedding_view import EmbeddingPanel
from forma_gui.app.state import Session
from tests.app._smol import gguf_tensor, smol_path as _smol_path
from tests.conftest import data_file


@pytest.fixture(scope="module")
def smol_path():
    return _smol_path()


@pytest.fixture(scope="module")
def embeddings(smol_path):
    with forma_gui.open_weights(smol_path) as w:
        return w.dequantize("token_embd.weight")


@pytest.mark.parametrize("token_id", [0, 1, 2, 12_345, 49_151])
def test_row_equals_dequantized_matrix_row(qtbot, smol_path, embeddings, token_id):
    session = Session()
    session.set_weights(forma_gui.open_weights(smol_path))
    panel = EmbeddingPanel(session)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.row_shown, timeout=5000):
        session.select_token(token_id)
    row = panel.row
    assert np.array_equal(row.values, embeddings[token_id])
    x, y = panel.curve.getData()
    assert np.array_equal(y, embeddings[token_id]) and np.array_equal(x, np.arange(576))
    # the blocks the row is made of: 576 / 32 = 18 Q8_0 blocks of 34 bytes
    assert (row.first_block, row.n_blocks) == (token_id * 18, 18)
    t = session.weights.tensor("token_embd.weight")
    assert row.byte_range == (t.offset + token_id * 18 * 34, t.offset + (token_id + 1) * 18 * 34)
    blocks = np.asarray(gguf_tensor("token_embd.weight").data)[token_id].reshape(18, 34)
    d = blocks[:, :2].copy().view("<f2")[:, 0].astype(np.float32)       # Q8_0: d first, f16
    assert np.array_equal(row.scales["d"], d)
    assert f"blocks {token_id * 18:,}–{token_id * 18 + 17:,}" in panel.blocks_label.text()
    session.set_weights(None)


def test_out_of_range_and_no_weights(qtbot, smol_path):
    session = Session()
    panel = EmbeddingPanel(session)
    qtbot.addWidget(panel)
    session.select_token(3)
    assert panel.row is None and "Open a weight file" in panel.title.text()
    session.set_weights(forma_gui.open_weights(smol_path))
    assert panel.row is not None and panel.row.token_id == 3   # the last selected token
    session.select_token(49_152)
    assert panel.row is None and "outside" in panel.title.text()
    session.set_weights(None)


def test_selecting_a_token_in_the_tokenize_view(qtbot, smol_path, embeddings):
    from forma_gui.app.tokenize_view import TokenizeView

    session = Session()
    session.set_tokenizer(forma_gui.load_tokenizer(smol_path))
    session.set_weights(forma_gui.open_weights(smol_path))
    view = TokenizeView(session)
    qtbot.addWidget(view)
    view.editor.setPlainText("Hello world, tokens meet weights")
    expected_ids = session.tokenizer.encode("Hello world, tokens meet weights")
    qtbot.waitUntil(lambda: [t.id for t in view.tokens] == expected_ids, timeout=10000)
    view.select_index(1)                    # " world": what a click on the token does
    token_id = view.tokens[1].id
    qtbot.waitUntil(lambda: view.findChild(EmbeddingPanel, "embeddingPanel") is not None,
                    timeout=5000)
    panel = view.findChild(EmbeddingPanel, "embeddingPanel")
    qtbot.waitUntil(lambda: panel.row is not None and panel.row.token_id == token_id, timeout=5000)
    assert np.array_equal(panel.row.values, embeddings[token_id])
    assert np.array_equal(panel.curve.getData()[1], embeddings[token_id])


def test_safetensors_embed_tokens_in_f16(qtbot, tmp_path):
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(3)
    path = tmp_path / "model.safetensors"
    save_file({"model.embed_tokens.weight": rng.standard_normal((50, 24)).astype(np.float16),
               "model.norm.weight": np.ones(24, np.float32)}, str(path))
    expected = load_file(str(path))["model.embed_tokens.weight"].astype(np.float32)
    session = Session()
    session.set_weights(forma_gui.open_weights(path))
    panel = EmbeddingPanel(session)
    qtbot.addWidget(panel)
    session.select_token(17)
    assert panel.row.name == "model.embed_tokens.weight"
    assert np.array_equal(panel.row.values, expected[17]) and panel.row.scales == {}
    t = session.weights.tensor("model.embed_tokens.weight")
    assert panel.row.byte_range == (t.offset + 17 * 48, t.offset + 18 * 48)


def test_plots_are_hidden_while_there_is_no_embedding_to_plot(qtbot, smol_path):
    session = Session()
    vocab_only = forma_gui.open_weights(data_file("gguf-vocab", "ggml-vocab-llama-spm.gguf"))
    session.set_weights(vocab_only)
    panel = EmbeddingPanel(session)
    qtbot.addWidget(panel)
    assert "holds no tensors (a vocabulary only)" in panel.title.text()
    assert panel.plot.isHidden() and panel.scale_plot.isHidden()
    session.set_weights(forma_gui.open_weights(smol_path))
    assert not panel.plot.isHidden() and not panel.scale_plot.isHidden()
    session.set_weights(None)
    assert panel.plot.isHidden()


def test_weights_without_an_embedding_tensor_say_which_names_were_looked_for(qtbot, tmp_path):
    """Weights that hold tensors, none of them a token-embedding table, name the tensors the
    panel looks for (a vocabulary-only file says it holds no tensors at all)."""
    from safetensors.numpy import save_file

    path = tmp_path / "norms.safetensors"
    save_file({"model.norm.weight": np.ones(8, dtype=np.float32)}, str(path))
    session = Session()
    session.set_weights(forma_gui.open_weights(path))
    panel = EmbeddingPanel(session)
    qtbot.addWidget(panel)
    assert "no token-embedding tensor" in panel.title.text() and "embed_tokens.weight" in panel.title.text()
    assert panel.plot.isHidden()
