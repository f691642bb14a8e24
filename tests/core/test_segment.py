"""Token spans: character offsets that tile the input, partial characters marked."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from forma_gui.core.segment import align_tokens, byte_count, segment_columns, token_lengths
from forma_gui.core.tokenizer import Tokenizer
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.corpus import CORPUS, SURROGATE_CORPUS, TEXT


def assert_tiles(tokens, text: str) -> None:
    """Spans cover the text in order, without gaps; neighbours overlap only at a shared partial char.

    (An encoding without tokens, such as a tokenizer that drops whitespace given only
    whitespace, has nothing to tile with.)
    """
    if not tokens:
        return
    frontier = 0  # everything before it is covered
    prev = None
    for t in tokens:
        assert 0 <= t.start <= t.end <= len(text), t
        if t.start == t.end:  # a token that stands for no character sits at the frontier
            assert (prev.start if prev else 0) <= t.start <= frontier, t
            continue
        assert t.start <= frontier, f"gap before {t}"
        if prev is not None:
            assert t.start >= prev.start, t
            if t.start < frontier:
                assert t.partial and prev.partial, (prev, t)
        frontier = max(frontier, t.end)
        prev = t
    assert frontier == len(text)


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer(data_file("gpt2", "encoder.json"))


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer(data_file("hf", "qwen3", "tokenizer.json"))


def _spans(tokens):
    return [(t.piece, t.start, t.end, t.partial) for t in tokens]


def test_known_spans(gpt2):
    assert _spans(gpt2.segment("Hello world")) == [("Hello", 0, 5, False), ("Ġworld", 5, 11, False)]
    # 😀 is F0 9F 98 80: GPT-2 splits it after three bytes; both tokens span the emoji.
    assert _spans(gpt2.segment(" 😀")) == [("ĠðŁĺ", 0, 2, True), ("Ģ", 1, 2, True)]
    assert gpt2.segment("") == []


def test_token_records(gpt2):
    tokens = gpt2.segment("<|endoftext|>é", special=True)
    assert tokens[0].id == 50256 and tokens[0].special and tokens[0].data == b"<|endoftext|>"
    assert [t.data for t in tokens[1:]] == [b"\xc3\xa9"] and not tokens[1].special


@pytest.mark.parametrize("text", CORPUS + SURROGATE_CORPUS)
def test_corpus_tiles(gpt2, qwen3, text):
    for tok in (gpt2, qwen3):
        tokens = tok.segment(text)
        assert [t.id for t in tokens] == tok.encode(text)
        assert_tiles(tokens, text)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=TEXT | st.text(st.characters(blacklist_categories=())))
def test_spans_tile_random_text(gpt2, qwen3, text):
    for tok in (gpt2, qwen3):
        tokens = tok.segment(text)
        assert_tiles(tokens, text)
        assert b"".join(t.data for t in tokens) == tok.decode_bytes(tok.encode(text))


def test_surrogates_align(gpt2):
    # a lone surrogate is encoded as U+FFFD; a surrogate pair as the character it stands for
    assert _spans(gpt2.segment("a\ud800b")) == [("a", 0, 1, False), ("ï¿½", 1, 2, False), ("b", 2, 3, False)]
    pair = gpt2.segment("x\ud83d\ude00y")
    assert [(t.start, t.end) for t in pair] == [(0, 1), (1, 3), (1, 3), (3, 4)]


def test_nfc_normalized_input_maps_back(qwen3):
    text = "Cafe\u0301 ok"  # 'e' + combining acute: NFC makes it one character
    tokens = qwen3.segment(text)
    assert "".join(t.piece for t in tokens).startswith("Caf")
    acute = next(t for t in tokens if t.data == "é".encode())
    assert (acute.start, acute.end) == (3, 5)
    assert_tiles(tokens, text)


class _Lowercasing(Tokenizer):
    """A toy tokenizer whose 'normalizer' lower-cases, drops spaces and adds a prefix byte."""

    def __init__(self, prefix: bytes = b"") -> None:
        super().__init__()
        self.prefix = prefix

    vocab_size = 256

    def piece(self, token_id):
        return chr(token_id)

    def id_of(self, piece):
        return ord(piece)

    def token_bytes(self, token_id):
        return bytes([token_id])

    def _encode_ordinary(self, text):
        return list(self.prefix + text.lower().replace(" ", "").encode("utf-8"))


def test_general_alignment_of_changed_text():
    text = "Hello World ÄB"
    tokens = _Lowercasing().segment(text)
    assert_tiles(tokens, text)
    assert [(t.start, t.end, t.partial) for t in tokens[:4]] == [
        (0, 1, False), (1, 2, False), (2, 3, False), (3, 4, False)]  # "H" -> "h": a whole unit
    assert tokens[4].start == 4 and tokens[5].end == 7  # "o W" -> "ow": the dropped space is covered
    # " ÄB" -> "äb": no character agrees, so the stretch is one unit its three tokens share
    assert [(t.start, t.end, t.partial) for t in tokens[-3:]] == [(11, 14, True)] * 3


def test_bytes_without_characters_get_an_empty_span():
    text = "ab"
    tokens = _Lowercasing(prefix=b"_").segment(text)
    assert [(t.start, t.end) for t in tokens] == [(0, 0), (0, 1), (1, 2)]
    assert_tiles(tokens, text)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=TEXT, prefix=st.binary(max_size=3))
def test_general_alignment_tiles(text, prefix):
    assert_tiles(_Lowercasing(prefix).segment(text), text)


def test_align_tokens_directly(gpt2):
    ids = gpt2.encode("abc def")
    assert [(t.start, t.end) for t in align_tokens(gpt2, "abc def", ids)] == [(0, 3), (3, 7)]


# ---- segment_columns: segment() as the GUI's columns -------------------------------------------

GGUF_ALPHABET = list("ab Zz  \n\t.,'0123") + [
    "é", "東京", "😀", "👍🏽", "▁", "<s>", "</s>", "[CLS]", "<|endoftext|>", "<0x0A>", "  x", "don't"]


@pytest.fixture(scope="module")
def ggufs():
    return [load_tokenizer(data_file("gguf-vocab", f"ggml-vocab-{name}.gguf"))
            for name in ("llama-spm", "llama-bpe", "bert-bge")]


def test_columns_are_none_without_a_columns_path(gpt2):
    assert segment_columns(gpt2, "hello world") is None


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=st.lists(st.sampled_from(GGUF_ALPHABET), max_size=30).map("".join) | TEXT,
       special=st.booleans())
def test_columns_equal_segment_for_gguf_tokenizers(ggufs, text, special):
    """Every llama.cpp family (SPM's word path, the others through their spans), token by token."""
    for tok in ggufs:
        columns = segment_columns(tok, text, special)
        want = tok.segment(text, special=special)
        assert list(columns.ids) == [t.id for t in want]
        assert list(columns.starts) == [t.start for t in want]
        assert list(columns.ends) == [t.end for t in want]
        assert list(columns.flags) == [t.partial | t.special << 1 for t in want]
        assert columns.nbytes == sum(len(t.data) for t in want)


def test_byte_count_is_the_tokens_bytes(gpt2, qwen3):
    """`byte_count` (an edit's few ids, in Python) sums what `token_lengths` and `token_bytes`
    give, before and after its per-tokenizer lookups are filled."""
    import numpy as np

    for tok in (gpt2, qwen3):
        ids = tok.encode("".join(CORPUS))[:200]
        expected = sum(len(tok.token_bytes(i)) for i in ids)
        assert byte_count(tok, ids) == expected == byte_count(tok, ids)
        assert int(token_lengths(tok, np.asarray(ids)).sum()) == expected
        assert byte_count(tok, []) == 0
