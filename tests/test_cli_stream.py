"""`forma stream`: the trace table on the command line."""
from __future__ import annotations

import pytest

import forma_gui
from forma_gui.cli import main
from tests.core.test_stream import SAMPLE, TiktokenGpt2


@pytest.fixture(scope="module")
def gpt2() -> TiktokenGpt2:
    return TiktokenGpt2()


@pytest.fixture
def stub_loader(monkeypatch, gpt2):
    monkeypatch.setattr(forma_gui, "load_tokenizer", lambda path, **kw: gpt2)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["stream", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_prints_one_row_per_token_and_the_flush(capsys, stub_loader, gpt2):
    code, out, _ = run(capsys, "vocab.json", SAMPLE)
    ids = gpt2.encode(SAMPLE)
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["step", "token", "bytes", "buffer", "emitted", "naive"]
    assert [line.split()[0] for line in lines[2:2 + len(ids) + 1]] == [*map(str, range(len(ids))), "end"]
    assert [int(line.split()[1]) for line in lines[2:2 + len(ids)]] == ids
    assert f'buffered: "{gpt2.decode(ids)}"' in lines
    assert f'naive:    "{"".join(gpt2.token_bytes(i).decode("utf-8", "replace") for i in ids)}"' in lines


def test_ids(capsys, stub_loader, gpt2):
    ids = gpt2.encode("日本語")
    code, out, _ = run(capsys, "vocab.json", "--ids", ", ".join(map(str, ids)))
    assert code == 0 and 'buffered: "日本語"' in out.splitlines()


def test_stop_strings(capsys, stub_loader):
    code, out, _ = run(capsys, "vocab.json", "Hi\nUser: more", "--stop", r"\nUser:", "--stop", "zz")
    assert code == 0
    assert "stop buffer" in out.splitlines()[0]
    assert 'stopped:  at step' in out and 'on "\\nUser:", character 2; output "Hi"' in out


@pytest.mark.parametrize("argv, message", [
    (["vocab.json"], "give TEXT or --ids"),
    (["vocab.json", "x", "--ids", "1"], "give TEXT or --ids"),
    (["vocab.json", "--ids", "1, two"], "not a token id: 'two'"),
    (["vocab.json", "--ids", "99999999"], "out of range"),
])
def test_bad_input(capsys, stub_loader, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_bad_file(capsys, tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    code, _, err = run(capsys, str(path), "x")
    assert code == 2 and "empty" in err
