"""`forma stream`: the trace table on the command line, on the embedded GPT-2 vocabulary."""
from __future__ import annotations

import pytest

from forma_gui._resources import default_tokenizer_path
from forma_gui.cli import main
from tests.core.test_stream import SAMPLE, r50k

GPT2 = str(default_tokenizer_path())


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["stream", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_prints_one_row_per_token_and_the_flush(capsys):
    code, out, _ = run(capsys, GPT2, SAMPLE)
    ids = r50k().encode_ordinary(SAMPLE)
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["step", "token", "bytes", "buffer", "emitted", "naive"]
    rows = lines[2:2 + len(ids) + 1]
    assert [line.split()[0] for line in rows] == [*map(str, range(len(ids))), "end"]
    assert [int(line.split()[1]) for line in rows[:-1]] == ids
    naive = "".join(r50k().decode_single_token_bytes(i).decode("utf-8", "replace") for i in ids)
    assert f'buffered: "{SAMPLE}"' in lines
    assert f'naive:    "{naive}"' in lines


def test_ids(capsys):
    ids = r50k().encode_ordinary("日本語")
    code, out, _ = run(capsys, GPT2, "--ids", ", ".join(map(str, ids)))
    assert code == 0 and 'buffered: "日本語"' in out.splitlines()


def test_stop_strings(capsys):
    code, out, _ = run(capsys, GPT2, "Hi\nUser: more", "--stop", r"\nUser:", "--stop", "zz")
    assert code == 0
    assert "stop buffer" in out.splitlines()[0]
    assert 'stopped:  at step' in out and 'on "\\nUser:", character 2; output "Hi"' in out


@pytest.mark.parametrize("argv, message", [
    ([GPT2], "give TEXT or --ids"),
    ([GPT2, "x", "--ids", "1"], "give TEXT or --ids"),
    ([GPT2, "--ids", "1, two"], "not a token id: 'two'"),
    ([GPT2, "--ids", "50257"], "out of range"),
])
def test_bad_input(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_bad_file(capsys, tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    code, _, err = run(capsys, str(path), "x")
    assert code == 2 and "empty" in err
