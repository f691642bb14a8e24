"""`forma train`: the word-dictionary trace and byte-level training to files."""
from __future__ import annotations

import pytest

from forma_gui.cli import main
from tests.conftest import data_file

PAPER_SPEC = "l o w </w>:5,l o w e r </w>:2,n e w e s t </w>:6,w i d e s t </w>:3"
# Sennrich et al. (2016): the ten merges of the example, and the words after them
PAPER_SYMBOLS = "es est est</w> lo low ne new newest</w> low</w> wi".split()


def test_words_trace_one_line_per_merge(capsys):
    assert main(["train", "--words", PAPER_SPEC, "--merges", "10"]) == 0
    out = capsys.readouterr().out
    trace, words = out.split("\n\n")
    lines = trace.splitlines()
    assert len(lines) == 10
    assert [line.split(" -> ")[1].split()[0] for line in lines] == PAPER_SYMBOLS
    assert lines[0].startswith("1  e + s -> es  (9)")
    assert "tie" in lines[0] and "tie" not in lines[2]
    assert words.split() == ["low</w>:5", "low", "e", "r", "</w>:2", "newest</w>:6",
                             "wi", "d", "est</w>:3"]


def test_words_stops_when_no_pair_is_left(capsys):
    assert main(["train", "--words", "a b:2", "--merges", "5"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].startswith("1  a + b -> ab  (2)")
    assert "stopped after 1 merges" in captured.err


def test_corpus_writes_the_four_files(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    text = data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")[:30000]
    corpus.write_text(text, encoding="utf-8")
    out = tmp_path / "tok"
    assert main(["train", str(corpus), "--merges", "40", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "40/40 merges" in captured.err
    assert sorted(p.name for p in out.iterdir()) == [
        "merges.txt", "ranks.tiktoken", "tokenizer.json", "vocab.json"]
    tokenizers = pytest.importorskip("tokenizers")
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    from forma_gui.core.bpe import pattern_regex

    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    tik = tiktoken.Encoding("t", pat_str=pattern_regex("gpt2"), special_tokens={},
                            mergeable_ranks=load_tiktoken_bpe(str(out / "ranks.tiktoken")))
    assert hf.encode(text).ids == tik.encode_ordinary(text)
    assert len(tik.encode_ordinary(text)) < len(text.encode("utf-8"))


@pytest.mark.parametrize("argv", [
    ["--merges", "3"],                                    # neither corpus nor --words
    ["c.txt", "--words", "a b:1", "--merges", "3"],       # both
    ["c.txt", "--merges", "3"],                           # no --out
    ["c.txt", "--merges", "3", "--out", "o", "--pattern", "nope"],
    ["--words", "a b", "--merges", "3"],                  # no frequency
    ["--words", "a b:1", "--merges", "-1"],
])
def test_usage_errors(argv, capsys):
    assert main(["train", *argv]) == 2
    assert capsys.readouterr().err.startswith("forma train: ")


def test_unreadable_corpus_is_a_format_error(tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9 au lait")
    assert main(["train", str(bad), "--merges", "3", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "latin1.txt" in err and "at byte 3" in err and "UTF-8" in err
