"""`core.unigram_fast` against `sentencepiece.viterbi` (the readable reference: paths and the
float32 end score, bit for bit) and against the `sentencepiece` library itself.

The synthetic vocabularies are built to hit each way a cached word may not be reused: near
ties that float32 rounding decides otherwise (margin events), exact ties, scores that make
the path score cross SCORE_RESET inside words (rebase events) and at word starts (resets),
scores near FLT_MAX, tables only the whole-text `viterbi` handles (fallbacks), and a tiny
cache. Each test asserts its event counter, so a
check that is skipped or always passes fails a test.
"""
from __future__ import annotations

import math
import random
import struct

import numpy as np
import pytest
import sentencepiece as spm
from hypothesis import given, settings
from hypothesis import strategies as st

import forma_gui.core.unigram_fast as uf
from forma_gui.core.sentencepiece import f32, viterbi, viterbi_from
from forma_gui.core.unigram_fast import UnigramEncoder
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file

SPACE = "\u2581"
UNIGRAM = ("sentencepiece", "botchan_en_unigram_1000.model")
EXTRA = "Привет, мир! 日本語のテキストです。中文 한국어 😀👍🏽 ß þ ∑ ð € ① ½"


def make_vocab(pieces: dict[str, float]) -> tuple[dict[bytes, int], list[float]]:
    """`prefixes` and `scores` as `SentencePieceTokenizer._unigram_tables` builds them."""
    prefixes: dict[bytes, int] = {}
    for piece in pieces:
        key = piece.encode()
        for k in range(1, len(key)):
            prefixes.setdefault(key[:k], -1)
    for i, piece in enumerate(pieces):
        prefixes[piece.encode()] = i
    return prefixes, [f32(score) for score in pieces.values()]


def make_encoder(pieces: dict[str, float], unk_score: float = -60.0) -> UnigramEncoder:
    prefixes, scores = make_vocab(pieces)
    return UnigramEncoder(prefixes, scores, len(scores), f32(unk_score))


def bits(x: float) -> bytes:
    return struct.pack("<f", x)


def assert_same(enc: UnigramEncoder, data: bytes) -> None:
    """Same path (as pairs and as columns) and the same float32 end score (bit pattern)."""
    path, end = enc.encode_ended(data)
    ref_path, ref_end = viterbi_from(data, enc.prefixes, enc.scores, enc.unk_id, enc.unk_score, 0.0)
    assert path == ref_path
    assert bits(end) == bits(ref_end)
    columns = enc.encode_columns(data)
    assert columns.dtype == np.int64 and columns.shape == (len(path), 2)
    assert list(map(tuple, columns.tolist())) == ref_path


def text_of(words: list[str]) -> bytes:
    """Normalized-looking bytes: each word after a ``▁``."""
    return "".join(SPACE + w for w in words).encode()


def random_words(rng: random.Random, alphabet: str, count: int, lo: int = 1, hi: int = 6) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi))) for _ in range(count)]


@pytest.fixture(scope="module")
def botchan():
    tok = load_tokenizer(data_file(*UNIGRAM))
    text = data_file("sentencepiece", "botchan.txt").read_text("utf-8")
    return tok, text


def botchan_encoder(tok) -> UnigramEncoder:
    t = tok.tables()
    return UnigramEncoder(t["prefixes"], t["lattice_scores"], tok.model_unk, t["unk_score"])


# ---- numpy's float32 accumulate is the C++'s chain of float32 additions --------------------

def test_cumsum_is_sequential_float32():
    rng = np.random.default_rng(0)
    for _ in range(50):
        values = rng.uniform(-30, 5, rng.integers(1, 3000)).astype(np.float32)
        values[0] = np.float32(rng.uniform(-1e5, 1e5))
        chain = [float(values[0])]
        for v in values[1:]:
            chain.append(f32(chain[-1] + float(v)))
        assert np.cumsum(values, dtype=np.float32).tolist() == chain


# ---- real text with botchan's unigram model --------------------------------------------------

def test_botchan_text_equals_viterbi(botchan):
    tok, text = botchan
    enc = botchan_encoder(tok)
    parts = [text[:60_000], text[100_000:130_000] + EXTRA * 50, EXTRA, text[200_000:200_500]]
    for part in parts + parts:  # the second round runs warm
        assert_same(enc, tok.normalizer.normalize_offsets(part.encode())[0])
    assert enc.stats["learned"] > 1000 and enc.stats["margin"] > 0
    assert enc.stats["rebase"] + enc.stats["reset"] > 0
    assert enc.stats["fallback"] == 0


def test_long_runs_are_cut_before_characters_no_piece_continues_with(botchan):
    tok, _ = botchan
    enc = botchan_encoder(tok)
    data = tok.normalizer.normalize_offsets(("日本語のテキスト" * 400 + " abc").encode())[0]
    assert_same(enc, data)
    assert len(enc._model.split(data)) > 1000  # botchan's pieces hold no kana or kanji


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(st.sampled_from(["the", "a", " ", "  ", "Botchan", "said", ",", ".", "\n", "ing",
                                 "ж", "日本", "😀", "ß", "x" * 40, "e\u0301", "\ufffd", "10"]),
                max_size=60))
def test_botchan_hypothesis(botchan, parts):
    tok, _ = botchan
    data = tok.normalizer.normalize_offsets("".join(parts).encode())[0]
    enc = tok.tables()["unigram"]
    assert enc.encode(data) == viterbi(data, enc.prefixes, enc.scores, enc.unk_id, enc.unk_score)


def test_ids_equal_sentencepiece_library(botchan):
    tok, text = botchan
    lib = spm.SentencePieceProcessor(model_file=str(data_file(*UNIGRAM)))
    rng = random.Random(5)
    for _ in range(2500):
        start = rng.randrange(len(text))
        piece = text[start:start + rng.randint(0, 300)]
        if rng.random() < 0.3:
            at = rng.randint(0, len(piece))
            piece = piece[:at] + rng.choice(EXTRA.split()) + piece[at:]
        assert tok.encode(piece) == lib.encode(piece), piece


# ---- adversarial vocabularies ----------------------------------------------------------------

def test_near_ties_decided_by_float32_rounding():
    # exactly, "x" + "y" beats "xy" by 2^-20; at |b| > 16 float32 loses the 2^-20 and "xy",
    # reaching position 2 first, keeps it: only the margin check sends these words to viterbi
    enc = make_encoder({SPACE: -50.0, "x": -0.5, "y": -0.5 + 2.0 ** -20, "xy": -1.0, "z": -3.0})
    words = random_words(random.Random(1), "xyz", 4000)
    assert_same(enc, text_of(words))
    assert enc.stats["margin"] > 100


def test_rounding_errors_add_up_along_chains():
    # x = -(1 + 2^-8) lands halfway between float32 neighbours when |b| >= 2^16, and ties to
    # even round every step the same way: 8 x's gain ~8 half-ulps on "x"*8, which wins by 4
    # exactly; only the chain lengths in the margin (D / (n_w + n_k + 2)) catch that
    x = -(1 + 2.0 ** -8)
    enc = make_encoder({SPACE: -100.0, "x": x, "x" * 8: 8 * x + 2.0 ** -6})
    words = random_words(random.Random(9), "x", 3000, 6, 10)
    assert_same(enc, text_of(words))
    assert enc.stats["margin"] > 100


def tied_pieces() -> dict[str, float]:
    """Every string of up to three a/b, with and without a leading ▁, all scored alike: the
    lattice ties exactly everywhere."""
    pieces = {SPACE: -7.0}
    for n in (1, 2, 3):
        for k in range(2 ** n):
            s = "".join("ab"[(k >> i) & 1] for i in range(n))
            pieces[s] = pieces[SPACE + s] = -7.0
    return pieces


def test_exact_ties_everywhere():
    enc = make_encoder(tied_pieces())
    words = random_words(random.Random(2), "ab", 6000, 1, 9)
    assert_same(enc, text_of(words))
    assert enc.stats["margin"] > 100


def test_score_reset_at_word_starts():
    # one piece per word but for a 0.5 step: the path score crosses SCORE_RESET between words
    enc = make_encoder({SPACE: -0.5, "x": -999.0, "y": -1001.5, SPACE + "x": -998.25,
                        SPACE + "y": -1000.75, "xy": -1999.875})
    assert_same(enc, text_of(random_words(random.Random(8), "xy", 3000, 1, 2)))
    assert enc.stats["reset"] > 10


@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_score_reset_inside_words_and_at_word_starts(sign):
    rng = random.Random(3)
    pieces = {SPACE: sign * 1234.5678}
    for ch in "abcde":
        pieces[ch] = sign * f32(rng.uniform(2000, 4000))
    for pair in ("ab", "cd", "ea", "bb"):
        pieces[pair] = sign * f32(rng.uniform(4000, 8000))
    enc = make_encoder(pieces)
    words = random_words(rng, "abcde", 3000, 1, 40)
    assert_same(enc, text_of(words))
    assert enc.stats["rebase"] > 100 and enc.stats["reset"] > 0


def test_unknown_multibyte_and_zero_scores():
    rng = random.Random(4)
    pieces = {SPACE: -1.0, "é": -3.0, "жж": -4.0, "日本": -2.5, SPACE + "日": 0.0, "a": -2.0,
              "ab": 0.0, "b": -1.5, "本日": -1.25, "ж": -4.5}
    enc = make_encoder(pieces, unk_score=-14.5)
    alphabet = ["é", "ж", "日", "本", "a", "b", "q", "😀", "ß", "\u0301"]
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(3000)]
    long_run = "".join(rng.choice(alphabet) for _ in range(3000))  # > SUBSPLIT bytes, no ▁
    for data in (text_of(words), long_run.encode(), text_of(words[:50]) + long_run.encode()):
        assert_same(enc, data)
    assert enc.stats["fallback"] == 0


def test_piece_with_inner_space_turns_off_space_cuts():
    enc = make_encoder({SPACE: -1.0, "a": -2.0, "b": -2.0, "a" + SPACE + "b": -1.0, "c": -3.0})
    words = random_words(random.Random(6), "abcq", 400)
    assert_same(enc, text_of(words))
    assert enc._model._cut_space is False
    split = enc._model.split(text_of(words))
    assert len(split) > 400 and not any(w.startswith(SPACE.encode()) for w in split[1:])


def test_too_long_chains_go_to_viterbi(monkeypatch):
    monkeypatch.setattr(uf, "MAX_CHAIN", 3)
    enc = make_encoder({SPACE: -1.0, "a": -2.0, "b": -2.5, "ab": -4.0})
    assert_same(enc, text_of(random_words(random.Random(7), "ab", 500, 1, 8)))
    assert enc.stats["long"] > 0


def test_scores_near_float_max():
    # no score overflows (|score + base| <= FLT_MAX + 1e5 rounds to FLT_MAX), but no word
    # can be proven either: every one goes to viterbi_from
    enc = make_encoder({SPACE: -3e38, "a": -3.4e38, "b": -1.0, "ab": 3e38})
    assert_same(enc, text_of(["b", "a", "ab", "aab", "b"] * 20))
    assert enc.stats["margin"] > 0


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.dictionaries(st.text("ab\u2581é", min_size=1, max_size=4),
                       st.sampled_from([-1.0, -2.0, -0.5, -(1 + 2.0 ** -8), 0.0, 2.5, -7.25, -1e-30,
                                        -1e4, -3.3e4, 4.1e4]), min_size=1, max_size=12),
       st.text("ab\u2581éq", max_size=400), st.sampled_from([-20.0, -1e4, -3e38]))
def test_random_vocabularies(pieces, text, unk_score):
    assert_same(make_encoder(pieces, unk_score), text.encode())


@pytest.mark.parametrize("data", [b"\xe2\x96\x81a\xe2\xe2\x96\x81b", b"\xe2\x96\x81\xf0\xe2\x96\x81ab",
                                  b"a\xe2\x96", b"\xe2\x96\x81\xc3"])
def test_malformed_utf8(data):
    enc = make_encoder({SPACE: -1.0, "a": -2.0, "b": -2.0})
    assert_same(enc, data)


#: texts of arbitrary bytes (pieces, their parts, malformed UTF-8) over `BYTE_PIECES`
BYTE_CHUNKS = st.lists(st.sampled_from([b"\xe2\x96\x81", b"a", b"b", b"ab", b"\xe2", b"\x96", b"\x81",
                                        b"\xc3\xa9", b"\xff", b"\xf0\x9f\x98\x80", b"\xe2\x96"]), max_size=40)
BYTE_PIECES = {SPACE: -1.0, "a": -2.0, "b": -2.5, "ab": -4.5, "é": -1.0, SPACE + "a": -2.75}


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(BYTE_CHUNKS)
def test_arbitrary_bytes(chunks):
    assert_same(make_encoder(BYTE_PIECES), b"".join(chunks))


def test_pieces_that_are_not_utf8_or_scores_that_are_not_float32_fall_back():
    prefixes, scores = make_vocab({SPACE: -1.0, "a": -2.0})
    prefixes[b"a\xe2"] = 2
    enc = UnigramEncoder(prefixes, scores + [-1.0], 3, -20.0)
    data = b"\xe2\x96\x81aa\xe2\x96\x81a"
    assert_same(enc, data)
    enc = UnigramEncoder(*make_vocab({SPACE: -1.0, "a": -2.0}), 2, 0.1)  # 0.1 is no float32
    assert_same(enc, data)
    assert enc.stats["fallback"] > 0


def test_small_cache(botchan, monkeypatch):
    monkeypatch.setattr(uf, "CACHE_WORDS", 50)
    tok, text = botchan
    enc = botchan_encoder(tok)
    learned = []
    for part in (text[:5000], text[5000:12000], text[:5000], text[:5000] + " zzq", text[:5000]):
        before = enc.stats["learned"]
        assert_same(enc, tok.normalizer.normalize_offsets(part.encode())[0])
        learned.append(enc.stats["learned"] - before)
    # the text's own words outnumber the cache: kept, an edit learns only its new word, and
    # the words dropped are those the text does not use
    assert learned[2:] == [0, 1, 0]
    words = set(enc._model.split(tok.normalizer.normalize_offsets(text[:5000].encode())[0]))
    assert set(enc._index) == words | {"▁zzq".encode()}


def test_small_slices(botchan, monkeypatch):
    # the C-level passes cut into slices (the GUI thread gets the lock in between) give the
    # same words and tokens as one pass
    import forma_gui.core.slices as slices

    tok, text = botchan
    data = tok.normalizer.normalize_offsets((text[:3000] + EXTRA * 9).encode())[0]
    enc = botchan_encoder(tok)
    pairs = enc.encode(data)
    words = enc._model.split(data)
    for module, name, size in ((uf, "WORD_SLICE", 7), (uf, "SLICE", 3), (slices, "SLICE", 5)):
        monkeypatch.setattr(module, name, size)
    enc.clear_cache()
    assert enc._model.split(data) == words and b"".join(words) == data
    assert enc.encode(data) == pairs


def test_a_second_thread_does_not_wait_for_the_cache(botchan):
    """While one thread holds the word cache, another gets `viterbi`'s result at once."""
    enc = botchan_encoder(botchan[0])
    data = "▁The▁cat▁sat.".encode()
    expected = viterbi(data, enc.prefixes, enc.scores, enc.unk_id, enc.unk_score)
    with enc._lock:  # as a worker encoding a document would
        assert enc.encode(data) == expected
        assert enc.stats["learned"] == 0 and enc.stats["fallback"] == 1
    assert enc.encode(data) == expected and enc.stats["learned"] > 0


# ---- live edits: encode_live from any start score, and the one-number bounds ---------------

def assert_live(enc: UnigramEncoder, data: bytes, start: float) -> None:
    """`encode_live` from `start`: `viterbi_from`'s path and end score, and before each token
    (unless NaN, inside a word viterbi_from segmented) the path score `viterbi_from` of the
    bytes before it reaches; a bound only at word starts."""
    run = enc.encode_live(data, start)
    ref, ref_end = viterbi_from(data, enc.prefixes, enc.scores, enc.unk_id, enc.unk_score, start)
    assert list(map(tuple, run.tokens.tolist())) == ref and bits(run.end) == bits(ref_end)
    offset = 0
    for k, (_, length) in enumerate(ref):
        if not np.isnan(run.before[k]):
            reached = viterbi_from(data[:offset], enc.prefixes, enc.scores, enc.unk_id, enc.unk_score, start)[1]
            assert bits(run.before[k]) == bits(reached)
        offset += length
    assert len(run.bound) == len(ref) and (not ref or not np.isnan(run.bound[0]))


START = st.sampled_from([0.0, f32(3.5), f32(-1234.5), f32(-99_990.0), f32(-100_001.0), f32(-3e6)])


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.dictionaries(st.text("ab\u2581é", min_size=1, max_size=4),
                       st.sampled_from([-1.0, -2.0, -0.5, -(1 + 2.0 ** -8), 0.0, -7.25, -1e4, -3.3e4]),
                       min_size=1, max_size=12),
       st.lists(st.text("ab\u2581éq", max_size=6), max_size=120), START)
def test_encode_live_from_any_start_score(pieces, words, start):
    """Few words go word by word in Python, many through the numpy passes: both agree with
    `viterbi_from` from the same start (resets at word starts and inside words included)."""
    assert_live(make_encoder(pieces, -30.0), text_of(words), start)


def test_encode_live_on_botchan(botchan):
    tok, text = botchan
    enc = botchan_encoder(tok)
    data = tok.normalizer.normalize_offsets((text[:6000] + EXTRA).encode())[0]
    for start in (0.0, f32(-99_950.0), f32(-2e5)):
        assert_live(enc, data, start)
    assert enc.stats["limit"] + enc.stats["margin"] + enc.stats["rebase"] > 0


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.floats(-40, 12), st.floats(-5, 17), st.integers(1, 400), st.sampled_from(["float32", "float64"]),
       st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_limits_prove_the_checks(log_margin, log_reach, n_max, kind, fraction, inner_part, n_part):
    """`limits()` is conservative: every |start| up to it passes `checks`; and tight: a
    little past it one of them fails (for float32, where the bound is finite). The winners
    inside the word (inner, n_inner) are at most every candidate's reach and chain."""
    arithmetic = uf.FLOAT32 if kind == "float32" else uf.float64_arithmetic(viterbi_from)
    one = lambda v: np.array([v], dtype=np.float64)  # noqa: E731
    margin, reach = one(2.0 ** log_margin), one(2.0 ** log_reach)
    grow = one(1 / (1 - n_max * 2.0 ** -arithmetic.mantissa) * (1 + 2.0 ** -50))
    inner, n_inner = reach * inner_part, one(float(int(n_max * n_part)))
    bound = uf.limits(margin, reach, one(n_max), grow, arithmetic, inner, n_inner)[0]
    args = (margin, reach, one(n_max), grow, arithmetic, inner, n_inner)
    if bound == -np.inf:
        assert any(c[0] for c in uf.checks(one(0.0), *args)) or reach[0] > 9e4
        return
    tied, crossing = uf.checks(one(bound * fraction), *args)
    assert not tied[0] and not crossing[0]
    if kind == "float32":
        tied, crossing = uf.checks(one(bound * 1.01 + 1e-30), *args)
        assert tied[0] or crossing[0]
    # every candidate (the looser crossing check) never allows more
    assert uf.limits(margin, reach, one(n_max), grow, arithmetic)[0] <= bound


def test_a_reset_is_ruled_out_by_the_winners_inside_the_word():
    """A word whose end score passes SCORE_RESET while no position inside it does: no reset
    inside, so the cached path and the plain float32 sum hold, with no `viterbi_from`. Its
    inner winners reach 11 (after ``▁`` and ``a``), its end 31."""
    enc = make_encoder({SPACE: -1.0, "a": -10.0, "b": -20.0})
    word = (SPACE + "ab").encode()
    assert enc.encode(word) == [(0, 3), (1, 1), (2, 1)]  # (which also analyses the vocabulary)
    margin, reach, n_max, grow, inner, n_inner, aligned = enc._learn(word)[2:]
    assert (reach, n_max) == (pytest.approx(31.0), 3.0) and (inner, n_inner) == (pytest.approx(11.0), 2.0)
    start = f32(-(uf.SCORE_RESET - 20.0))  # the end passes the reset, the inside does not
    one = lambda v: np.array([v], dtype=np.float64)  # noqa: E731
    args = (one(margin), one(reach), one(n_max), one(grow), uf.FLOAT32)
    assert uf.checks(one(-start), *args)[1][0]  # every candidate: a crossing is not ruled out
    assert not uf.checks(one(-start), *args, one(inner), one(n_inner))[1][0]
    data = word * 3
    assert_live(enc, data, start)
    assert enc.stats["rebase"] == 0 and enc.stats["limit"] == 0
    path, end = viterbi_from(word, enc.prefixes, enc.scores, enc.unk_id, enc.unk_score, start)
    assert bits(end) == bits(f32(f32(f32(start - 1.0) - 10.0) - 20.0))  # no reset inside


_EDGES = [0.0, -0.0, math.inf, -1.0, math.nan, 5e-324, 2.0 ** -126, 0.5, 1.0, 3.0, 9e4, 1e5, 2.0 ** 17, 3.4e38, 1e300]


@settings(max_examples=MAX_EXAMPLES * 4, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(_EDGES),
                 st.floats(-40, 12).map(lambda e: 2.0 ** e)),
       st.one_of(st.floats(0, 1e6), st.sampled_from(_EDGES), st.floats(-5, 17).map(lambda e: 2.0 ** e)),
       st.integers(0, 400), st.sampled_from(["float32", "float64"]))
def test_limit_one_is_limits(margin, reach, n_max, kind):
    """`limit_one` (an edit's few words, in Python floats) gives `limits`'s bound to the bit,
    edge values included (no margin, an infinite one, NaN, subnormals, the largest floats)."""
    arithmetic = uf.FLOAT32 if kind == "float32" else uf.float64_arithmetic(viterbi_from)
    grow = 1 / (1 - n_max * 2.0 ** -arithmetic.mantissa) * (1 + 2.0 ** -50)
    one = lambda v: np.array([v], dtype=np.float64)  # noqa: E731
    for inner, n_inner in ((None, None), (reach / 3, float(n_max // 2))):
        expected = float(uf.limits(one(margin), one(reach), one(float(n_max)), one(grow), arithmetic,
                                   None if inner is None else one(inner),
                                   None if n_inner is None else one(n_inner))[0])
        found = uf.limit_one(margin, reach, float(n_max), grow, arithmetic, inner, n_inner)
        assert found == expected or math.isnan(found) and math.isnan(expected), (found, expected)


@pytest.mark.parametrize("seed", range(3))
def test_resegment_at_each_reset_step_equals_viterbi(seed):
    """Starts that put the value at each step just under, at and just over the reset: the
    result kept per step the reset falls at (`reset_key`) is `viterbi_from`'s, bit for bit,
    whichever start of the step filled it."""
    from forma_gui.core.sentencepiece import lattice_steps, viterbi_arrays, viterbi_steps

    rng = random.Random(seed)
    grid = 2.0 ** -7  # float32 spacing in [65536, 131072)
    checked = 0
    for _ in range(25):
        pieces = {(SPACE if rng.random() < 0.3 else "") + "".join(rng.choice("abcd") for _ in range(rng.randint(1, 3))):
                  f32(rng.uniform(-12, -0.1)) for _ in range(rng.randint(3, 12))}
        enc = make_encoder(pieces, -30.0)
        for _ in range(6):
            word = (SPACE + "".join(rng.choice("abcdx") for _ in range(rng.randint(1, 12)))).encode()
            steps = lattice_steps(word, enc.prefixes)
            best = viterbi_arrays(steps, len(word), enc.scores, enc.unk_id, enc.unk_score, -70_000.0)[0]
            starts = [-1e5 - (best[i] + 70_000.0) + k * grid for i, _, _, _ in steps for k in (-1, 0, 1)]
            starts = [x for x in starts if -1e5 - 1 < x < -65_536.0 + 1000.0]
            for start in rng.sample(starts, len(starts)) + rng.sample(starts, len(starts)):
                want = viterbi_steps(steps, len(word), enc.scores, enc.unk_id, enc.unk_score, start)
                path, end = enc.resegment(word, start)
                assert path == want[0] and bits(end) == bits(want[1]), (word, start)
                checked += 1
        assert any(w.by_reset for w in enc._steps.values())
    assert checked > 1000


def test_encode_live_waits_for_the_cache_only_when_asked(botchan):
    """An edit's region never waits for a worker's encode (None at once); a whole text's live
    columns wait a little (a worker's encode of a document is soon done)."""
    import threading

    enc = botchan_encoder(botchan[0])
    data = "▁The▁cat▁sat.".encode()
    enc._lock.acquire()
    threading.Timer(0.3, enc._lock.release).start()
    assert enc.encode_live(data) is None and enc._lock.locked()  # returned before the release
    run = enc.encode_live(data, wait=30.0)
    assert run is not None and list(map(tuple, run.tokens.tolist())) == viterbi(
        data, enc.prefixes, enc.scores, enc.unk_id, enc.unk_score)


@pytest.mark.parametrize("seed", range(3))
def test_resegment_per_binade_equals_viterbi(seed):
    """`resegment` keeps a word's result per binade of the start score; from any start it is
    `viterbi_from`'s, bit for bit: near ties, scores that round halfway on some binade's grid
    (-(1 + 2^-8): not kept there), starts at binade edges, and around the reset (kept per step
    the reset falls at: `reset_key`), past it and at +0."""
    from forma_gui.core.sentencepiece import lattice_steps, viterbi_steps

    rng = random.Random(seed)
    kept = by_reset = 0
    for _ in range(60):
        pieces = {}
        for _ in range(rng.randint(3, 16)):
            piece = "".join(rng.choice("abcd-") for _ in range(rng.randint(1, 4)))
            pieces[(SPACE if rng.random() < 0.3 else "") + piece] = rng.choice(
                [-1.0, -2.0, -1.5, -1.0000001, -(1 + 2.0 ** -8), -(1 + 2.0 ** -12), f32(rng.uniform(-12, -0.1))])
        enc = make_encoder(pieces, rng.choice([-60.0, -7.5]))
        for _ in range(20):
            word = (SPACE + "".join(rng.choice("abcd-x") for _ in range(rng.randint(1, 10)))).encode()
            for _ in range(10):
                e = rng.randint(-3, 16)
                start = -f32(rng.choice([rng.uniform(2.0 ** e, 2.0 ** (e + 1)), 2.0 ** e, 99_999.0,
                                         rng.uniform(99_850.0, 100_010.0), 100_000.0, 100_000.0078125,
                                         rng.uniform(100_000.0, 131_000.0), -rng.uniform(99_900.0, 100_010.0)]))
                start = rng.choice([start, start, start, 0.0, -0.0])
                want = viterbi_steps(lattice_steps(word, enc.prefixes), len(word), enc.scores, enc.unk_id,
                                     enc.unk_score, start)
                path, end = enc.resegment(word, start)
                assert path == want[0] and bits(end) == bits(want[1])
        kept += sum(len(w.by_binade) for w in enc._steps.values())
        by_reset += sum(len(w.by_reset) for w in enc._steps.values())
    assert kept > 300 and by_reset > 300
    halfway = uf._SteppedWord(lattice_steps(b"a", {b"a": 0}), [-(1 + 2.0 ** -8)], -20.0)
    assert halfway.binade(-70_000.0) is None and halfway.binade(-3000.0) == 11  # grid 2^-7 vs 2^-12
