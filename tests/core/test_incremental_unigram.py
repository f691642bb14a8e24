"""Live edits with SentencePiece unigram .model files: after every edit the ids equal a
from-scratch `encode` and the `sentencepiece` library's, the tokens equal `segment`, and the
path score kept before each token is the one a fresh encode keeps (where both keep one).

The region between two cuts around an edit starts from the path score before it; the tokens
after it are walked (`IncrementalEncoder._walk`) until the path scores meet again. The
variants make each part of the walk run often: scores scaled so that the score reset (at
1e5) falls every few words, inside words and at word starts; tied scores (exact ties that
float32 rounding decides, words `viterbi_from` segments again from their tokens' bytes);
byte fallback (an unknown piece's bytes come from its byte pieces); runs of unknown
characters merged into one <unk> (their text comes from `UnknownTexts`), and long CJK runs
cut into one-character words inside such a run.
"""
from __future__ import annotations

import functools
import math
import random
from array import array

import numpy as np
import pytest
import sentencepiece as spm
from hypothesis import assume, given, strategies as st
from sentencepiece import sentencepiece_model_pb2 as pb

from forma_gui.core import incremental as inc
from forma_gui.core.sentencepiece import SPACE
from forma_gui.formats.sentencepiece_model import load_sentencepiece
from tests.conftest import data_file
from tests.core.incremental_checks import EDIT_SETTINGS, check, random_edits
from tests.core.test_incremental_sentencepiece import LINE, PIECES, _byte_fallback, _identity, _spaces_kept, \
    _suffix, _unescaped, _unused, _user

UNIGRAM = "botchan_en_unigram_1000.model"
#: what a unigram walk meets: exact ties ("---": "-" + "--" or "--" + "-"), characters the model
#: lacks (one <unk>, runs of them, a long CJK run cut into one-character words), code
ALPHABET = PIECES + ["---", "-------", "+", "+---+", "\n#", "were", "the ", "x", " ", "  ", "_", "|", ".",
                     "東" * 50, "+\n#"]
TEXT = st.lists(st.sampled_from(ALPHABET), max_size=30).map("".join)
INSERT = st.lists(st.sampled_from(ALPHABET), max_size=2).map("".join) | st.text(max_size=2)


def _scaled(model) -> None:
    """Scores x400: the score reset every few words."""
    for piece in model.pieces:
        if piece.type == 1:
            piece.score *= 400


def _tied(model) -> None:
    """Scores rounded to whole numbers: exact ties everywhere."""
    for piece in model.pieces:
        if piece.type == 1:
            piece.score = float(round(piece.score))


VARIANTS = {
    "botchan": [],
    "scores x400": [_scaled],
    "tied scores": [_tied],
    "tied, x400": [_tied, _scaled],
    "byte fallback": [_byte_fallback],
    "byte fallback, x400": [_byte_fallback, _scaled],
    "user pieces, dummy suffix": [_user, _suffix],
    "spaces kept, unused pieces": [_spaces_kept, _unused],
    "no escaping, identity normalizer": [_unescaped, _identity],
}


@functools.cache
def _variants(folder: str) -> dict:
    from pathlib import Path

    out = {}
    for k, (label, edits) in enumerate(VARIANTS.items()):
        model = pb.ModelProto()
        model.ParseFromString(data_file("sentencepiece", UNIGRAM).read_bytes())
        for edit in edits:
            edit(model)
        path = Path(folder) / f"unigram{k}.model"
        path.write_bytes(model.SerializeToString())
        out[label] = (load_sentencepiece(path), spm.SentencePieceProcessor(model_file=str(path)))
    return out


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    return _variants(str(tmp_path_factory.mktemp("unigram_variants")))


def scores(enc) -> np.ndarray:
    """The path score before each token start, as the encoder gives it (`_score_at`)."""
    return np.array([enc._score_at(s + enc._offset) for s in sorted(set(enc.starts))])


def check_scores(enc, tok, text: str, library=None) -> None:
    """`check`, and the path scores before the tokens are those of a fresh encode (where both
    know one), which knows one wherever it checked a word."""
    check(enc, tok, text, library)
    fresh = inc.IncrementalEncoder(tok, text, special=enc.special)
    ours, theirs = scores(enc), scores(fresh)
    both = ~np.isnan(ours) & ~np.isnan(theirs)
    assert (ours[both] == theirs[both]).all()
    assert list(enc._count) == list(fresh._count) and list(enc._adds) == list(fresh._adds)


def test_unigram_models_edit_locally():
    tok = load_sentencepiece(data_file("sentencepiece", UNIGRAM))
    assert inc.local_edits(tok) and inc.local_edits(tok, True) and not inc.supports_edits(tok)
    assert tok.edit_reason() == ""


@EDIT_SETTINGS
@given(label=st.sampled_from(sorted(VARIANTS)), text=TEXT, data=st.data(), special=st.booleans())
def test_random_edits_equal_a_fresh_encode_and_the_library(variants, label, text, data, special):
    tok, library = variants[label]
    enc = inc.IncrementalEncoder(tok, text, special=special)
    assert enc.incremental
    check_scores(enc, tok, text, library)
    random_edits(enc, tok, text, data, INSERT, library=library, checker=check_scores)
    assert enc.full_encodes == 0


@pytest.mark.parametrize("label", ["botchan", "scores x400", "tied, x400", "byte fallback, x400"])
def test_random_edits_in_a_long_text(variants, label):
    """Many words after each edit: the walk sums them a window at a time, segments exact ties
    and words with a reset inside again, and re-encodes from the text what it cannot."""
    tok, library = variants[label]
    rng = random.Random(label)
    text = (LINE + "+-------+-------+\n# were ---- 東京" * 3) * 12
    enc = inc.IncrementalEncoder(tok, text)
    for k in range(40):
        start = rng.randrange(len(text) + 1)
        removed = rng.randint(0, min(3, len(text) - start))
        inserted = rng.choice(["x", " ", "", "-", "+", "\n", "東", "the", "é"])
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        if k % 8 == 7:
            check_scores(enc, tok, text, library)
    check_scores(enc, tok, text, library)
    assert enc.full_encodes == 0


@pytest.mark.parametrize("label", ["scores x400", "tied, x400", "byte fallback, x400"])
def test_typing_replays_the_chains_kept_between_resets(variants, label):
    """Keystrokes at one place walk the same chains from a reset to the next again: the walk
    replays them (`core.chain_memo`), and every edit still gives the ids and path scores of a
    fresh encode; an encoder that never replays ends with the same columns."""
    tok, library = variants[label]
    rng = random.Random(label)
    text = (LINE + "+-------+-------+\n# were ---- 東京" * 3) * 12
    enc, plain = inc.IncrementalEncoder(tok, text), inc.IncrementalEncoder(tok, text)
    plain._chains.get = lambda first, start: None
    for k in range(48):
        if k % 16 == 0:
            at = rng.randrange(len(text) // 2)
        start, removed = at + rng.randint(0, 3), rng.randint(0, 1)
        inserted = rng.choice(["x", "-", " ", "e", ""])
        for e in (enc, plain):
            e.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        check_scores(enc, tok, text, library)
    assert enc._chains.hits > 0
    assert list(enc.ids) == list(plain.ids) and list(enc.starts) == list(plain.starts)
    words = ~np.isnan(np.asarray(enc._bound))
    assert (np.asarray(enc._before)[words] == np.asarray(plain._before)[words]).all()
    assert enc.full_encodes == plain.full_encodes == 0


def test_the_walk_stops_where_the_scores_meet(variants):
    """An edit that leaves the path score after its region unchanged re-encodes only the
    region; one that changes it walks on, and the splice covers the tokens that changed."""
    tok, library = variants["botchan"]
    text = "It was a fine day. " * 200
    enc = inc.IncrementalEncoder(tok, text)
    enc.apply_edit(10, 0, "x")   # "fixne": another score after the region
    text = text[:10] + "x" + text[10:]
    check_scores(enc, tok, text, library)
    assert enc.last_splice.removed < 10 and enc.last_splice.added < 10
    before = list(enc._before)
    enc.apply_edit(10, 1, "")
    text = text[:10] + text[11:]
    check_scores(enc, tok, text, library)
    assert list(enc._before) != before  # the scores after the edit moved back


def test_local_only_hands_long_walks_to_the_worker(variants, monkeypatch):
    """With local_only a walk that would segment more words again than WALK_WORDS raises
    EditNotLocal; the encoder then re-encodes on the next edit."""
    tok, library = variants["tied, x400"]
    text = "--- +---+ were " * 400
    enc = inc.IncrementalEncoder(tok, text)
    monkeypatch.setattr(inc, "WALK_WORDS", 2)
    with pytest.raises(inc.EditNotLocal):
        enc.apply_edit(0, 0, "x", local_only=True)
    text = "x" + text
    enc.apply_edit(len(text), 0, "!")
    text += "!"
    check_scores(enc, tok, text, library)
    assert enc.full_encodes == 1


def test_a_run_of_unknown_characters_is_one_unit(variants):
    """botchan lacks CJK: a run is one <unk> (its pieces merged), and past 128 bytes its words
    are single characters: the run is checked as a whole from the score before it."""
    tok, library = variants["scores x400"]
    text = "a " + "東京は日本の首都です" * 30 + " b ---"
    enc = inc.IncrementalEncoder(tok, text)
    assert any(c > 1 for c in enc._count) and any(not math.isnan(b) for b in enc._bound)
    for start, removed, inserted in [(1, 0, "x"), (150, 0, "y z"), (0, 1, ""), (2, 1, "")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        check_scores(enc, tok, text, library)
    assert enc.full_encodes == 0


def _same(a: list, b: list) -> bool:
    """Equal lists, NaN equal to NaN."""
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))


#: past 128 bytes a CJK run is cut into one-character words inside one merged <unk> (a run
#: holding word starts: `_run_bounds`); 43-48 of them are still few words
FEW_WORD_RUNS = st.tuples(st.sampled_from(["", "a ", "x", "--- "]), st.integers(43, 47),
                          st.sampled_from(["", " b", "b", "\n#"])).map(lambda p: p[0] + "東京" * (p[1] // 2) + "東" * (p[1] % 2) + p[2])


@given(label=st.sampled_from(sorted(VARIANTS)), text=TEXT | FEW_WORD_RUNS, head=st.booleans(), tail=st.booleans(),
       score=st.sampled_from([0.0, -0.0, -7.5, -1234.567, -99990.0, -99999.5, -100000.0, -100001.0, 3.0])
       | st.floats(-1.2e5, 0.0))
def test_a_few_words_populate_in_python_as_in_numpy(variants, label, text, head, tail, score):
    """An edit's region (few words) is populated in Python (`_live_populated_flat`): every
    column equals numpy's `_live_populated` over the same run (merged unknown runs and their
    bounds, byte fallback, control pieces, spans)."""
    from forma_gui.core.unigram_fast import _live_run

    tok, _ = variants[label]
    normalized, n2o = tok.normalizer.normalize_offsets(text.encode("utf-8", "surrogatepass"), head=head, tail=tail)
    flat = tok.tables()["unigram"].encode_live(normalized, score, flat=True)
    assume(isinstance(flat.tokens, array))  # few words (a CJK run can be many)
    ids, begins, ends, extra = tok._live_populated_flat(normalized, n2o, flat)
    theirs = [c.tolist() for c in tok._live_run_columns(normalized, n2o, _live_run(*flat))]
    assert [ids, begins, ends] == theirs[:3]
    assert all(_same(ours, other) for ours, other in zip(extra, theirs[3:]))
    assert all(type(v) is int for v in ids + begins + ends + extra[2] + extra[4])


def _tiny_model(path, pieces, *, suffix=False):
    """A unigram .model of `pieces` (text, type, score), identity normalizer."""
    model = pb.ModelProto()
    model.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    model.trainer_spec.treat_whitespace_as_suffix = suffix
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = True
    model.normalizer_spec.remove_extra_whitespaces = True
    model.normalizer_spec.escape_whitespaces = True
    for text, kind, score in pieces:
        piece = model.pieces.add()
        piece.piece, piece.type, piece.score = text, kind, score
    path.write_bytes(model.SerializeToString())
    return load_sentencepiece(path), spm.SentencePieceProcessor(model_file=str(path))


@pytest.mark.parametrize("scores, window, text, start, inserted", [
    ((-20000.0, -20000.0, -33000.0, -1000.0), (2, 4), "x y aa<s> a", 0, "x"),
    ((-13704.0, -30000.0, -1000.0, -50000.0), (2, 2), "b y aa</s>", 0, "bb"),
    ((-20000.0, -40000.0, -7000.0, -5000.0), (3, 4), "b y a</s>", 1, "x")])
def test_a_walk_that_stops_on_a_dummy_suffix_keeps_the_special_token(tmp_path, monkeypatch, scores, window,
                                                                       text, start, inserted):
    """With treat_whitespace_as_suffix the text before a special token ends in a zero-width ▁
    at the token's start; a walk that stops there (its window's last word start, small
    windows here) with a score past that word's bound re-encodes up to the special token and
    keeps it (helper-33's fuzz: "<s>" was encoded as ordinary text)."""
    monkeypatch.setattr(inc, "WALK_WINDOW", window[0])
    monkeypatch.setattr(inc, "MAX_WALK_WINDOW", window[1])
    space, a, b, x = scores
    tok, _ = _tiny_model(tmp_path / "suffix.model", [
        ("<unk>", 2, 0.0), ("<s>", 3, 0.0), ("</s>", 3, 0.0), (SPACE, 1, space), ("a", 1, a), ("b", 1, b),
        ("x", 1, x), ("y", 1, -2000.0)], suffix=True)
    enc = inc.IncrementalEncoder(tok, text, special=True)
    enc.apply_edit(start, 0, inserted)
    check_scores(enc, tok, text[:start] + inserted + text[start:])
    assert enc.full_encodes == 0


def test_scores_whose_sums_could_overflow_re_encode_in_full(tmp_path):
    tok, library = _tiny_model(tmp_path / "huge.model", [
        ("<unk>", 2, 0.0), (SPACE, 1, -1.0), ("a", 1, -3e38), ("b", 1, -2.0)])
    assert "unigram" in tok.edit_reason() and not inc.local_edits(tok)
    enc = inc.IncrementalEncoder(tok, "ab ba")
    enc.apply_edit(1, 0, "a")
    check(enc, tok, "aab ba", library)


@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 2e5),
                          st.sampled_from([0.0, -0.0, 5e-324, 1e-45, 3.4028235e38, 3.5e38, 1e39, -math.inf])),
                max_size=inc.FEW_BOUNDS))
def test_few_bounds_round_down_as_numpy(bounds):
    """An edit's word bounds, rounded down to float32 in Python, are numpy's to the bit."""
    from array import array

    found = inc._bounds32(bounds)
    wide = np.asarray(bounds, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = wide.astype(np.float32)
        up = narrow > wide
    narrow[up] = np.nextafter(narrow[up], np.float32(-np.inf))
    assert found.tobytes() == array("f", narrow.tobytes()).tobytes()


def test_walk_seconds_counts_only_the_walk(variants, monkeypatch):
    """`walk_seconds` (the bench's split of an edit's cost) grows by the time spent in `_walk`,
    and only for edits that walk."""
    from forma_gui.bench.incremental import edit_times

    tok, _ = variants["botchan"]
    enc = inc.IncrementalEncoder(tok, "It was a fine day. " * 300)
    spent: list[float] = []
    walk = inc.IncrementalEncoder._walk

    def timed_walk(self, *args):
        import time
        t0 = time.perf_counter()
        try:
            return walk(self, *args)
        finally:
            spent.append(time.perf_counter() - t0)

    monkeypatch.setattr(inc.IncrementalEncoder, "_walk", timed_walk)
    walks: list[float] = []
    times = edit_times(enc, 40, walks=walks)
    assert len(walks) == len(times) == 40
    assert all(0 <= w <= t for w, t in zip(walks, times))
    assert sum(1 for w in walks if w) == len(spent) > 0  # the edits that walked, and only they
    assert sum(walks) >= sum(spent)
    bpe = load_sentencepiece(data_file("sentencepiece", "mistral_instruct_tokenizer_240323.model.v3"))
    plain = inc.IncrementalEncoder(bpe, "It was a fine day. " * 30)  # a BPE .model: no scores
    none: list[float] = []
    edit_times(plain, 10, walks=none)
    assert none == [0.0] * 10 and plain.walk_seconds == 0.0
