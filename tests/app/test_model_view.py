"""The Model view on SmolLM2: metadata tree, tensor table, grouping, totals, planner, copy."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QItemSelectionModel, QModelIndex, Qt
from PySide6.QtGui import QGuiApplication, QKeySequence
from PySide6.QtTest import QTest

import forma_gui
from forma_gui.app.model_view import (FETCH_CHUNK, ModelView, block_group, display_string,
                                      parse_budget)
from forma_gui.app.state import Session
from tests.app._smol import smol_path as _smol_path, smol_reader
from tests.conftest import data_file


@pytest.fixture(scope="module")
def smol_path():
    return _smol_path()


@pytest.fixture(scope="module")
def reader():
    return smol_reader()


@pytest.fixture
def view(qtbot, smol_path):
    session = Session()
    session.set_weights(forma_gui.open_weights(smol_path))
    v = ModelView(session)
    qtbot.addWidget(v)
    yield v
    session.weights.close()  # without a signal: the views are being torn down


def find_row(model, text, parent=QModelIndex()):
    for r in range(model.rowCount(parent)):
        if model.index(r, 0, parent).data() == text:
            return model.index(r, 0, parent)
    raise AssertionError(f"{text!r} not found")


# ------------------------------------------------------------------ metadata

def test_vocabulary_array_is_summarised_and_fetched_lazily(view, reader):
    model = view.metadata_model
    tokenizer = find_row(model, "tokenizer")
    tokens = find_row(model, "ggml.tokens", tokenizer)
    field = reader.fields["tokenizer.ggml.tokens"]
    expected = [str(bytes(field.parts[i]), "utf-8", "surrogateescape") for i in field.data]
    assert len(expected) == 49152
    assert model.index(tokens.row(), 2, tokenizer).data().startswith("[49,152] ")
    assert model.hasChildren(tokens) and model.rowCount(tokens) == 0      # nothing built yet
    assert model.canFetchMore(tokens)
    model.fetchMore(tokens)
    assert model.rowCount(tokens) == FETCH_CHUNK
    view.metadataView.expand(tokens)
    for i in (0, 1, 17, FETCH_CHUNK - 1):
        assert model.index(i, 2, tokens).data() == display_string(expected[i])
    while model.canFetchMore(tokens):
        model.fetchMore(tokens)
    assert model.rowCount(tokens) == 49152
    assert model.index(49151, 2, tokens).data() == display_string(expected[49151])


def test_scalar_metadata_values(view, reader):
    model = view.metadata_model
    llama = find_row(model, "llama")
    row = find_row(model, "context_length", llama)
    expected = str(reader.fields["llama.context_length"].contents())
    assert model.index(row.row(), 2, llama).data() == expected


# ------------------------------------------------------------------ tensor table

def test_tensor_table_matches_gguf_py(view, reader):
    proxy = view.tensorTable.model()
    assert proxy.rowCount() == len(reader.tensors) == 272
    by_name = {proxy.index(r, 0).data(): r for r in range(proxy.rowCount())}
    for t in reader.tensors:
        r = by_name[t.name]
        cells = [proxy.index(r, c).data() for c in range(7)]
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))
        assert cells[1] == "(" + ", ".join(map(str, shape)) + ")"
        assert cells[2] == t.tensor_type.name
        assert cells[3] == f"{int(t.n_elements):,}"
        assert cells[4] == f"{int(t.n_bytes):,}"
        assert float(cells[5]) == pytest.approx(8 * int(t.n_bytes) / int(t.n_elements), rel=1e-3)
        assert int(cells[6], 16) == int(t.data_offset)


def test_filter_and_sort(view):
    view.filter_edit.setText("ATTN_Q")
    proxy = view.tensorTable.model()
    names = [proxy.index(r, 0).data() for r in range(proxy.rowCount())]
    assert len(names) == 30 and all("attn_q" in n for n in names)
    view.filter_edit.clear()
    view.tensorTable.sortByColumn(4, Qt.SortOrder.DescendingOrder)
    assert proxy.index(0, 0).data() == "token_embd.weight"


def test_group_by_block(view):
    assert block_group("blk.12.attn_q.weight") == "blk.12"
    assert block_group("output_norm.weight") == ""
    view.group_box.setChecked(True)
    tree = view.tensorTree.model()
    groups = [tree.index(r, 0).data() for r in range(tree.rowCount())]
    assert len(groups) == 31
    assert groups[0].startswith("(outside") and groups[1].startswith("blk.0 ")
    assert groups[-1].startswith("blk.29 ")
    blk3 = tree.index(4, 0)
    assert tree.rowCount(blk3) == 9
    view.filter_edit.setText("ffn_up")
    assert tree.rowCount() == 30 and all(tree.rowCount(tree.index(r, 0)) == 1 for r in range(30))


def test_selection_drives_the_session(qtbot, view):
    proxy = view.tensorTable.model()
    with qtbot.waitSignal(view.session.tensor_selected) as blocker:
        view.tensorTable.setCurrentIndex(proxy.index(5, 0))
    assert blocker.args == [proxy.index(5, 0).data()]
    view.session.select_tensor("blk.7.attn_v.weight")
    assert view.tensorTable.currentIndex().data() == "blk.7.attn_v.weight"
    view.group_box.setChecked(True)
    assert view.tensorTree.currentIndex().siblingAtColumn(0).data() == "blk.7.attn_v.weight"


def test_ctrl_c_copies_selected_rows_as_tsv(qtbot, view):
    table = view.tensorTable
    proxy = table.model()
    sel = table.selectionModel()
    flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
    sel.select(proxy.index(2, 0), flags)
    sel.select(proxy.index(0, 0), flags)
    QTest.keySequence(table, QKeySequence(QKeySequence.StandardKey.Copy))
    lines = QGuiApplication.clipboard().text().splitlines()
    assert lines[0].split("\t") == ["Name", "Shape", "Type", "Elements", "Bytes", "Bits/weight",
                                   "File offset"]
    names = [line.split("\t")[0] for line in lines[1:]]
    assert names == [proxy.index(0, 0).data(), proxy.index(2, 0).data()]
    assert lines[1].split("\t")[2] == "Q8_0"


# ------------------------------------------------------------------ totals and planner

def test_totals_by_type(view, reader):
    model = view.totals_model
    rows = {model.index(r, 0).data(): r for r in range(model.rowCount())}
    for dtype, n in (("Q4_1", 210), ("Q8_0", 1), ("F32", 61)):     # the data README's counts
        assert model.index(rows[dtype], 1).data() == str(n)
        assert n == sum(1 for t in reader.tensors if t.tensor_type.name == dtype)
    assert model.total == sum(int(t.n_bytes) for t in reader.tensors)


@pytest.mark.parametrize("text, expected", [("300 MB", 300 * 10**6), ("2 GiB", 2 * 2**30),
                                            ("1.5g", 15 * 10**8), ("512", 512), ("64 KiB", 65536)])
def test_parse_budget(text, expected):
    assert parse_budget(text) == expected


def test_parse_budget_rejects():
    with pytest.raises(ValueError):
        parse_budget("lots")


def test_planner_reports_a_choice_for_a_typed_budget(view, reader):
    n = sum(int(t.n_elements) for t in reader.tensors)
    embd = 49152 * 576
    int8 = sum(int(t.n_elements) // 32 * 34 for t in reader.tensors)       # Q8_0: 34 B per 32
    int4 = embd // 32 * 34 + (n - embd) // 32 * 18                        # Q4_0: 18 B per 32
    view.planner.budget.setText("2 GiB")
    assert "choice: <b>int8</b>" in view.planner.choice.text()
    assert view.planner.plan.total == int8
    view.planner.budget.setText("100 MB")                                  # int8 is ~143 MB
    assert "choice: <b>int4</b>" in view.planner.choice.text()
    plan = view.planner.plan
    assert plan.total == int4 and plan.fits
    parts = view.planner.parts_model
    rows = {parts.index(r, 0).data(): parts.index(r, 2).data() for r in range(parts.rowCount())}
    assert rows["token_embd.weight"] == "Q8_0" and rows["blk.3.attn_q.weight"] == "Q4_0"
    view.planner.budget.setText("1 MB")
    assert "does not fit" in view.planner.choice.text()
    view.planner.budget.setText("nonsense")
    assert "cannot read" in view.planner.choice.text()


def test_metadata_model_is_lazy_for_huge_and_nested_arrays(qtmodeltester):
    from forma_gui.app.model_view import MetadataModel

    vocab = [f"tok{i}" for i in range(262_144)]
    model = MetadataModel({"tokenizer.ggml.tokens": vocab, "x.nested": [[1, 2], ["a"]],
                           "x.scores": np.arange(5, dtype=np.float32)},
                          {"tokenizer.ggml.tokens": "ARRAY[STRING]"})
    tokens = model.index(0, 0, model.index(0, 0))
    assert model.index(0, 2, model.index(0, 0)).data().startswith("[262,144] ")
    assert model.rowCount(tokens) == 0 and model.canFetchMore(tokens)
    model.fetchMore(tokens)
    assert model.rowCount(tokens) == FETCH_CHUNK                    # 500 items, not 262,144
    nested = model.index(0, 0, model.index(1, 0))
    model.fetchMore(nested)
    inner = model.index(0, 0, nested)
    assert model.index(0, 2, nested).data() == "[2] 1, 2" and model.rowCount(inner) == 0
    model.fetchMore(inner)
    assert [model.index(r, 2, inner).data() for r in range(2)] == ["1", "2"]
    qtmodeltester.check(model)


def test_models_pass_qt_model_tester(qtmodeltester, view):
    view.planner.budget.setText("100 MB")
    view.group_box.setChecked(True)  # the tree is filled once shown
    assert view.tree_model.rowCount() == 31
    for model in (view.table_model, view.tree_model, view.totals_model,
                  view.planner.parts_model, view.tensorTable.model(), view.tensorTree.model()):
        qtmodeltester.check(model)


def test_a_vocabulary_only_gguf_says_so(qtbot):
    """No tensors: the summary and the planner say why they are empty (no dangling
    separator, no plan of zero parameters), and the metadata is still shown."""
    session = Session()
    weights = forma_gui.open_weights(data_file("gguf-vocab", "ggml-vocab-llama-spm.gguf"))
    session.set_weights(weights)
    view = ModelView(session)
    qtbot.addWidget(view)
    assert "no tensors" in view.summary.text() and not view.summary.text().endswith("· ")
    assert view.metadata_model.rowCount() > 0
    view.planner.budget.setText("1 GiB")
    assert "no tensors" in view.planner.choice.text()
    assert view.planner.plan is None
    session.set_weights(None)
    weights.close()
