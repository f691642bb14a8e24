"""Sliced encoding: the encoder built slice by slice equals the one-shot IncrementalEncoder (and
tiktoken, for the OpenAI vocabulary), and keeps following edits exactly afterwards."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from forma_gui.core import chunked
from forma_gui.core import patterns as pats
from forma_gui.core.bytelevel import ByteLevelBPETokenizer
from forma_gui.core.incremental import IncrementalEncoder
from forma_gui.core.special import split_added
from forma_gui.core.tokenizer import AddedToken
from forma_gui.formats.gpt2_files import read_merges, read_vocab
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file

# what pre-tokenizers and normalizers care about: scripts, digits, contractions, marks, every
# kind of whitespace, ZWJ emoji, special tokens whole and broken
_PIECES = list("aZé1٣'s.-/_( \t\n\r\x0b\xa0\u2003\u3000漢Яя\u0301\u200d😀") + [
    "'ll", "don't", "  ", "\n\n", "   \n ", "123456", "<|endoftext|>", "<|endo", "ftext|>", "Ab",
    " Hello", " world", "e\u0301", "Å", "\u212b"]
DOC = st.lists(st.sampled_from(_PIECES), max_size=80).map("".join) | st.text(max_size=40)
SLICE = st.integers(1, 24)


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer(data_file("gpt2", "encoder.json"))


@pytest.fixture(scope="module")
def cl100k():
    return load_tokenizer(data_file("tiktoken", "cl100k_base.tiktoken"))


@pytest.fixture(scope="module")
def qwen3():
    """NFC normalizer and 26 added tokens."""
    return load_tokenizer(data_file("hf", "qwen3", "tokenizer.json"))


@pytest.fixture(scope="module")
def gpt2_prefixed():
    vocab = read_vocab(data_file("gpt2", "encoder.json"))
    merges, _ = read_merges(data_file("gpt2", "vocab.bpe"))
    return ByteLevelBPETokenizer(vocab, merges, pattern=pats.HF_BYTELEVEL_REGEX, add_prefix_space=True)


@pytest.fixture(scope="module")
def overlapping():
    """Added tokens that overlap and nest, so a window cut in the wrong place would show."""
    vocab = read_vocab(data_file("gpt2", "encoder.json"))
    merges, _ = read_merges(data_file("gpt2", "vocab.bpe"))
    added = [AddedToken("<|a|>", 50257), AddedToken("<|a|>bc", 50258), AddedToken("bc<", 50259),
             AddedToken("aaaa", 50260, special=False)]
    return ByteLevelBPETokenizer(vocab, merges, added_tokens=added)


def _steps(tok, text: str, special: bool, size: int) -> tuple[IncrementalEncoder, list]:
    progress = []
    gen = chunked.encode_steps(tok, text, special=special, slice_chars=size)
    try:
        while True:
            progress.append(next(gen))
    except StopIteration as stop:
        return stop.value, progress


def _same(enc: IncrementalEncoder, tok, text: str, special: bool) -> None:
    """`enc` is what IncrementalEncoder(tok, text) builds, and stays so through edits."""
    ref = IncrementalEncoder(tok, text, special=special)
    assert list(enc.ids) == list(ref.ids) == tok.encode(text, special=special)
    assert (enc.starts, enc.ends, enc.flags, enc.nbytes) == (ref.starts, ref.ends, ref.flags, ref.nbytes)
    assert enc.text == text and enc.n_chars == ref.n_chars
    middle = len(text) // 2
    for e in (enc, ref):
        e.apply_edit(middle, min(3, len(text) - middle), " xy'z 12<|endoftext|>é")
        e.apply_edit(0, 0, "A")
    assert (enc.ids, enc.starts, enc.ends, enc.flags) == (ref.ids, ref.starts, ref.ends, ref.flags)
    assert enc.full_encodes == ref.full_encodes


_SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(text=DOC, size=SLICE, special=st.booleans())
def test_slices_equal_the_one_shot_encoder(gpt2, text, size, special):
    enc, _ = _steps(gpt2, text, special, size)
    _same(enc, gpt2, text, special)


@_SETTINGS
@given(text=DOC, size=SLICE, special=st.booleans())
def test_nfc_tokenizer(qwen3, text, size, special):
    """Qwen3 normalizes (NFC): slices end before ASCII; text that is not NFC is encoded whole."""
    enc, _ = _steps(qwen3, text, special, size)
    _same(enc, qwen3, text, special)


@_SETTINGS
@given(text=DOC, size=SLICE)
def test_add_prefix_space(gpt2_prefixed, text, size):
    enc, _ = _steps(gpt2_prefixed, text, False, size)
    _same(enc, gpt2_prefixed, text, False)


@_SETTINGS
@given(parts=st.lists(st.sampled_from(["<|a|>", "bc", "<", "|", "a", "aa", " ", "x", "<|a|>bc<"]),
                      max_size=60), size=st.integers(1, 12))
def test_added_tokens_are_matched_as_one_scan_would(overlapping, parts, size):
    text = "".join(parts)
    whole, at = [], 0
    for piece, token in split_added(overlapping, text):
        if token is not None:
            whole.append((at, at + len(piece), token.id))
        at += len(piece)
    assert list(chunked._added_matches(overlapping, text, size, tuple(overlapping.added_tokens))) == whole
    enc, _ = _steps(overlapping, text, True, size)
    _same(enc, overlapping, text, True)


def test_large_text_against_tiktoken(cl100k):
    from tests.core.test_incremental import _oracle

    text = ("Slices of 1 MB: naïve café, 東京は日本の首都です。 don't 12345 👩‍💻\n\t" * 4000)[:200_000]
    text += "<|endoftext|>" + text[:50_000]
    enc, progress = _steps(cl100k, text, True, 4096)
    assert list(enc.ids) == _oracle("cl100k_base").encode(text, allowed_special="all")
    _same(enc, cl100k, text, True)
    assert len(progress) >= len(text) // 4096
    assert [p[0] for p in progress] == sorted(p[0] for p in progress)
    assert progress[-1] == (len(text), len(text))


def test_unclean_text_is_encoded_whole(gpt2, qwen3):
    for tok, text in ((gpt2, "ab \ud83d cd " * 500), (qwen3, "cafe\u0301 " * 500)):
        enc, _ = _steps(tok, text, False, 64)
        _same(enc, tok, text, False)
        assert enc._surrogates or not enc._clean  # the one-shot encoder's own bookkeeping


@pytest.mark.parametrize("name", ["botchan_en_bpe_1000.model", "botchan_en_unigram_1000.model"])
def test_short_text_and_unsupported_tokenizers_take_one_step(name):
    """SentencePiece texts are never cut into slices; the one encoder is live (core.incremental)
    for BPE and unigram models alike."""
    spm = load_tokenizer(data_file("sentencepiece", name))
    enc, progress = _steps(spm, "hello world " * 100, False, 16)
    assert progress == [] and list(enc.ids) == spm.encode("hello world " * 100)
    assert enc.incremental


def test_closing_the_generator_stops_it(gpt2):
    gen = chunked.encode_steps(gpt2, "word " * 10_000, slice_chars=1000)
    done, total = next(gen)
    assert 1000 <= done < total == 50_000
    gen.close()  # a cancelled worker closes its job; nothing is left running
