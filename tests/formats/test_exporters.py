"""A byte-level BPE trained on botchan.txt, exported, encodes identically in HF tokenizers,
tiktoken and forma_gui (acceptance 2 of issue 7)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import forma_gui
from forma_gui.core.bpe import pattern_names, pattern_regex, train_bytelevel
from forma_gui.core.byte_map import bytes_to_unicode_str
from forma_gui.core.patterns import get_pattern
from forma_gui.formats.bpe_export import FILES, MERGES_HEADER, export_all
from tests.conftest import MAX_EXAMPLES, data_file

tiktoken = pytest.importorskip("tiktoken")
tokenizers = pytest.importorskip("tokenizers")
from tiktoken.load import load_tiktoken_bpe  # noqa: E402

MERGES = 500
# letters, digits, punctuation, runs of spaces and newlines, multi-byte characters
MIXED = st.lists(st.sampled_from(list("theandof ing.,'s\n\t 0123456789éö€中🙂") + ["  ", "\r\n"]),
                 max_size=60).map("".join)
ANY_TEXT = st.text(max_size=40)


@pytest.fixture(scope="module")
def corpus() -> str:
    return data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def exported(corpus, tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    training = train_bytelevel(corpus, MERGES)
    export_all(training, folder)
    return training, folder


@pytest.fixture(scope="module")
def encoders(exported):
    """name -> encode(text) -> ids, for every file and every library."""
    training, folder = exported
    tik = tiktoken.Encoding("trained", pat_str=pattern_regex("gpt2"),
                            mergeable_ranks=load_tiktoken_bpe(str(folder / "ranks.tiktoken")),
                            special_tokens={})
    hf = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    hf_files = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(
        str(folder / "vocab.json"), str(folder / "merges.txt")))
    hf_files.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    ours = {
        "forma tokenizer.json": forma_gui.load_tokenizer(folder / "tokenizer.json"),
        "forma vocab.json": forma_gui.load_tokenizer(folder / "vocab.json"),
        "forma ranks.tiktoken": forma_gui.load_tokenizer(folder / "ranks.tiktoken",
                                                         pattern=training.pattern),
        "forma folder": forma_gui.load_tokenizer(folder),
    }
    table = {"tiktoken": tik.encode_ordinary,
             "hf tokenizer.json": lambda s: hf.encode(s).ids,
             "hf vocab.json+merges.txt": lambda s: hf_files.encode(s).ids}
    table.update({name: tok.encode for name, tok in ours.items()})
    return table


def _all_ids(encoders, text: str) -> dict[str, list[int]]:
    return {name: encode(text) for name, encode in encoders.items()}


def _assert_same(encoders, text: str) -> None:
    ids = _all_ids(encoders, text)
    expected = ids["tiktoken"]
    assert {name: got for name, got in ids.items() if got != expected} == {}, text


def test_files_are_written(exported):
    training, folder = exported
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0] == MERGES_HEADER and len(lines) == 1 + MERGES
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    assert len(vocab) == 256 + MERGES and vocab["Ġ"] == 32 and vocab["!"] == 33
    assert (folder / "ranks.tiktoken").read_text().splitlines()[256] == "IHQ= 256"  # " t"


def test_same_ids_on_the_corpus(encoders, corpus):
    _assert_same(encoders, corpus)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.one_of(MIXED, ANY_TEXT))
def test_same_ids_on_any_text(encoders, text):
    _assert_same(encoders, text)


def test_the_trained_tokenizer_compresses_and_round_trips(exported, corpus):
    training, folder = exported
    tok = forma_gui.load_tokenizer(folder / "tokenizer.json")
    ids = tok.encode(corpus)
    assert len(ids) < len(corpus.encode("utf-8")) / 2
    assert tok.decode(ids) == corpus
    assert tok.vocab_size == training.vocab_size


@pytest.mark.parametrize("pattern", pattern_names())
def test_tokenizer_json_pre_tokenizes_like_the_pattern(pattern, tmp_path):
    # cl100k's tiktoken form has `\p{N}{1,3}+`, which HF's Oniguruma reads as a repetition
    # (a whole number in one piece): the export must store a form HF reads as intended.
    export_all(train_bytelevel("low lower newest", 3, pattern=pattern), tmp_path)
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    compiled = get_pattern(pattern)
    for text in PRE_TOKENIZER_TEXTS:
        expected = [bytes_to_unicode_str(m.encode("utf-8")) for m in compiled.findall(text)]
        assert [p for p, _ in hf.pre_tokenizer.pre_tokenize_str(text)] == expected, text


PRE_TOKENIZER_TEXTS = ("In 1234567 days, 12345678901 yen.", "Hello\n\n  world's 42!\r\n",
                       "WE'LL it's  \t x\n", "中文🙂 ÖL 3.14159 ")
