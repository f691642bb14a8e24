"""`LlamaUGMTokenizer.normalize` (runs of plain characters copied whole, the space handling
in numpy) and `_normalize_small` (the same in plain Python, for an edit's region) against
`_normalize_reference`, the transcription of
llm_tokenizer_ugm_session::normalize: the same bytes and the same offsets, byte for byte.

The charsmap is botchan's nmt_nfkc one (through a synthetic t5 GGUF): fullwidth and
compatibility characters, ligatures and letters followed by combining marks all map. A
variant vocabulary adds user-defined tokens (the botchan model has none), some starting with
letters the charsmap maps, one with a space, one with invalid UTF-8.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core.llama_tokenizers import SMALL_FRAGMENT, LlamaUGMTokenizer, plain_run_regex
from forma_gui.core.llama_vocab import ATTR_USER_DEFINED, LlamaVocab
from forma_gui.formats.gguf_tokenizer import load_gguf_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.formats.test_gguf_tokenizer import _t5_from

FLAG_NAMES = ("escape_whitespaces", "add_space_prefix", "treat_whitespace_as_suffix",
              "remove_extra_whitespaces")
FLAG_SETS = [dict(zip(FLAG_NAMES, values)) for values in itertools.product((False, True),
                                                                             repeat=4)]
USER_TOKENS = ["<sep>", "ab", "ｆｕ", "e\u0301x", "① ", " x", "\t\t", "\udcff\udcfe", "ﬁn"]
ALPHABET = list("ab xe\t\n\r<>sp") + ["  ", "ｆｕｌｌ", "ﬁ", "①", "㌀", "\u0301", "\u0300\u0301",
                                       "\u3000", "é", "ß", "∑", "\U0001F600", "\x00", "ⅷ",
                                       "\u00a0", "Å"]


@pytest.fixture(scope="module")
def t5(tmp_path_factory) -> LlamaUGMTokenizer:
    model = data_file("sentencepiece", "botchan_en_unigram_1000.model")
    return load_gguf_tokenizer(_t5_from(model, tmp_path_factory.mktemp("t5") / "t5.gguf"))


def variant(tok: LlamaUGMTokenizer, flags: dict[str, bool], user: Sequence[str] = (),
            charsmap: bool = True) -> LlamaUGMTokenizer:
    """`tok`'s vocabulary with other flags, extra user-defined tokens, with or without the
    charsmap."""
    base = tok.vocab
    vocab = LlamaVocab(base.tokens + list(user), list(base.attrs) + [ATTR_USER_DEFINED] * len(user),
                       list(base.scores) + [0.0] * len(user), specials=dict(base.specials),
                       flags={**base.flags, **flags})
    return LlamaUGMTokenizer(vocab, tok.charsmap if charsmap else None)


@pytest.fixture(scope="module")
def variants(t5) -> list[LlamaUGMTokenizer]:
    """Every flag combination, with and without user-defined tokens, and without a charsmap."""
    out = [variant(t5, flags, user) for flags in FLAG_SETS for user in ([], USER_TOKENS)]
    return out + [variant(t5, flags, USER_TOKENS, charsmap=False) for flags in FLAG_SETS[::5]]


def assert_same(tok: LlamaUGMTokenizer, data: bytes) -> None:
    fast = tok.normalize(data)
    assert fast == tok._normalize_reference(data), data
    normalized, n2o = tok.normalize_columns(data)
    assert normalized == fast[0] and n2o.tolist() == fast[1] and str(n2o.dtype) == "int64"
    if len(data) <= 4 * SMALL_FRAGMENT:  # (an edit's region: plain Python)
        assert tok._normalize_small(data) == fast
    assert_inside(tok, data)


def assert_inside(tok: LlamaUGMTokenizer, data: bytes) -> None:
    """With `inside`, the bytes normalize as they do after a "," that opened the fragment's
    first word (a "," is in no longer key nor user-defined token: nothing joins it to what
    follows)."""
    flags = tok.vocab.flags
    assert tok.alone(",") == b","
    if flags.get("treat_whitespace_as_suffix") and flags.get("add_space_prefix"):
        return  # (a suffix space closes the fragment, not the ",")
    head = tok._normalize_reference(b",")[0]
    full, n2o = tok._normalize_reference(b"," + data)
    want = (full[len(head):], [o - 1 for o in n2o[len(head):]])
    assert tok._normalize_small(data, inside=True) == want, data
    normalized, offsets = tok.normalize_columns(data, inside=True)
    assert (normalized, offsets.tolist()) == want, data


def test_botchan_equals_reference(t5, variants):
    data = data_file("sentencepiece", "botchan.txt").read_bytes()
    assert_same(t5, data)
    assert_same(variants[-1], data[:20000])  # no charsmap, user-defined tokens
    assert_same(variant(t5, {"remove_extra_whitespaces": False}, USER_TOKENS), data[:20000])


def test_known_cases(t5, variants):
    cases = [b"", b" ", b"   ", b"a", b"  a  b ", b"\xff", b"\xc3", b"\xc3(", b"\xe2\x82",
             b"\x80\x80a", b"\xf8\x88\x80\x80\x80", b"a\x00b", "ｆｕｌｌ ﬁ ① ㌀".encode(),
             "e\u0301 a\u0300\u0301 ①x".encode(), b"<sep>ab", b"\xed\xa0\x80 \xc0\x80",
             "\udcff\udcfe".encode("utf-8", "surrogateescape")]
    for tok in [t5, *variants]:
        for data in cases:
            assert_same(tok, data)


def test_runs_stop_before_keys(t5):
    """Text NFKC leaves as it is goes in one run (the fast path is taken); a letter a
    combining mark follows is no run's last character (a key spans both), nor is a kana
    before a voicing mark, and a ligature starts none."""
    run = t5.plain_run()
    for text in ['Hello world,\t1 2\n3. "Botchan"!', "日本語のテキスト", "naïve café"]:
        assert run.match(text.encode()).end() == len(text.encode())
    assert run.match("テ\u3099".encode()) is None and run.match("ﬁ".encode()) is None
    data = "xe\u0301".encode()
    assert run.match(data).end() == 1
    assert t5.normalize(data)[0] == t5._normalize_reference(data)[0] == "▁xé".encode()
    assert plain_run_regex(None, b"").match(b"\xc3\xa9\xff").end() == 2  # lax UTF-8, no map


texts = st.lists(st.sampled_from(ALPHABET + USER_TOKENS), max_size=40).map("".join)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=texts, index=st.integers(min_value=0))
def test_texts_equal_reference(variants, text, index):
    data = text.encode("utf-8", "surrogateescape")
    assert_same(variants[index % len(variants)], data)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(data=st.binary(max_size=60), index=st.integers(min_value=0))
def test_bytes_equal_reference(variants, data, index):
    assert_same(variants[index % len(variants)], data)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(parts=st.lists(st.one_of(st.sampled_from(ALPHABET + USER_TOKENS).map(
    lambda s: s.encode("utf-8", "surrogateescape")), st.binary(max_size=3)), max_size=30),
       index=st.integers(min_value=0))
def test_mixed_equal_reference(variants, parts, index):
    assert_same(variants[index % len(variants)], b"".join(parts))
