"""`forma tokenize`: the segmentation table and JSON on the command line."""
from __future__ import annotations

import io
import json

from forma_gui._resources import default_tokenizer_path
from forma_gui.cli import main
from tests.conftest import data_file

GPT2 = str(default_tokenizer_path())


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["tokenize", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_table(capsys):
    code, out, _ = run(capsys, GPT2, "Hello world 😀")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["#", "id", "piece", "bytes", "span"]
    assert lines[1].split() == ["0", "15496", "Hello", "48", "65", "6c", "6c", "6f", "0:5"]
    assert lines[2].split() == ["1", "995", "Ġworld", "20", "77", "6f", "72", "6c", "64", "5:11"]
    assert lines[3].split()[-1] == "11:13*" and lines[4].split()[-1] == "12:13*"
    assert lines[-1].startswith("4 tokens, 13 characters")


def test_json(capsys):
    import tiktoken
    import tiktoken.load
    from tiktoken_ext.openai_public import r50k_pat_str

    text = "I'll go\n"
    code, out, _ = run(capsys, GPT2, text, "--json")
    records = json.loads(out)
    ranks = tiktoken.load.load_tiktoken_bpe(str(data_file("tiktoken", "r50k_base.tiktoken")))
    ref = tiktoken.Encoding("r50k", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={})
    assert code == 0
    assert [r["id"] for r in records] == ref.encode_ordinary(text)
    assert records[-1] == {"id": 198, "piece": "Ċ", "bytes": "0a", "start": 7, "end": 8,
                           "partial": False, "special": False}


def test_special_and_stdin(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("a<|endoftext|>"))
    code, out, _ = run(capsys, GPT2, "-", "--json", "--special")
    assert [(r["id"], r["special"]) for r in json.loads(out)] == [(64, False), (50256, True)]


def test_escaped_pieces_stay_on_one_line(capsys):
    code, out, _ = run(capsys, str(data_file("hf", "qwen3", "tokenizer.json")), "a\n\tb")
    assert code == 0 and len(out.splitlines()) == 1 + 3 + 1


def test_bad_file_is_exit_code_2(capsys, tmp_path):
    bad = tmp_path / "x.tiktoken"
    bad.write_bytes(b"IQ== 0\nIg== 1\nIw== 2\nJA== 3\nnot a line\n")
    code, _, err = run(capsys, str(bad), "x", "--pattern", "gpt2")
    assert code == 2 and "line 5" in err
