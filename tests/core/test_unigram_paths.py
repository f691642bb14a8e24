"""The k best segmentations of a unigram model (core.unigram_paths), against sentencepiece's
own n-best search and against every segmentation enumerated."""
from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings, strategies as st

from forma_gui.core.sentencepiece import lattice_steps
from forma_gui.core.unigram_paths import best_segmentations
from tests.conftest import MAX_EXAMPLES, data_file

spm = pytest.importorskip("sentencepiece")
MODEL = ("sentencepiece", "botchan_en_unigram_1000.model")


@pytest.fixture(scope="module")
def pair():
    from forma_gui import load_tokenizer

    path = data_file(*MODEL)
    return load_tokenizer(path), spm.SentencePieceProcessor(model_file=str(path))


def _words() -> list[str]:
    text = data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")
    words = sorted(set(text.split()))
    rng = random.Random(5)
    return rng.sample(words, 300) + ["naïve café", "東京", "x  y", "ﬁne", "Hello", "a"]


def test_the_k_best_are_sentencepieces_n_best(pair):
    """Ids and order equal `nbest_encode` (A* over the same lattice) for 300 words of botchan
    and a few with unknown characters, runs of spaces and a normalized ligature; the first
    is what encoding picks."""
    tok, sp = pair
    for word in _words():
        ours = tok.segmentations(word, 5)
        theirs = sp.nbest_encode(word, nbest_size=5)
        assert [list(a.ids) for a in ours] == theirs, word
        assert ours[0].chosen and not any(a.chosen for a in ours[1:])
        assert scores_descend(ours), word


def test_a_t5_gguf_cuts_as_sentencepiece_does(pair, tmp_path):
    """llama.cpp's unigram (GGUF `t5`, double sums) over botchan's pieces and scores: the same
    k best for the same words, its own encoding first."""
    from forma_gui.formats.gguf_tokenizer import load_gguf_tokenizer
    from tests.formats.test_gguf_tokenizer import _t5_from

    _, sp = pair
    t5 = load_gguf_tokenizer(_t5_from(data_file(*MODEL), tmp_path / "t5.gguf"))
    for word in _words():
        ours = t5.segmentations(word, 5)
        assert [list(a.ids) for a in ours] == sp.nbest_encode(word, nbest_size=5), word
        assert list(ours[0].ids) == t5.encode(word) and ours[0].chosen, word
        assert scores_descend(ours), word
    assert t5.segmentations("", 5) == [] and t5.segmentations("Hello", 0) == []


def scores_descend(alternatives) -> bool:
    return all(a.score >= b.score - 1e-9 for a, b in zip(alternatives, alternatives[1:]))


def test_pieces_spell_the_normalized_word(pair):
    tok, sp = pair
    for word in ("Hello", "naïve café", "x  y"):
        for a in tok.segmentations(word, 5):
            assert "".join(a.pieces) == "".join(sp.encode_as_pieces(word)), word  # unknowns as their text


def test_other_models_have_no_segmentations():
    from forma_gui import load_tokenizer

    assert load_tokenizer(data_file("sentencepiece", "botchan_en_bpe_1000.model")).segmentations("Hello") == []


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(data=st.data())
def test_the_k_best_of_every_segmentation(data):
    """On a random vocabulary over "abc" (some characters missing: the unknown piece), the k
    best are the top k of all segmentations enumerated, with equal scores in any order."""
    pieces = data.draw(st.lists(st.text("abc", min_size=1, max_size=3), min_size=1, max_size=10, unique=True))
    scores = [float(s) for s in data.draw(st.lists(st.integers(-20, -1), min_size=len(pieces), max_size=len(pieces)))]
    word = data.draw(st.text("abc", min_size=1, max_size=7))
    k = data.draw(st.integers(1, 6))
    ids = {p.encode(): i for i, p in enumerate(pieces)}
    prefixes = {}
    for p, i in ids.items():
        for n in range(1, len(p)):
            prefixes.setdefault(p[:n], -1)
    prefixes.update(ids)
    unk, unk_score = len(pieces), -30.0
    data_bytes = word.encode()
    found = best_segmentations(lattice_steps(data_bytes, prefixes), len(data_bytes), scores, unk, unk_score, k)
    every = sorted(_enumerate(data_bytes, ids, scores, unk, unk_score), key=lambda s: -s[1])
    assert [s.score for s in found] == [score for _, score in every[:k]]
    by_score = {}
    for cut, score in every:
        by_score.setdefault(score, set()).add(cut)
    for s in found:
        assert s.ids in by_score[s.score]
        assert "".join(data_bytes[a:b].decode() for a, b in s.spans) == word
    assert len({s.spans for s in found}) == len(found)


def _enumerate(data: bytes, ids: dict, scores, unk: int, unk_score: float):
    """Every cut of `data` into pieces (a character no one-character piece covers may also be
    the unknown piece), with its summed score."""
    n = len(data)
    for mask in itertools.product((False, True), repeat=n - 1):
        bounds = [0] + [i + 1 for i, cut in enumerate(mask) if cut] + [n]
        cut, score = [], 0.0
        for a, b in zip(bounds, bounds[1:]):
            piece = data[a:b]
            if piece in ids:
                cut.append(ids[piece])
                score += scores[ids[piece]]
            elif b - a == 1:
                cut.append(unk)
                score += unk_score
            else:
                break
        else:
            yield tuple(cut), score
