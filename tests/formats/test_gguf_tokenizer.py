"""GGUF-embedded tokenizers: llama.cpp's own test vectors, SmolLM2 against HF `tokenizers`,
a t5 (UGM) vocabulary against `sentencepiece`, and malformed metadata refused.

The vector files are read exactly as llama.cpp's tests/test-tokenizer-0.cpp reads them:
the .inp file is split on "\\n__ggml_vocab_test__\\n" (every input is followed by the
separator, so the last piece is empty and dropped; inputs keep their own trailing
newlines), the .out file has one line of space-separated ids per input, and each input is
tokenized with add_special=false, parse_special=false (no BOS in the expected ids).
"""
from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest
import sentencepiece as spm
from gguf import GGUFValueType as T
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from forma_gui.bench.incremental import t5_gguf_from
from forma_gui.core import llama_tokenizers
from forma_gui.core import patterns as pats
from forma_gui.core.byte_map import BYTE_TO_UNICODE
from forma_gui.errors import FormatError
from forma_gui.formats.gguf import GGUFFile
from forma_gui.formats.gguf_tokenizer import load_gguf_tokenizer
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file

VECTORS = ["gpt-2", "llama-bpe", "qwen2", "llama-spm", "bert-bge"]
SEPARATOR = "\n__ggml_vocab_test__\n"

_TOKENIZERS: dict = {}


def _vocab(name: str):
    if name not in _TOKENIZERS:
        _TOKENIZERS[name] = load_gguf_tokenizer(data_file("gguf-vocab", f"ggml-vocab-{name}.gguf"))
    return _TOKENIZERS[name]


def read_vectors(name: str) -> list[tuple[str, list[int]]]:
    """test-tokenizer-0.cpp read_tests()."""
    raw = data_file("gguf-vocab", f"ggml-vocab-{name}.gguf.inp").read_bytes().decode("utf-8")
    inputs, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEPARATOR, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(SEPARATOR)
    lines = data_file("gguf-vocab", f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8")
    outputs = [[int(x) for x in line.split()] for line in lines.split("\n")[:-1]]
    assert len(inputs) == len(outputs) == 46
    return list(zip(inputs, outputs))


@pytest.mark.parametrize("name", VECTORS)
def test_llama_cpp_vectors(name):
    tok = _vocab(name)
    for text, expected in read_vectors(name):
        assert tok.encode(text) == expected, text
        assert tok.tokenize(text, add_special=False, parse_special=False) == expected


@pytest.mark.parametrize("name", VECTORS)
def test_segments_tile_and_match_ids(name):
    tok = _vocab(name)
    for text, expected in read_vectors(name):
        segments = tok.segment(text)
        assert [t.id for t in segments] == expected
        pos = 0
        for t in segments:
            assert t.start == pos or (t.partial and t.start < pos) or t.start == t.end == pos
            pos = max(pos, t.end)
        assert not segments or pos == len(text), text


def test_families_and_kinds():
    kinds = {name: _vocab(name).kind for name in VECTORS}
    assert kinds == {"gpt-2": "byte-level BPE (llama.cpp)", "llama-bpe": "byte-level BPE (llama.cpp)",
                     "qwen2": "byte-level BPE (llama.cpp)",
                     "llama-spm": "SentencePiece BPE (llama.cpp)", "bert-bge": "WordPiece (llama.cpp)"}
    assert isinstance(load_tokenizer(data_file("gguf-vocab", "ggml-vocab-gpt-2.gguf")),
                      type(_vocab("gpt-2")))


def test_special_tokens_and_flags():
    spm_tok = _vocab("llama-spm")
    assert spm_tok.tokenize("Hello", add_special=True) == [1] + spm_tok.encode("Hello")
    assert spm_tok.encode("<s>x", special=True)[0] == 1 != spm_tok.encode("<s>x")[0]
    # after a special token llama.cpp prefixes the next text with a space again
    assert spm_tok.encode("<s>Hello", special=True) == [1] + spm_tok.encode("Hello")
    bert = _vocab("bert-bge")
    assert bert.tokenize("hi", add_special=True) == [101] + bert.encode("hi") + [102]
    qwen = _vocab("qwen2")
    pad = qwen.id_of("[PAD151646]")
    assert qwen.token_type(pad) == "user-defined"
    assert qwen.encode("a[PAD151646]b") == qwen.encode("a") + [pad] + qwen.encode("b")
    llama3 = _vocab("llama-bpe")
    assert llama3.encode("<|begin_of_text|>", special=True) == [128000]
    assert llama3.encode("<|begin_of_text|>") != [128000]
    assert llama3.token_type(128000) == "control" and llama3.token_type(1000) == "normal"
    assert _vocab("llama-spm").token_type(3) == "byte"


@pytest.mark.parametrize("name", ["gpt-2", "qwen2"])
def test_texts_and_merge_table_from_the_bytes_equal_gguf_py_and_the_text_path(name):
    """The loader checks and looks the tokens and merges up on their bytes (TokenTable):
    the texts equal gguf-py's, and the merge table equals one built from the texts."""
    from forma_gui.core.bytelevel import ByteLevelBPETokenizer

    path = data_file("gguf-vocab", f"ggml-vocab-{name}.gguf")
    tok = load_gguf_tokenizer(path)
    field = gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"]
    expected = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
    assert tok.vocab.tokens == expected
    assert tok.vocab.token_to_id == {t: i for i, t in enumerate(expected)}
    assert tok._merge_ids is not None  # the bytes path ran
    texts = ByteLevelBPETokenizer(expected, list(tok.merges), pattern=list(tok.pre.patterns),
                                  strict=False)
    assert tok.inner._merges == texts._merges


ANY_TEXT = st.lists(st.characters(max_codepoint=0x10FFFF) | st.sampled_from(
    ["\x04", "\x06", "\x13", " ", "  ", "\n", "\u00a0", "\u3000", "'s", "123456", "\ud800",
     "Hello", " world", "日本"])).map("".join)


@pytest.mark.parametrize("name", ["smollm2", "llama-bpe", "qwen2", "gpt-2"])
@given(data=st.data())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_fast_fragments_equal_llama_cpp_word_by_word(name, data):
    """The batch path through the byte-level encoder gives llama.cpp's word-by-word tokens
    and spans, also with bytes the vocabulary lacks (SmolLM2), Unicode spaces and lone
    surrogates (where it must step aside)."""
    if name == "smollm2" and name not in _TOKENIZERS:
        _TOKENIZERS[name] = load_gguf_tokenizer(data_file(*SMOL))
    tok = _vocab(name)
    text = data.draw(ANY_TEXT)
    reference = tok._word_spans(text, 0, len(text)) if text else []
    cap = data.draw(st.sampled_from([llama_tokenizers.INNER_MAX_CHARS, 8, 3]))
    with pytest.MonkeyPatch.context() as mp:  # small caps: long fragments cut at spaces
        mp.setattr(llama_tokenizers, "INNER_MAX_CHARS", cap)
        assert tok._fragment_spans(text, 0, len(text), True) == reference
        assert tok._fragment_ids(text, 0, len(text), True) == [i for i, _, _ in reference]


@given(st.text(st.sampled_from("ab \n\t")), st.integers(1, 6))
@settings(max_examples=MAX_EXAMPLES)
def test_space_cuts_follow_non_space_characters(text, size):
    pieces = llama_tokenizers._space_cuts(text, size)
    if pieces is None:
        return
    assert pieces[0][0] == 0 and pieces[-1][1] == len(text)
    for (a, b), (c, _) in zip(pieces, pieces[1:]):
        assert b == c and text[b] == " " and not text[b - 1].isspace() and b - a <= size


@pytest.mark.parametrize("name", VECTORS)
def test_decode_round_trips(name):
    tok = _vocab(name)
    if name == "bert-bge":  # WordPiece lowercases and drops accents: no round trip
        assert tok.detokenize(tok.encode("hello world")) == " hello world"
        return
    for text, _ in read_vectors(name):
        if "\ufffd" in text:
            continue
        assert tok.decode(tok.encode(text)) == text


def test_detokenize_cleans_spaces_like_llama_cpp():
    gpt2 = _vocab("gpt-2")
    ids = gpt2.encode("Hello , world ! I 'm")
    assert gpt2.detokenize(ids) == "Hello, world! I'm"
    assert gpt2.decode(ids) == "Hello , world ! I 'm"
    spm_tok = _vocab("llama-spm")
    ids = spm_tok.tokenize("Hello world", add_special=True)
    assert spm_tok.detokenize(ids[1:]) == "Hello world"
    # llama.cpp keeps the prefix space when it removes a leading BOS (remove_space = false)
    assert spm_tok.detokenize(ids, remove_special=True) == " Hello world"
    assert spm_tok.detokenize(ids, unparse_special=True) == "<s> Hello world"


# ---- SmolLM2 against HF tokenizers --------------------------------------------------------

SMOL = ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="module")
def smol():
    path = data_file(*SMOL)
    tok = load_gguf_tokenizer(path)
    with GGUFFile(path, read_tensors=False) as g:
        tokens = g.metadata["tokenizer.ggml.tokens"]
        merges = g.metadata["tokenizer.ggml.merges"]
    hf = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                                merges=[tuple(m.split(" ")) for m in merges]))
    # HF's own definition of the smollm pre-tokenizer (SmolLM2's tokenizer.json)
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    missing = {b for b, ch in BYTE_TO_UNICODE.items() if ch not in tok.vocab.token_to_id}
    return tok, hf, missing


SMOL_CORPUS = [
    "Hello world", "  spaces   and\ttabs\n\nnewlines \n", "12345 numbers 3.14 2024-01-01",
    "日本語 中文 한국어", "emoji 😀👍🏽 🦙", "Привет мир", "I'm can't we'll they've IT'S",
    "ｆｕｌｌ ﬁ ① ²", "<|im_start|>user\nhi<|im_end|>", "\u00a0\u3000 \u2028", "x" * 300,
    "def f(x):\n    return x ** 2  # square\n", "naïve café résumé", "e\u0301", "$100 & 50%",
]


def _smol_text(missing: set[int]):
    """Text whose UTF-8 never uses a missing byte: no missing ASCII controls, and code
    points below U+40000 (lead bytes F1 and up are missing)."""
    alphabet = st.characters(blacklist_categories=("Cs",), max_codepoint=0x3FFFF,
                             blacklist_characters="".join(chr(b) for b in missing if b < 0x80))
    return st.text(alphabet)


def test_smollm2_token_score_is_the_rank_of_the_first_merge_making_it(smol):
    """What the Vocabulary view shows in its rank column, from the file's merges list."""
    tok = smol[0]
    with GGUFFile(data_file(*SMOL), read_tensors=False) as g:
        merges = list(g.metadata["tokenizer.ggml.merges"])
    first: dict[str, int] = {}
    for rank, merge in enumerate(merges):
        left, right = merge.split(" ")
        first.setdefault(left + right, rank)
    ids = list(range(0, tok.vocab_size, 97)) + [tok.vocab_size - 1]
    assert [tok.token_score(i) for i in ids] == [first.get(tok.piece(i)) for i in ids]
    assert sum(tok.token_score(i) is not None for i in ids) > len(ids) // 2


def test_smollm2_equals_hf_on_corpus(smol):
    tok, hf, missing = smol
    assert len(missing) == 21 and {0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1} < missing
    for text in SMOL_CORPUS:
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, text


@given(st.data())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_smollm2_equals_hf_on_hypothesis_text(smol, data):
    tok, hf, missing = smol
    text = data.draw(_smol_text(missing))
    assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids


def test_smollm2_encoder_runs_the_one_regex_form(smol):
    """The byte-level encoder splits with llama_pre.ONE_REGEX's single regex, not the two
    stages (the same words: test_smollm2_equals_hf_* and the fast-path tests check the ids)."""
    tok, _, _ = smol
    assert [p.pattern for p in tok.inner._patterns] == [pats.DIGITS_GPT2]


def test_smollm2_missing_bytes_follow_llama_cpp(smol):
    """A byte without a symbol is dropped, and stays a barrier: llama.cpp never merges its
    neighbours across it (HF drops it first and merges them)."""
    tok, hf, _ = smol
    ids = lambda text: hf.encode(text, add_special_tokens=False).ids  # noqa: E731
    assert tok.encode("\x06") == [] == ids("\x06")
    assert tok.encode("a\x06b") == ids("a") + ids("b")
    text = "?\x06'"  # one pre-token; HF merges "?'" once \x06 is gone
    assert tok.encode(text) == ids("?") + ids("'")
    assert ids(text) == ids("?'") and ids("?'") != ids("?") + ids("'")
    assert [t.id for t in tok.segment(text)] == tok.encode(text)


# ---- t5 (UGM) against sentencepiece -------------------------------------------------------

def _write_gguf(path, entries: list[tuple[str, object, T, T | None]], arch: str = "llama"):
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value, vtype, sub in entries:
        writer.add_key_value(key, value, vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _t5_from(model_path, dst):
    return t5_gguf_from(model_path, dst)


def test_t5_unigram_equals_sentencepiece(tmp_path):
    model = data_file("sentencepiece", "botchan_en_unigram_1000.model")
    tok = load_gguf_tokenizer(_t5_from(model, tmp_path / "t5.gguf"))
    lib = spm.SentencePieceProcessor(model_file=str(model))
    assert tok.kind == "SentencePiece unigram (llama.cpp)"
    texts = SMOL_CORPUS + ["ｆｕｌｌwidth ﬁ", "  two  spaces ", "ßþ unknown runs ∑∑∑", "a" * 50]
    for text in texts:
        assert tok.encode(text) == lib.encode(text), text
    assert tok.tokenize("Hi", add_special=True)[-1] == 2  # t5 appends EOS
    segments = tok.segment("  Hello   world ")
    assert [t.id for t in segments] == lib.encode("  Hello   world ")


# ---- malformed metadata --------------------------------------------------------------------

K = "tokenizer.ggml."
BYTE_TOKENS = list(BYTE_TO_UNICODE.values())


def _bpe_entries(**changes):
    """A tiny but valid gpt2 vocabulary; `changes` replace or drop (None) entries."""
    tokens = BYTE_TOKENS + ["ab", "<|end|>"]
    entries = {
        K + "model": ("gpt2", T.STRING, None),
        K + "pre": ("gpt-2", T.STRING, None),
        K + "tokens": (tokens, T.ARRAY, T.STRING),
        K + "token_type": ([1] * (len(tokens) - 1) + [3], T.ARRAY, T.INT32),
        K + "merges": (["a b"], T.ARRAY, T.STRING),
        K + "bos_token_id": (len(tokens) - 1, T.UINT32, None),
    }
    for key, value in changes.items():
        key = K + key
        if value is None:
            entries.pop(key)
        else:
            entries[key] = value
    return [(key, *value) for key, value in entries.items()]


def test_tiny_valid_vocabulary(tmp_path):
    tok = load_gguf_tokenizer(_write_gguf(tmp_path / "ok.gguf", _bpe_entries()))
    assert tok.encode("ab abc") == [256, BYTE_TOKENS.index("Ġ"), 256, BYTE_TOKENS.index("c")]
    assert tok.encode("<|end|>", special=True) == [257] and tok.token_type(257) == "control"


MALFORMED = {
    "no model": dict(model=None),
    "unknown model": dict(model=("sentencepiece-ish", T.STRING, None)),
    "unsupported model": dict(model=("rwkv", T.STRING, None)),
    "model not a string": dict(model=(7, T.UINT32, None)),
    "no tokens": dict(tokens=None),
    "tokens of ints": dict(tokens=([1, 2, 3], T.ARRAY, T.INT32)),
    "duplicate token": dict(tokens=(BYTE_TOKENS + ["a", "<|end|>"], T.ARRAY, T.STRING)),
    "merge names unknown token": dict(merges=(["a b", "a zz"], T.ARRAY, T.STRING)),
    "merge without space": dict(merges=(["ab"], T.ARRAY, T.STRING)),
    # as many spaces as merges, but not one in each: the fast check must not be fooled
    "merge spaces evened out": dict(merges=(["ab", "a b b"], T.ARRAY, T.STRING)),
    "merge starting with its space": dict(merges=(["a b", " a"], T.ARRAY, T.STRING)),
    "merge holding a NUL": dict(merges=(["a b", "a\0 b"], T.ARRAY, T.STRING)),
    "merges not an array": dict(merges=("a b", T.STRING, None)),
    "no merges": dict(merges=None),
    "token types of bytes": dict(token_type=([1] * 258, T.ARRAY, T.UINT8)),
    "too few token types": dict(token_type=([1] * 10, T.ARRAY, T.INT32)),
    "too few scores": dict(scores=([0.0] * 10, T.ARRAY, T.FLOAT32)),
    "scores of strings": dict(scores=(["x"] * 258, T.ARRAY, T.STRING)),
    "unknown pre-tokenizer": dict(pre=("my-own-pre", T.STRING, None)),
    "pre-tokenizer not a string": dict(pre=(1, T.INT32, None)),
    "bos id as string": dict(bos_token_id=("1", T.STRING, None)),
    # chatglm-bpe clears llama.cpp's default BOS; asking for one then is an error
    "add_bos without bos": dict(bos_token_id=None, pre=("chatglm-bpe", T.STRING, None),
                                add_bos_token=(True, T.BOOL, None)),
    "add_bos not a bool": dict(add_bos_token=(1, T.UINT32, None)),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_metadata_refused(tmp_path, case):
    path = _write_gguf(tmp_path / "bad.gguf", _bpe_entries(**MALFORMED[case]))
    with pytest.raises(FormatError) as info:
        load_gguf_tokenizer(path)
    assert str(path) in str(info.value)


def test_unknown_pre_tokenizer_is_named(tmp_path):
    path = _write_gguf(tmp_path / "bad.gguf", _bpe_entries(pre=("my-own-pre", T.STRING, None)))
    with pytest.raises(FormatError, match="my-own-pre"):
        load_gguf_tokenizer(path)


def test_merge_error_names_the_merge(tmp_path):
    path = _write_gguf(tmp_path / "bad.gguf",
                       _bpe_entries(merges=(["a b", "a zz"], T.ARRAY, T.STRING)))
    with pytest.raises(FormatError, match=r"merge 1 'a zz'") as info:
        load_gguf_tokenizer(path)
    assert info.value.offset is not None


def _tokens_count_offset(path) -> int:
    with GGUFFile(path, read_tensors=False) as g:
        at = g.metadata_offsets[K + "tokens"]
    # key record: u64 key length, key, u32 value type, u32 element type, u64 count
    return at + 8 + len(K + "tokens") + 4 + 4


@pytest.mark.parametrize("count", [2**40, 2**63])
def test_array_count_larger_than_the_file(tmp_path, count):
    src = data_file("gguf-vocab", "ggml-vocab-bert-bge.gguf")
    data = bytearray(src.read_bytes())
    at = _tokens_count_offset(src)
    assert struct.unpack_from("<Q", data, at)[0] == 30522
    struct.pack_into("<Q", data, at, count)
    path = tmp_path / "huge.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError):
        load_gguf_tokenizer(path)


@pytest.mark.parametrize("cut", [3, 24, 100, 5000, 400000])
def test_truncated_file(tmp_path, cut):
    data = data_file("gguf-vocab", "ggml-vocab-bert-bge.gguf").read_bytes()[:cut]
    path = tmp_path / "cut.gguf"
    path.write_bytes(data)
    with pytest.raises(FormatError):
        load_gguf_tokenizer(path)


def test_vocab_only_header_is_read(tmp_path):
    """No tensor is touched: the tokenizer loads from a file whose tensor data is garbage."""
    tok = load_gguf_tokenizer(data_file(*SMOL))
    assert tok.vocab_size == 49152 and tok.bos_id == 1 and tok.eos_id == 2
    assert tok.pre.name == "smollm" and tok.pre.type == "SMOLLM"
    assert np.all(np.array([tok.token_type(i) for i in range(17)]) == "control")
