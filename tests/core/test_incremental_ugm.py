"""Live edits with llama.cpp's unigram (GGUF ``t5``, `LlamaUGMTokenizer`): after every edit the
ids equal a from-scratch `encode` (and, in real text, the `sentencepiece` library's: the
vocabulary is botchan's unigram .model written as a t5 GGUF), and the tokens equal `segment`.

llama.cpp adds the path scores in double, and with float32 scores these sums are exact for any
text of a few million characters (`exact_chars`): the words after a ▁ are then cut as they
would be from any start score, so an edit re-encodes the text between the cuts around it
(`edit_cuts`: whitespace before a character that opens a word) and nothing after them. A
vocabulary whose scores are too fine for that re-encodes in full once the text is longer.
"""
from __future__ import annotations

import functools

import pytest
import sentencepiece as spm
from hypothesis import given, settings, strategies as st

from forma_gui.bench.incremental import t5_gguf_from
from forma_gui.core import incremental as inc
from forma_gui.core import llama_tokenizers as lt
from forma_gui.core.llama_tokenizers import SPACE, LlamaUGMTokenizer
from forma_gui.core.llama_vocab import ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_USER_DEFINED, LlamaVocab
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.core.incremental_checks import EDIT_SETTINGS, check, random_edits
from tests.core.test_incremental_sentencepiece import LINE, PIECES

UNIGRAM = "botchan_en_unigram_1000.model"
#: text as typed: words, code, blanks, what nmt_nfkc maps, characters botchan lacks
CLEAN = [p for p in PIECES if not {"\x00", "\ud83d", SPACE} & set(p)] + ["---", "were", "the ", "東" * 30]
TEXT = st.lists(st.sampled_from(CLEAN), max_size=30).map("".join)
INSERT = st.lists(st.sampled_from(CLEAN), max_size=2).map("".join)
ANY_TEXT = st.lists(st.sampled_from(PIECES), max_size=30).map("".join) | st.text(max_size=20)
ANY_INSERT = st.lists(st.sampled_from(PIECES), max_size=2).map("".join) | st.text(max_size=2)


@functools.cache
def _t5() -> LlamaUGMTokenizer:
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="forma-t5-"))
    return load_tokenizer(t5_gguf_from(data_file("sentencepiece", UNIGRAM), folder / "t5.gguf"))


@functools.cache
def _library() -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(data_file("sentencepiece", UNIGRAM)))


def _variant(tok: LlamaUGMTokenizer, **flags) -> LlamaUGMTokenizer:
    base = tok.vocab
    vocab = LlamaVocab(base.tokens, list(base.attrs), list(base.scores), specials=dict(base.specials),
                       flags={**base.flags, **flags})
    return LlamaUGMTokenizer(vocab, tok.charsmap)


def test_botchan_edits_are_local_and_exact_for_megabytes():
    tok = _t5()
    assert inc.local_edits(tok) and inc.local_edits(tok, special=True)
    assert not inc.supports_edits(tok)  # (core.chunked slices know nothing of llama.cpp's partition)
    # float32 scores of magnitude 2.9..21: multiples of 2**-22, exact below 2**31 in double
    assert 2_000_000 < tok.exact_chars() < 10_000_000


def test_edits_in_real_text_equal_sentencepiece():
    """300 one-character inserts and deletes in 20k characters of the bench's mixed corpus
    (English prose, Python, Cyrillic, CJK): the ids equal sentencepiece's from the .model.
    (Not on any text: an exact tie between two cuts, "-" + "--" against "--" + "-", goes to
    the first in llama.cpp's double sums and to float32 rounding in sentencepiece's.)"""
    import random

    from forma_gui.bench.incremental import document

    tok, library = _t5(), _library()
    text = document()[200_000:220_000]
    enc = inc.IncrementalEncoder(tok, text)
    rng = random.Random(8)
    for k in range(300):
        at = rng.randrange(len(text))
        if k % 2:
            ch = text[rng.randrange(len(text))]
            enc.apply_edit(at, 0, ch)
            text = text[:at] + ch + text[at:]
        else:
            enc.apply_edit(at, 1, "")
            text = text[:at] + text[at + 1:]
        if k % 30 == 29:
            assert list(enc.ids) == library.encode(text)
    assert enc.full_encodes == 0
    check(enc, tok, text, library)


@EDIT_SETTINGS
@given(text=TEXT, data=st.data())
def test_random_edits_equal_a_fresh_encode(text, data):
    tok = _t5()
    enc = inc.IncrementalEncoder(tok, text)
    check(enc, tok, text)
    random_edits(enc, tok, text, data, INSERT)
    assert enc.full_encodes == 0


@EDIT_SETTINGS
@given(text=ANY_TEXT, data=st.data(), special=st.booleans())
def test_random_edits_of_any_text_equal_a_fresh_encode(text, data, special):
    """NUL, lone surrogates, control texts cut out with special=True, blanks alone before a
    special token or a cut (their token starts at the fragment's start)."""
    tok = _t5()
    enc = inc.IncrementalEncoder(tok, text, special=special)
    check(enc, tok, text)
    random_edits(enc, tok, text, data, ANY_INSERT | st.sampled_from(["</s>", "<s>", " </s> ", "  "]))
    assert enc.full_encodes == 0


#: user-defined tokens (cut out by llama.cpp's partition, special or not; no two can overlap,
#: else edits re-encode in full): one starting with a space, one that nmt_nfkc would map, one
#: with a combining mark, one with a tab
USER = ["<sep>", " x", "ｆｕ", "e\u0301x", "\tz"]
VARIANT_FLAGS = [{}, {"add_space_prefix": False}]


@functools.cache
def _user_variant(flags: tuple, charsmap: bool) -> LlamaUGMTokenizer:
    base = _t5()
    vocab = LlamaVocab(base.vocab.tokens + USER, list(base.vocab.attrs) + [ATTR_USER_DEFINED] * len(USER),
                       list(base.vocab.scores) + [0.0] * len(USER), specials=dict(base.vocab.specials),
                       flags={**base.vocab.flags, **dict(flags)})
    return LlamaUGMTokenizer(vocab, base.charsmap if charsmap else None)


@EDIT_SETTINGS
@given(text=ANY_TEXT | st.lists(st.sampled_from(CLEAN + USER), max_size=30).map("".join), data=st.data(),
       special=st.booleans(), flags=st.sampled_from(VARIANT_FLAGS), charsmap=st.booleans())
def test_random_edits_with_user_tokens_and_other_flags(text, data, special, flags, charsmap):
    """User-defined tokens cut the text into fragments (their texts may hold spaces, which then
    are no piece of their own: fewer cuts), without a space prefix, without a charsmap."""
    tok = _user_variant(tuple(flags.items()), charsmap)
    enc = inc.IncrementalEncoder(tok, text, special=special)
    assert enc.incremental, enc.reason
    check(enc, tok, text)
    random_edits(enc, tok, text, data, st.lists(st.sampled_from(CLEAN + USER), max_size=2).map("".join) | ANY_INSERT)
    assert enc.full_encodes == 0


@pytest.mark.parametrize("special", [False, True])
def test_typing_in_a_large_document_stays_local(special):
    tok = _t5()
    text = LINE * 300
    enc = inc.IncrementalEncoder(tok, text, special=special)
    for k, ch in enumerate("Hello, wörld 東京 ﬁ  \n"):
        at = 3000 + 7 * k
        enc.apply_edit(at, 0, ch)
        text = text[:at] + ch + text[at:]
        assert enc.last_splice.removed < 20
    enc.apply_edit(5000, 3, "")
    text = text[:5000] + text[5003:]
    assert enc.full_encodes == 0
    check(enc, tok, text, None if special else _library())


# ---- the cut rule ------------------------------------------------------------------------------

@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=ANY_TEXT)
def test_a_cut_splits_a_fragment_into_parts_encoded_alone(text):
    """At every place the rule allows, the fragment's spans are those of the two parts (the
    first one's last token ending there when it has any), and they equal the spans of the
    whole-text path (numpy normalizer, cached words proven in double)."""
    tok = _t5()
    is_cut = tok.edit_cuts()
    whole = tok.fragment_spans(text, 0, len(text))
    assert whole == _numpy_spans(tok, text)
    for r in range(1, len(text)):
        if is_cut(text[r - 1:r + 1]):
            head = tok.fragment_spans(text, 0, r)
            assert not head or head[-1][2] == r
            inside = not tok.alone(text[r - 1]).endswith(b" ")
            tail = tok.fragment_spans(text, r, len(text), inside=inside)
            assert head + tail == whole
            if inside:  # (the numpy normalizer goes on inside a word alike)
                assert tail == _numpy_spans(tok, text, r, inside=True)


def _numpy_spans(tok, text: str, start: int = 0, inside: bool = False):
    saved = lt.SMALL_FRAGMENT
    lt.SMALL_FRAGMENT = -1
    try:
        return tok.fragment_spans(text, start, len(text), inside=inside)
    finally:
        lt.SMALL_FRAGMENT = saved


def test_the_rule_on_known_pairs():
    """A space before a character that opens a word, whatever nmt_nfkc maps it to (fi, é,
    f, 1) or keeps (U+200B, the BOM); not a tab or a newline (no space for this model: they
    stay, as unknown characters), a space before whitespace nmt_nfkc maps to a space (the
    ideographic one, NBSP), or whitespace other than an ASCII one before a word."""
    tok = _t5()
    is_cut = tok.edit_cuts()
    cuts = [" a", " 東", " ﬁ", " é", " e", " 1", " .", " \u200b", " \ufeff", " ｆ", " ①"]
    others = ["ab", "a ", "  ", " \u3000", " \xa0", "\u3000a", "\xa0a", "\ta", "\nx", "\x00a"]
    assert [p for p in cuts if not is_cut(p)] == []
    assert [p for p in others if is_cut(p)] == []
    for pair in cuts:  # the normalizer opens a word there: one ▁ before it
        assert tok.normalize(pair.encode())[0].startswith(SPACE.encode()) and \
            tok.normalize(pair.encode())[0].count(SPACE.encode()) == 1


# ---- which vocabularies qualify ----------------------------------------------------------------

def _small(tokens: list[str], scores: list[float], flags: dict | None = None) -> LlamaUGMTokenizer:
    attrs = [ATTR_UNKNOWN, ATTR_CONTROL] + [ATTR_NORMAL] * len(tokens)
    vocab = LlamaVocab(["<unk>", "</s>", *tokens], attrs, [0.0, 0.0, *scores],
                       specials={"unk": 0, "eos": 1},
                       flags={"remove_extra_whitespaces": True, "add_space_prefix": True, **(flags or {})})
    return LlamaUGMTokenizer(vocab)


TOKENS = [SPACE, SPACE + "a", "a", "b", SPACE + "ab", "ab"]
SCORES = [-2.0, -3.5, -4.0, -4.25, -5.0, -6.5]


def test_reasons():
    assert _small(TOKENS, SCORES).edit_reason() == ""
    assert "remove_extra_whitespaces" in _small(TOKENS, SCORES, {"remove_extra_whitespaces": False}).edit_reason()
    assert "suffix" in _small(TOKENS, SCORES, {"treat_whitespace_as_suffix": True}).edit_reason()
    assert "no ▁ piece" in _small(TOKENS[1:], SCORES[1:]).edit_reason()
    assert "after another character" in _small(TOKENS + ["a" + SPACE], SCORES + [-9.0]).edit_reason()
    assert "finite" in _small(TOKENS, SCORES[:-1] + [float("nan")]).edit_reason()
    for tok in (_small(TOKENS, SCORES, {"remove_extra_whitespaces": False}), _small(TOKENS[1:], SCORES[1:])):
        enc = inc.IncrementalEncoder(tok, "ab a b")
        enc.apply_edit(2, 0, "b")
        assert not enc.incremental and enc.full_encodes == 1
        check(enc, tok, "abb a b")


def test_scores_too_fine_for_long_texts_re_encode_in_full():
    """A score of 3 * 2**-40 makes sums exact only below 2**13: the text's length decides."""
    tok = _small(TOKENS, SCORES[:-1] + [-3 * 2.0 ** -40])
    limit = tok.exact_chars()
    assert 0 < limit < 100 and tok.edit_reason() == ""
    short = "ab " * (limit // 4)
    enc = inc.IncrementalEncoder(tok, short)
    enc.apply_edit(1, 0, "a")
    assert enc.full_encodes == 0
    long = "ab " * (limit // 2)
    enc = inc.IncrementalEncoder(tok, long)
    enc.apply_edit(1, 0, "a")
    assert enc.full_encodes == 1
    check(enc, tok, long[:1] + "a" + long[1:])


def test_user_defined_tokens_with_spaces_only_cost_cuts():
    """A user-defined token holding a space: a space is then no piece on its own, so no place
    after one is a cut; edits stay correct (re-encoding up to the fragment's ends)."""
    base = _t5()
    vocab = LlamaVocab(base.vocab.tokens + [" x"], list(base.vocab.attrs) + [ATTR_USER_DEFINED],
                       list(base.vocab.scores) + [0.0], specials=dict(base.vocab.specials),
                       flags=dict(base.vocab.flags))
    tok = LlamaUGMTokenizer(vocab, base.charsmap)
    assert not tok.edit_cuts()(" a")
    text = "one two  x three"
    enc = inc.IncrementalEncoder(tok, text)
    enc.apply_edit(4, 0, "z")
    check(enc, tok, text[:4] + "z" + text[4:])
