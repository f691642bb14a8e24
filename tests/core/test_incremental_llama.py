"""Incremental re-encoding for llama.cpp's byte-level BPE (GGUF ``gpt2`` vocabularies): after every
edit the ids equal a from-scratch `encode` and the tokens equal `segment` (both checked against
llama.cpp's own test vectors in tests/formats/test_gguf_tokenizer.py); the common case is local,
and what is not provably exact falls back to a full re-encode."""
from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from forma_gui.core import incremental as inc
from forma_gui.core import patterns as pats
from forma_gui.core.llama_pre import LLAMA_PRE_NAMES, ONE_REGEX, llama_pre_tokenizer
from forma_gui.core.llama_tokenizers import LlamaBPETokenizer
from forma_gui.core.llama_vocab import ATTR_RSTRIP
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.core.incremental_checks import check, random_edits, records
from tests.core.test_incremental import _PIECES

# the special texts of the three vocabularies (control ones in Llama 3 and Qwen2, Qwen2's
# user-defined [PAD...] ones, cut out even with special=False), and pieces of them
_LLAMA_PIECES = _PIECES + ["<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "[PAD151646]",
                           "[PAD151", "646]", "</s>", "\u0130",
                           "\u1c89", "\U00010d40"]  # (Unicode 16.0: no class in llama.cpp's tables)
DOC = st.lists(st.sampled_from(_LLAMA_PIECES), max_size=30).map("".join) | st.text(max_size=30)
INSERT = st.lists(st.sampled_from(_LLAMA_PIECES), max_size=2).map("".join) | st.text(max_size=2)
#: SmolLM2's vocabulary lacks these bytes' symbols (two ASCII controls, a lead byte of U+40000..)
_MISSING = ["\x04", "\x13", "\U00050000"]
#: what SmolLM2's digit stage cares about: digits (and other \p{N}) after spaces, letters,
#: apostrophes and punctuation, and its own special texts
_SMOL_PIECES = _LLAMA_PIECES + ["12", " 7", "  3", "x9", "'5", "9's", "\u00b2", "\u00bd", "\u2167", " \u0663",
                                "\n4", "<|im_end|>", "<file_sep>", "<jupyter_"]
SMOL_DOC = st.lists(st.sampled_from(_SMOL_PIECES), max_size=30).map("".join) | st.text(max_size=30)
SMOL_INSERT = (st.lists(st.sampled_from(_SMOL_PIECES), max_size=2).map("".join) | st.text(max_size=2)
               | st.sampled_from(_MISSING))

GGUF = ("llama-bpe", "qwen2", "gpt-2")


@functools.cache
def _gguf(name: str):
    return load_tokenizer(data_file("gguf-vocab", f"ggml-vocab-{name}.gguf"))


@pytest.fixture(scope="module", params=GGUF)
def gguf(request):
    return _gguf(request.param)


@pytest.fixture(scope="module")
def llama_bpe():
    return _gguf("llama-bpe")


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2's GGUF: a two-stage pre-tokenizer (digits, then GPT-2's), 21 byte symbols missing."""
    return load_tokenizer(data_file("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.fixture(scope="module")
def smollm2_one_stage(smollm2):
    """SmolLM2's vocabulary with GPT-2's one-stage pre-tokenizer: local, but missing bytes."""
    return LlamaBPETokenizer(smollm2.vocab, smollm2.merges, llama_pre_tokenizer("gpt-2"), name="smollm2/gpt-2")


def _check(enc, tok, text: str, special: bool = False, library=None) -> None:
    """incremental_checks.check, and the byte count against the ids' decoded bytes."""
    assert enc.special == special
    check(enc, tok, text)
    assert enc.nbytes == len(tok.decode_bytes(list(enc.ids)))


def _edits(enc, tok, text: str, special: bool, data, inserts=INSERT, n: int = 6) -> str:
    """n random edits (deletions of up to 4 characters), each checked by _check."""
    return random_edits(enc, tok, text, data, inserts, n, max_removed=4,
                        checker=lambda e, t, s, _: _check(e, t, s, special))


# ---- which pre-tokenizers and vocabularies qualify --------------------------------------------

@pytest.mark.parametrize("name", ["llama-bpe", "llama3", "dbrx", "smaug-bpe", "qwen2", "deepseek-r1-qwen",
                                  "gpt-2", "phi-2", "olmo"])
def test_one_stage_llama_pre_tokenizers_are_verified(name):
    """llama.cpp's regexes for these names translate to VERIFIED ones (the cut rules are checked
    on those in test_incremental.py)."""
    pre = llama_pre_tokenizer(name)
    assert len(pre.patterns) == 1 and pre.patterns[0].pattern in inc.VERIFIED


def test_cpp_spellings_are_the_llama_pre_translations():
    assert llama_pre_tokenizer("llama-bpe").patterns[0].pattern == pats.CPP_PATTERNS["llama3"]
    assert llama_pre_tokenizer("qwen2").patterns[0].pattern == pats.CPP_PATTERNS["qwen2"]


#: the names whose stages are exactly smollm's (a digit, then GPT-2's regex)
_TWO_STAGE = sorted(name for name in LLAMA_PRE_NAMES if llama_pre_tokenizer(name).sources in ONE_REGEX)


def test_two_stage_llama_pre_tokenizers_are_verified():
    """They edit through one regex, equal to their two stages (test_llama_pre.py) and with the
    cut rules checked (test_incremental.py checks every VERIFIED regex)."""
    assert "smollm" in _TWO_STAGE and "starcoder" in _TWO_STAGE and len(_TWO_STAGE) == 8
    for name in _TWO_STAGE:
        pre = llama_pre_tokenizer(name)
        assert len(pre.patterns) == 2 and pre.one_pattern.pattern == pats.DIGITS_GPT2
    assert pats.DIGITS_GPT2 in inc.VERIFIED


@pytest.mark.parametrize("special", [False, True])
def test_gguf_bpe_edits_are_local_but_never_sliced(gguf, special):
    """core.chunked is for ByteLevelBPETokenizer only: it knows nothing of llama.cpp's partition."""
    assert inc.local_edits(gguf, special) and not inc.supports_edits(gguf, special)
    assert inc.IncrementalEncoder(gguf, "x", special=special).incremental


# ---- incremental == from scratch --------------------------------------------------------------

@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=DOC, data=st.data(), special=st.booleans())
def test_random_edits_equal_a_fresh_encode(gguf, text, data, special):
    """The only full re-encodes are while a text holds a code point llama.cpp's Unicode
    tables leave undefined (st.text may draw one; no lone surrogates here)."""
    enc = inc.IncrementalEncoder(gguf, text, special=special)
    _check(enc, gguf, text, special)
    texts = [text]
    for _ in range(6):
        texts.append(_edits(enc, gguf, texts[-1], special, data, n=1))
    if all(gguf.words_exact(t) for t in texts):
        assert enc.full_encodes == 0


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=SMOL_DOC, data=st.data(), special=st.booleans())
def test_smollm2_random_edits_equal_a_fresh_encode(smollm2, text, data, special):
    """SmolLM2's two-stage pre-tokenizer edits locally: ids, spans and flags equal a fresh
    encode/segment after every edit; the only full re-encodes are while a text holds a byte
    the vocabulary lacks (st.text may draw one)."""
    enc = inc.IncrementalEncoder(smollm2, text, special=special)
    assert enc.incremental
    _check(enc, smollm2, text, special)
    texts = [text]
    for _ in range(6):
        texts.append(_edits(enc, smollm2, texts[-1], special, data, SMOL_INSERT, n=1))
    if all(smollm2.words_exact(t) for t in texts):
        assert enc.full_encodes == 0


@pytest.mark.parametrize("name", ["llama-bpe", "smollm2"])
def test_ascii_typing_in_a_large_document_stays_local(request, name):
    tok = request.getfixturevalue("llama_bpe" if name == "llama-bpe" else "smollm2")
    eot = "<|eot_id|>" if name == "llama-bpe" else "<|im_end|>"
    text = f"The quick brown fox can't jump 1234 times; it's {eot} here.\n" * 500
    for special in (False, True):
        enc = inc.IncrementalEncoder(tok, text, special=special)
        edited = text
        for start, removed, inserted in [(20_000, 0, "x"), (10, 1, ""), (len(edited) - 1, 1, "!"),
                                         (0, 0, " "), (777, 0, "'ll"), (4000, 3, eot), (31, 0, "9"),
                                         (33, 0, " 5"), (34, 1, "")]:
            enc.apply_edit(start, removed, inserted)
            edited = edited[:start] + inserted + edited[start + removed:]
            assert enc.last_splice.removed < 12 and enc.last_splice.added < 12
        assert enc.full_encodes == 0
        assert list(enc.ids) == tok.encode(edited, special=special) and enc.text == edited
        assert records(enc.tokens()[-40:]) == records(tok.segment(edited, special=special)[-40:])


def test_user_defined_tokens_are_cut_out_without_special_matching():
    """Qwen2's [PAD...] tokens are user-defined: llama.cpp cuts them out even with special=False."""
    tok = _gguf("qwen2")
    enc = inc.IncrementalEncoder(tok, "a [PAD1516 b")
    enc.apply_edit(10, 0, "46]")
    assert 151646 in enc.ids and enc.tokens()[2].special and enc.full_encodes == 0
    _check(enc, tok, "a [PAD151646] b", False)


# ---- fallbacks --------------------------------------------------------------------------------

def test_multi_stage_pre_tokenizer_without_one_regex_re_encodes_in_full(smollm2):
    """falcon's three stages have no one-regex form (llama_pre.ONE_REGEX)."""
    tok = LlamaBPETokenizer(smollm2.vocab, smollm2.merges, llama_pre_tokenizer("falcon"), name="smollm2/falcon")
    enc = inc.IncrementalEncoder(tok, "Hello 123 world")
    assert not enc.incremental and "'falcon' pre-tokenizer" in enc.reason
    assert not inc.local_edits(tok)
    enc.apply_edit(6, 0, "4")
    assert enc.full_encodes == 1
    _check(enc, tok, "Hello 4123 world", False)


def test_smollm2_digits_edit_locally(smollm2):
    """A digit is a word of its own, and the spaces before it one word: typing digits, spaces
    and letters around them stays local."""
    text = "Hello 123 world"
    enc = inc.IncrementalEncoder(smollm2, text)
    assert enc.incremental and inc.local_edits(smollm2, True) and not inc.supports_edits(smollm2)
    for start, removed, inserted in [(6, 0, "4"), (5, 0, " "), (7, 0, "x"), (7, 1, ""), (6, 1, ""),
                                     (9, 0, "'s"), (0, 0, "7"), (len(text), 0, " 8")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, smollm2, text, False)
    assert enc.full_encodes == 0


@pytest.mark.parametrize("fixture", ["smollm2_one_stage", "smollm2"])
def test_missing_bytes_fall_back_while_the_text_holds_one(request, fixture):
    """llama.cpp keeps a byte the vocabulary lacks as a merge barrier and drops it: every edit
    re-encodes in full while the text holds one (the spans around it take it in)."""
    tok = request.getfixturevalue(fixture)
    text = "Hello there, general Kenobi. " * 20
    enc = inc.IncrementalEncoder(tok, text)
    assert enc.incremental

    def edit(start: int, removed: int, inserted: str) -> None:
        nonlocal text
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, tok, text, False)

    edit(100, 0, "x")
    assert enc.full_encodes == 0
    for missing in _MISSING:
        before = enc.full_encodes
        edit(200, 0, "a" + missing)
        edit(400, 1, "")  # far from it
        edit(400, 0, "!")
        edit(200, 1 + len(missing), "")
        assert enc.full_encodes == before + 4
        edit(300, 0, "y")  # no dropped byte left: local again
        edit(300, 1, "")
        assert enc.full_encodes == before + 4


@settings(max_examples=MAX_EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=DOC, data=st.data(), special=st.booleans())
def test_random_edits_with_missing_bytes_equal_a_fresh_encode(smollm2_one_stage, text, data, special):
    inserts = INSERT | st.lists(st.sampled_from(_MISSING + ["ab", " ", "1"]), max_size=3).map("".join)
    enc = inc.IncrementalEncoder(smollm2_one_stage, text, special=special)
    _edits(enc, smollm2_one_stage, text, special, data, inserts)


def test_surrogates_fall_back_and_recover(llama_bpe):
    enc = inc.IncrementalEncoder(llama_bpe, "ab cd")
    enc.apply_edit(2, 0, "\ud83d")
    assert enc.full_encodes == 1
    _check(enc, llama_bpe, "ab\ud83d cd", False)
    enc.apply_edit(2, 1, "")
    enc.apply_edit(4, 0, "x")
    assert enc.full_encodes == 2
    _check(enc, llama_bpe, "ab cxd", False)


def test_code_points_llama_cpp_leaves_undefined_fall_back_and_recover(llama_bpe):
    """A code point Unicode 16.0 assigned is in no class for llama.cpp (tests/core/
    test_unicode_version.py): while the text holds one, edits re-encode it whole."""
    enc = inc.IncrementalEncoder(llama_bpe, "ab cd \u1c89e")
    enc.apply_edit(0, 0, "x")
    enc.apply_edit(2, 0, "\U00010d40")
    assert enc.full_encodes == 2
    _check(enc, llama_bpe, "xa\U00010d40b cd \u1c89e", False)
    enc.apply_edit(2, 1, "")
    enc.apply_edit(6, 2, "")
    enc.apply_edit(6, 0, "y")
    assert enc.full_encodes == 4
    _check(enc, llama_bpe, "xab cdye", False)
    assert [llama_bpe.encode(t) for t in ("a\u1c89b", "a\u1c89b" * 3)] == \
        [list(inc.IncrementalEncoder(llama_bpe, t).ids) for t in ("a\u1c89b", "a\u1c89b" * 3)]


def test_stripping_special_tokens_re_encode_in_full():
    tok = load_tokenizer(data_file("gguf-vocab", "ggml-vocab-llama-bpe.gguf"))  # its own, changed, vocabulary
    eot = tok.vocab.text_to_token("<|eot_id|>")
    tok.vocab.attrs[eot] |= ATTR_RSTRIP
    assert inc.local_edits(tok, special=False)  # control tokens are not cut out without special
    enc = inc.IncrementalEncoder(tok, "a<|eot_id|>  b", special=True)
    assert not enc.incremental and "rstrip" in enc.reason
    enc.apply_edit(0, 0, "x")
    assert enc.full_encodes == 1 and list(enc.ids) == tok.encode("xa<|eot_id|>  b", special=True)


# ---- the overlap test -------------------------------------------------------------------------

def _overlap_free_reference(texts: list[str]) -> bool:
    """Place every text against every other at every offset where they share a character."""
    for a, b in itertools.product(set(texts), repeat=2):
        for i in range(-len(b) + 1, len(a)):
            if i == 0 and a == b:
                continue
            lo, hi = max(0, i), min(len(a), i + len(b))
            if lo < hi and a[lo:hi] == b[lo - i:hi - i]:  # b at i agrees with a where they meet
                return False
    return True


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(texts=st.lists(st.text("ab<>|", min_size=1, max_size=5), max_size=5))
def test_overlap_free_matches_brute_force(texts):
    assert inc._overlap_free(texts) == _overlap_free_reference(texts)


def test_real_special_tokens_are_overlap_free(gguf):
    assert inc._overlap_free([t.content for t in gguf.added_tokens])
