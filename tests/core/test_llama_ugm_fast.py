"""`core.unigram_fast` in its float64 mode against llama.cpp's UGM Viterbi
(`llama_tokenizers.ugm_viterbi_from`, the readable reference: paths and the double end score,
bit for bit), and `LlamaUGMTokenizer`'s per-word encode against its whole-text `_viterbi`.

With doubles, rounding decides a near tie only at large path scores (an ulp of 2^-20 needs
|b| >= 2^33), so the adversarial vocabularies push the score there first. Each test asserts
its event counter, so a check that is skipped or always passes fails a test.
"""
from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core.llama_tokenizers import collapse_unknown_runs, ugm_viterbi_from
from forma_gui.core.llama_vocab import char_spans
from forma_gui.core.sentencepiece import f32
from forma_gui.core.unigram_fast import UnigramEncoder, float64_arithmetic
from forma_gui.formats.gguf_tokenizer import load_gguf_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.core.test_unigram_fast import BYTE_CHUNKS, BYTE_PIECES, make_vocab, random_words, text_of, tied_pieces
from tests.formats.test_gguf_tokenizer import _t5_from

SPACE = "\u2581"
LLAMA = float64_arithmetic(ugm_viterbi_from)


def make_encoder(pieces: dict[str, float], unk_score: float = -60.0,
                 unk_id: int | None = None) -> UnigramEncoder:
    prefixes, scores = make_vocab(pieces)
    return UnigramEncoder(prefixes, scores, len(scores) if unk_id is None else unk_id,
                          unk_score, LLAMA)


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def assert_same(enc: UnigramEncoder, data: bytes) -> list[tuple[int, int]]:
    """Same path (as pairs and as columns) and the same double end score (bit pattern)."""
    path, end = enc.encode_ended(data)
    ref_path, ref_end = ugm_viterbi_from(data, enc.prefixes, enc.scores, enc.unk_id,
                                         enc.unk_score, 0.0)
    assert path == ref_path
    assert bits(end) == bits(ref_end)
    columns = enc.encode_columns(data)
    assert columns.dtype == np.int64 and columns.shape == (len(path), 2)
    assert list(map(tuple, columns.tolist())) == ref_path
    return ref_path


def generic_path(enc: UnigramEncoder, words: list[bytes]) -> list[tuple[int, int]]:
    """Each word's path from score 0, concatenated: what reuse without the checks gives."""
    out: list[tuple[int, int]] = []
    for word in words:
        out += ugm_viterbi_from(word, enc.prefixes, enc.scores, enc.unk_id, enc.unk_score, 0.0)[0]
    return out


# ---- numpy's float64 accumulate is Python's chain of double additions ------------------------

def test_cumsum_is_sequential_float64():
    rng = np.random.default_rng(0)
    for _ in range(50):
        values = rng.uniform(-30, 5, rng.integers(1, 3000)) * 10.0 ** rng.integers(-3, 14)
        values[0] = rng.uniform(-1e15, 1e15)
        chain = [float(values[0])]
        for v in values[1:]:
            chain.append(chain[-1] + float(v))
        assert np.cumsum(values, dtype=np.float64).tolist() == chain


# ---- adversarial vocabularies ----------------------------------------------------------------

def test_near_ties_decided_by_double_rounding():
    # exactly, "x" + "y" beats "xy" by 2^-20; once |b| > 2^33 a double loses the 2^-20 and
    # "xy", reaching position 2 first, keeps it: only the margin check catches these words
    enc = make_encoder({SPACE: -1e9, "x": -0.5, "y": -0.5 + 2.0 ** -20, "xy": -1.0, "z": -3.0})
    words = text_of(random_words(random.Random(1), "xyz", 4000))
    path = assert_same(enc, words)
    assert enc.stats["margin"] > 100
    assert path != generic_path(enc, [SPACE.encode() + w for w in words.split(SPACE.encode())[1:]])


def test_rounding_errors_add_up_along_chains():
    # "▁s" lifts b into [2^45, 2^46) (a piece that low would lose to the unknown one); there
    # x = -(1 + 2^-8) lands halfway between doubles and ties to even round every step alike:
    # "x"*8 wins by 2^-6 exactly, 8 additions drift by 2^-5; only the chain lengths in the
    # margin (D / (n_w + n_k)) catch that
    x = -(1 + 2.0 ** -8)
    enc = make_encoder({SPACE: -100.0, SPACE + "s": 1.5 * 2.0 ** 45, "x": x,
                        "x" * 8: 8 * x + 2.0 ** -6})
    data = (SPACE + "s").encode() + text_of(random_words(random.Random(9), "x", 3000, 6, 10))
    assert_same(enc, data)
    assert enc.stats["margin"] > 100


def test_exact_ties_everywhere():
    enc = make_encoder(tied_pieces())
    assert_same(enc, text_of(random_words(random.Random(2), "ab", 6000, 1, 9)))
    assert enc.stats["margin"] > 100


def test_no_reset_past_score_reset():
    # sentencepiece would rebase past 1e5; llama.cpp never does, so nothing is an event here
    enc = make_encoder({SPACE: -999.0, "a": -1001.5, "b": -2.25, "ab": -1003.75})
    assert_same(enc, text_of(random_words(random.Random(8), "ab", 3000, 1, 6)))
    assert enc.stats["reset"] == enc.stats["rebase"] == 0 and enc.stats["learned"] > 10


@pytest.mark.parametrize("unk_id", [None, -1])
def test_unknown_multibyte_and_zero_scores(unk_id):
    pieces = {SPACE: -1.0, "при": -2.0, "п": -3.0, "р": -3.0, "и": -3.0, "日本": 0.0, "語": -4.5,
              "é": -1.25, SPACE + "é": -1.0}
    enc = make_encoder(pieces, -14.0, unk_id)
    words = random_words(random.Random(4), "приве日本語éq😀", 3000, 1, 8)
    assert_same(enc, text_of(words))
    assert enc.stats["learned"] > 100


@pytest.mark.parametrize("score", [-1e300, 2.0 ** 961, float("-inf")])
def test_scores_past_the_bound_fall_back_to_the_whole_text(score):
    # past 2^960 a long enough text could overflow to -inf, and llama.cpp's -DBL_MAX start
    # would leave positions unreached: only the whole-text Viterbi is exact then
    prefixes, scores = make_vocab({SPACE: -1.0, "a": -1.0})
    scores[1] = score
    enc = UnigramEncoder(prefixes, scores, 2, -60.0, LLAMA)
    assert_same(enc, text_of(["a", "aa"]))  # encode_ended and encode_columns: two fallbacks
    assert enc.stats["fallback"] == 2
    prefixes, scores = make_vocab({SPACE: -1.0, "a": -(2.0 ** 960)})
    enc = UnigramEncoder(prefixes, [-1.0, -(2.0 ** 960)], 2, -60.0, LLAMA)
    assert_same(enc, text_of(["a", "aa"]))
    assert enc.stats["fallback"] == 0


_SCORES = [-1.0, -2.0, -0.5, -(1 + 2.0 ** -8), 0.0, 2.5, -7.25, -1e-30, f32(-1e12), f32(-3.3e13),
           f32(4.1e12), -(2.0 ** 45), -(2.0 ** 45) - 1.0]


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.dictionaries(st.text("ab\u2581é", min_size=1, max_size=4), st.sampled_from(_SCORES),
                       min_size=1, max_size=12),
       st.text("ab\u2581éq", max_size=400), st.sampled_from([-20.0, f32(-1e13), -3e38]),
       st.sampled_from([None, -1]))
def test_random_vocabularies(pieces, text, unk_score, unk_id):
    assert_same(make_encoder(pieces, unk_score, unk_id), text.encode())


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(BYTE_CHUNKS)
def test_arbitrary_bytes(chunks):
    assert_same(make_encoder(BYTE_PIECES), b"".join(chunks))


# ---- the unknown-run collapse ----------------------------------------------------------------

def collapse_backwards(pairs: list[tuple[int, int]], unk: int) -> list[tuple[int, int, int]]:
    """llama.cpp's backtracking loop, transcribed: (id, start, end), unknown runs merged."""
    ends = list(np.cumsum([length for _, length in pairs]).tolist())
    out: list[tuple[int, int, int]] = []
    for (token, length), end in reversed(list(zip(pairs, ends))):
        if out and token == unk and out[-1][0] == unk:
            out[-1] = (unk, end - length, out[-1][2])
        else:
            out.append((token, end - length, end))
    return out[::-1]


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([-1, 0, 3, 7]), st.integers(1, 4)), max_size=30),
       st.sampled_from([-1, 0, 3]))
def test_collapse_equals_the_backtracking_loop(pairs, unk):
    ids, starts, ends = collapse_unknown_runs([i for i, _ in pairs], [n for _, n in pairs], unk)
    assert list(zip(ids.tolist(), starts.tolist(), ends.tolist())) == collapse_backwards(pairs, unk)


# ---- LlamaUGMTokenizer on real text ------------------------------------------------------------

@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    model = data_file("sentencepiece", "botchan_en_unigram_1000.model")
    return load_gguf_tokenizer(_t5_from(model, tmp_path_factory.mktemp("t5") / "t5.gguf"))


def reference_spans(tok, text: str) -> list[tuple[int, int, int]]:
    """The byte spans `_fragment_spans` made from `_viterbi` before the per-word path."""
    data = text.encode("utf-8", "surrogatepass")
    normalized, n2o = tok.normalize(data)
    spans = []
    for token, b, e in tok._viterbi(normalized):
        if token >= 0:
            ob = n2o[b]
            oe = n2o[e] if e < len(n2o) else len(data)
            spans.append((token, ob, max(ob, oe)))
    return spans


def test_botchan_fast_path_equals_viterbi(t5):
    text = data_file("sentencepiece", "botchan.txt").read_text("utf-8")[:150_000]
    text += " ßþ unknown runs ∑∑∑ 日本語 😀👍🏽 "
    normalized = t5.normalize(text.encode())[0]
    ids, starts, ends = t5._segments(normalized)
    assert list(zip(ids.tolist(), starts.tolist(), ends.tolist())) == t5._viterbi(normalized)
    enc = t5.tables()["unigram"]
    assert enc.stats["fallback"] == 0 and enc.stats["learned"] > 1000
    expected = reference_spans(t5, text)
    assert t5.encode(text) == [t for t, _, _ in expected]
    assert t5._fragment_spans(text, 0, len(text), False) == char_spans(text, 0, expected, text.encode())


@pytest.mark.parametrize("text", ["  Hello   world ", "ßþ unknown runs ∑∑∑", "a∑b", "∑",
                                  "ｆｕｌｌwidth ﬁ", "日本語 😀👍🏽"])
def test_spans_equal_the_reference(t5, text):
    expected = char_spans(text, 0, reference_spans(t5, text), text.encode())
    assert t5._fragment_spans(text, 0, len(text), False) == expected


@pytest.mark.parametrize("extra", ["", " ßþ ∑∑∑ 日本語 😀👍🏽 \ud800 x \x00 ﬁ ｆｕｌｌ \u200b "])
def test_long_fragment_columns_equal_the_reference(t5, extra):
    """A long fragment's numpy columns (the whole-text path: characters from a count of UTF-8
    lead bytes) against the reference Viterbi's spans through `char_spans`, ASCII only (byte
    offsets are character offsets) and with characters of every UTF-8 length, a lone
    surrogate, a NUL and characters nmt_nfkc maps; `_fragment_spans` gives the same."""
    from forma_gui.core.llama_tokenizers import SMALL_FRAGMENT

    text = data_file("sentencepiece", "botchan.txt").read_text("utf-8")[:16_000]
    text = "".join(ch for ch in text if ch.isascii())
    text = text[:8_000] + extra + text[8_000:]
    assert len(text) > SMALL_FRAGMENT and text.isascii() == (not extra)
    fragment = text[7:-3]
    expected = char_spans(text, 7, reference_spans(t5, fragment), fragment.encode("utf-8", "surrogatepass"))
    ids, starts, ends = t5._fragment_columns(text, 7, len(text) - 3, True)
    assert list(zip(map(int, ids), map(int, starts), map(int, ends))) == expected
    assert t5._fragment_spans(text, 7, len(text) - 3, True) == expected
