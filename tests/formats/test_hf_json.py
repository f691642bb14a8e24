"""HuggingFace tokenizer.json (BPE + ByteLevel): ids equal the `tokenizers` library's."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

from forma_gui.errors import FormatError
from forma_gui.formats.hf_json import load_hf_tokenizer
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.corpus import CORPUS, TEXT


def _hf(path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def _hf_ids(hf, text: str) -> list[int]:
    return hf.encode(text, add_special_tokens=False).ids


@pytest.fixture(scope="module")
def qwen3():
    path = data_file("hf", "qwen3", "tokenizer.json")
    return load_tokenizer(path), _hf(path)


def _hf_split_ids(hf, text: str) -> list[int]:
    """HF with split_special_tokens: special added tokens are text, the others still match."""
    hf.encode_special_tokens = True
    try:
        return _hf_ids(hf, text)
    finally:
        hf.encode_special_tokens = False


def test_qwen3_corpus_equals_hf(qwen3):
    ours, hf = qwen3
    for text in CORPUS:
        assert ours.encode(text, special=True) == _hf_ids(hf, text), text
        assert ours.encode(text) == _hf_split_ids(hf, text), text


def test_qwen3_added_tokens_match_first(qwen3):
    ours, hf = qwen3
    text = "<|im_start|>system\nYou are<|im_end|>\n<|im_start|>user\n<tool_call>x</tool_call><|endoftext|>"
    assert ours.encode(text, special=True) == _hf_ids(hf, text)
    assert 151644 in ours.encode(text, special=True) and 151644 not in ours.encode(text)
    assert ours.token_type(151644) == "control" and ours.token_type(151657) == "user-defined"
    # <tool_call> is not special: HF matches it in every mode, and so do we
    assert ours.encode(text) == _hf_split_ids(hf, text) and 151657 in ours.encode(text)
    for token in ours.added_tokens:
        assert ours.encode(f"a{token.content}b") == _hf_split_ids(hf, f"a{token.content}b")


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=TEXT)
def test_qwen3_random_text_equals_hf(qwen3, text):
    ours, hf = qwen3
    assert ours.encode(text, special=True) == _hf_ids(hf, text)
    assert ours.encode(text) == _hf_split_ids(hf, text)


def test_qwen3_members(qwen3):
    ours, hf = qwen3
    assert ours.vocab_size == hf.get_vocab_size(with_added_tokens=True)
    assert ours.piece(151644) == "<|im_start|>"
    some = _hf_ids(hf, " hello world")
    assert [ours.piece(i) for i in some] == [hf.id_to_token(i) for i in some]
    assert ours.id_of("Ġhello") == hf.token_to_id("Ġhello")


def test_qwen3_nfc_normalizer(qwen3):
    ours, hf = qwen3
    decomposed = "Cafe\u0301 A\u030a"
    assert ours.encode(decomposed) == ours.encode("Café Å") == _hf_ids(hf, decomposed)


# ---- configurations written for the test, loaded by both libraries ---------------------------

@pytest.fixture(scope="module")
def gpt2_model():
    vocab = json.loads(data_file("gpt2", "encoder.json").read_text("utf-8"))
    merges = data_file("gpt2", "vocab.bpe").read_text("utf-8").split("\n")[1:-1]
    return vocab, merges


def _write(tmp_path, model, *, pre_tokenizer, normalizer=None, added=(), **model_extra):
    vocab, merges = model
    spec = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [dict({"single_word": False, "lstrip": False, "rstrip": False,
                               "normalized": False, "special": True}, **a) for a in added],
        "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": dict({"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                       "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                       "vocab": vocab, "merges": merges}, **model_extra),
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), "utf-8")
    return path


BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
FLAG_TEXTS = CORPUS + [
    "Hi <mask> there\t<mask>\t<mask>\u2000 a<mask> <mask>b <mask>",
    "<mask>, <mask>- \u25cc\u0330<mask>", "[X] and [x] ﬁx fix <|endoftext|>  ",
    "x<|endoftext|>y <mask><mask>", "  [X]  ", "ﬁxed", "xﬁx",
]
ADDED = [
    {"id": 50256, "content": "<|endoftext|>"},
    {"id": 50257, "content": "<mask>", "lstrip": True, "rstrip": True, "single_word": True, "special": False},
    {"id": 50258, "content": "[X]", "normalized": True, "special": False, "rstrip": True},
    {"id": 50259, "content": "ﬁx", "normalized": True, "special": False},
]


@pytest.mark.parametrize("config", [
    dict(pre_tokenizer=dict(BYTELEVEL, add_prefix_space=True), normalizer={"type": "NFKC"}, added=ADDED),
    dict(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        BYTELEVEL]}, normalizer={"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "NFC"}]},
        added=ADDED[:2], ignore_merges=True),
    dict(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated", "invert": False},
        dict(BYTELEVEL, use_regex=False)]}),
    dict(pre_tokenizer=dict(BYTELEVEL, use_regex=False), added=ADDED[1:2]),
], ids=["prefix-nfkc-flags", "digits-split-ignore-merges", "string-split", "no-regex"])
def test_configurations_equal_hf(tmp_path, gpt2_model, config):
    path = _write(tmp_path, gpt2_model, **config)
    ours, hf = load_hf_tokenizer(path), _hf(path)
    for text in FLAG_TEXTS:
        assert ours.encode(text, special=True) == _hf_ids(hf, text), text


def test_merges_as_lists_or_strings(tmp_path, gpt2_model):
    vocab, merges = gpt2_model
    a = load_hf_tokenizer(_write(tmp_path, (vocab, merges), pre_tokenizer=BYTELEVEL))
    b = load_hf_tokenizer(_write(tmp_path, (vocab, [m.split(" ") for m in merges]), pre_tokenizer=BYTELEVEL))
    text = "\n".join(CORPUS)
    assert a.encode(text) == b.encode(text)


def test_missing_bytes_are_dropped_or_unknown(tmp_path):
    small = ({"a": 0, "b": 1, "ab": 2, "<unk>": 3}, ["a b"])
    for extra in ({}, {"unk_token": "<unk>"}, {"unk_token": "<unk>", "fuse_unk": True}):
        path = _write(tmp_path, small, pre_tokenizer=BYTELEVEL, **extra)
        ours, hf = load_hf_tokenizer(path), _hf(path)
        for text in ("abc", "cab", "ccab", "a b", "xyz"):
            assert ours.encode(text) == _hf_ids(hf, text), (extra, text)


@pytest.mark.parametrize("edit, match, value", [
    (lambda s: s["model"].update(type="WordPiece"), "'WordPiece' is not supported", lambda s: s["model"]["type"]),
    (lambda s: s["model"].update(type="Unigram"), "'Unigram' is not supported", lambda s: s["model"]["type"]),
    (lambda s: s.update(pre_tokenizer={"type": "Metaspace"}), "'Metaspace' is not supported",
     lambda s: "Metaspace"),
    (lambda s: s.update(pre_tokenizer=None), "without a ByteLevel", lambda s: None),
    (lambda s: s.update(normalizer={"type": "Lowercase"}), "'Lowercase' is not supported", lambda s: "Lowercase"),
    (lambda s: s.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Removed"}, BYTELEVEL]}), "Removed",
     lambda s: s["pre_tokenizer"]["pretokenizers"][0]),
    (lambda s: s["model"].update(continuing_subword_prefix="##"), "continuing_subword_prefix", lambda s: "##"),
    (lambda s: s["model"]["merges"].append("a zzz"), r"model.merges\[3\]", lambda s: "a zzz"),
    (lambda s: s["added_tokens"].append({"content": 5}), r"added_tokens\[0\]", lambda s: {"content": 5}),
    (lambda s: s["model"]["vocab"].update(c=-1), r"model.vocab\['c'\]", lambda s: -1),
    (lambda s: s["model"]["vocab"].update(c=True), r"model.vocab\['c'\]", lambda s: True),
    (lambda s: s["model"]["vocab"].update(c=2.0), r"model.vocab\['c'\]", lambda s: 2.0),
    (lambda s: s["model"].update(merges=[["a", "b"], ["a", ["a"]]]), r"model.merges\[1\]", lambda s: ["a", ["a"]]),
    (lambda s: s["model"].update(merges=[["a", "b"], ["a"]]), r"model.merges\[1\]", lambda s: ["a"]),
    (lambda s: s["model"].update(merges=[["a", "b"], 5]), r"model.merges\[1\]", lambda s: 5),
    (lambda s: s.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(x"}, "behavior": "Isolated"}, BYTELEVEL]}), "regex",
     lambda s: s["pre_tokenizer"]),
    (lambda s: s["model"]["vocab"].update({"c\udc80": 9}), r"model.vocab\['c\\udc80'\]: a lone", lambda s: 9),
    (lambda s: s["added_tokens"].append({"id": 9, "content": "\ud800"}), r"added_tokens\[0\].*a lone",
     lambda s: {"id": 9, "content": "\ud800"}),
])
@pytest.mark.parametrize("indent", [None, 1])
def test_unsupported_or_bad_content_is_a_format_error(tmp_path, edit, match, value, indent):
    """Each names the file once, the JSON path, and the byte offset and line of the value at
    fault (with or without a BOM): the value decoded there is the one the edit put in."""
    small = ({"a": 0, "b": 1, "ab": 2, "Ġ": 3}, ["a b", "a a", "b b"])
    small = ({**small[0], "aa": 4, "bb": 5}, small[1])
    path = _write(tmp_path, small, pre_tokenizer=BYTELEVEL)
    spec = json.loads(path.read_text("utf-8"))
    edit(spec)
    for bom in (b"", b"\xef\xbb\xbf"):
        data = bom + json.dumps(spec, indent=indent).encode("utf-8")
        path.write_bytes(data)
        with pytest.raises(FormatError, match=match) as info:
            load_hf_tokenizer(path)
        error = info.value
        assert str(error).count(str(path)) == 1
        assert error.offset is not None and error.line == data.count(b"\n", 0, error.offset) + 1
        found = json.JSONDecoder().raw_decode(data[error.offset:].decode("utf-8"))[0]
        assert found == value(spec)


def test_a_byte_order_mark_is_accepted(tmp_path, gpt2_model):
    """Windows editors save JSON with a UTF-8 BOM; detection and the parser both skip it."""
    path = _write(tmp_path, gpt2_model, pre_tokenizer=BYTELEVEL)
    plain = load_tokenizer(path).encode("Hello world")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_tokenizer(path).encode("Hello world") == plain


def test_the_garbage_collector_is_left_as_it_was(tmp_path, gpt2_model):
    """Loading pauses the cyclic collector and resumes it only if it was running."""
    import gc

    path = _write(tmp_path, gpt2_model, pre_tokenizer=BYTELEVEL)
    assert gc.isenabled()
    load_hf_tokenizer(path)
    assert gc.isenabled()
    gc.disable()
    try:
        load_hf_tokenizer(path)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text('{\n"model": {\n"type": "BPE",,\n}}', "utf-8")
    with pytest.raises(FormatError) as info:
        load_tokenizer(path)
    assert info.value.line == 3


def test_pattern_argument_replaces_the_regex(tmp_path, gpt2_model):
    path = _write(tmp_path, gpt2_model, pre_tokenizer=BYTELEVEL)
    whole = load_hf_tokenizer(path, pattern=r"[\s\S]+")
    assert whole.pre_tokenize("a b") == [(0, 3)]
