"""WordPiece as llama.cpp runs it: known answers for its preprocessing, the bge GGUF
vocabulary against HF `tokenizers`' BERT pipeline on text where the two agree, and the
places where llama.cpp knowingly differs."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, normalizers, pre_tokenizers

from forma_gui.core.wordpiece import first_lower, first_nfd, preprocess
from forma_gui.formats.gguf_tokenizer import load_gguf_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file


@pytest.fixture(scope="module")
def bert():
    tok = load_gguf_tokenizer(data_file("gguf-vocab", "ggml-vocab-bert-bge.gguf"))
    vocab = {}
    for i, piece in enumerate(tok.vocab.tokens):
        if tok.token_type(i) == "control" or piece.startswith("[unused"):
            vocab[piece] = i
        elif piece.startswith("▁"):
            vocab[piece[1:]] = i
        else:
            vocab["##" + piece] = i
    hf = HFTokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]",
                                      max_input_chars_per_word=1000))
    hf.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                               strip_accents=True, lowercase=True)
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok, hf


def test_preprocess_known_answers():
    words = lambda text, **kw: [w for w, _ in preprocess(text, **kw)]  # noqa: E731
    assert words("Héllo, WORLD!  中文") == ["hello", ",", "world", "!", "中", "文"]
    assert words("a\x00b\x07c\u200bd") == ["abcd"]  # NUL and controls (Cc, Cf) vanish
    assert words("x$y+z") == ["x", "$", "y", "+", "z"]  # ASCII symbols split
    assert words("5€ 3°") == ["5€", "3°"]  # non-ASCII symbols do not
    assert words("Ab", lowercase=False, strip_accents=False) == ["Ab"]
    assert words("e\u0301") == ["e"]  # the combining accent is dropped
    assert first_nfd("한") == "\u1112" and first_lower("İ") == "i"  # one code point each


def test_preprocess_keeps_original_positions():
    assert preprocess(" Hé, x") == [("he", [1, 2]), (",", [3]), ("x", [5])]


CORPUS = [
    "Hello world", "The quick brown fox jumps over the lazy dog.", "naïve café résumé",
    "I'm here, aren't you?", "e-mail: someone@example.com", "3.14159 and 2,718",
    "中文 日本語のテキスト", "emoji 😀 ok", "tabs\tand\nnewlines", "UPPER lower MiXeD",
    "supercalifragilisticexpialidocious", "don't stop (now) [ever]", "ünïcödé ÀÉÎÕÜ",
]


def test_bge_equals_hf_bert_on_corpus(bert):
    tok, hf = bert
    for text in CORPUS:
        assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids, text


SAFE = st.characters(min_codepoint=0x20, max_codepoint=0x24F, blacklist_categories=("Cc",)) | \
    st.sampled_from(list("中文日本語 \t\n"))


@given(st.text(SAFE, max_size=40))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_bge_equals_hf_bert_on_hypothesis_text(bert, text):
    tok, hf = bert
    assert tok.encode(text) == hf.encode(text, add_special_tokens=False).ids


#: llama.cpp's classes (src/unicode-data.cpp, Unicode 15.1) of code points Python 3.11's
#: `unicodedata` (14.0) leaves unassigned, and of one 16.0 added (undefined there)
KAWI_DANDA, KAWI_SIGN, EGYPTIAN_FORMAT, CJK_EXT_H, TJE = (  # punctuation, accent mark,
    "\U00011f43", "\U00011f00", "\U00013439", "\U00031350", "\u1c89")  # control, letter, none


def test_preprocess_classes_characters_by_llama_cpp_s_tables():
    words = lambda text, **kw: [w for w, _ in preprocess(text, **kw)]  # noqa: E731
    assert words(f"a{KAWI_DANDA}b") == ["a", KAWI_DANDA, "b"]
    assert words(f"a{KAWI_SIGN}b") == ["ab"]
    assert words(f"a{KAWI_SIGN}b", strip_accents=False) == [f"a{KAWI_SIGN}b"]
    assert words(f"a{EGYPTIAN_FORMAT}b") == ["ab"]
    assert words(f"a{CJK_EXT_H}b{TJE}c") == [f"a{CJK_EXT_H}b{TJE}c"]


def test_a_punctuation_mark_new_in_unicode_15_is_a_word_of_its_own(bert):
    tok, _ = bert
    assert tok.encode(f"x{KAWI_DANDA}y") == tok.encode(f"x {KAWI_DANDA} y")
    assert tok.encode(f"x{EGYPTIAN_FORMAT}y") == tok.encode("xy")


def test_unknown_words_become_one_unk(bert):
    tok, _ = bert
    unk = tok.vocab.specials["unk"]
    assert tok.encode("hello ᚠᚢᚦ") == tok.encode("hello") + [unk]  # runes: one word, no piece
    assert tok.encode("⟦⟧") == [unk, unk]  # punctuation: each its own word
    # the dropped space joins the following token when spans are tiled
    assert [(t.id, t.start, t.end) for t in tok.segment("x ᚠᚢᚦ")][-1] == (unk, 1, 5)


def test_llama_cpp_differs_from_hf_on_hangul(bert):
    """llama.cpp keeps only the first code point of an NFD decomposition: a Hangul
    syllable becomes its leading jamo, where HF keeps the whole decomposition."""
    tok, hf = bert
    text = "한국"
    assert [w for w, _ in preprocess(text)] == ["\u1112\u1100"]
    assert tok.encode(text) != hf.encode(text, add_special_tokens=False).ids


def test_segments_point_at_the_original_text(bert):
    tok, _ = bert
    text = "Héllo, WORLD!"
    spans = [(text[t.start:t.end], t.piece) for t in tok.segment(text)]
    assert spans[0][0].startswith("Hé") and spans[-1] == ("!", "▁!")
    assert "".join(s for s, _ in spans).replace(" ", "") == text.replace(" ", "")


#: ASCII of every class preprocess tells apart (letters, digits, punctuation, symbols, each
#: whitespace, controls it drops) and non-ASCII words, marks, spaces, CJK and emoji
MIXED = st.lists(st.sampled_from(list("aZ09.,$+_~`'\" \t\n\x0b\x0c\r\x00\x07\x1c\x7f")
                                 + ["é", "Ä", "ß", "İ", "\u0301", "\u3000", "\xa0", "中", "😀",
                                    "ab", "CD", "the"]), max_size=40).map("".join)


@settings(max_examples=MAX_EXAMPLES)
@given(MIXED, st.booleans(), st.booleans())
def test_fast_fragment_spans_equal_the_character_by_character_ones(bert, text, lowercase, strip):
    """Cutting at ASCII whitespace and going a word at a time through the ASCII chunks (each
    chunk cached) gives preprocess's tokens and spans exactly, with either flag setting, as
    spans and as columns (of a fragment inside a longer text)."""
    tok, _ = bert
    flags = dict(tok.vocab.flags)
    tok.vocab.flags.update(lowercase=lowercase, strip_accents=strip)
    tok.clear_cache()
    try:
        expected = tok._fragment_spans_reference(text, 0, len(text))
        assert tok._fragment_spans(text, 0, len(text), False) == expected
        assert tok._fragment_spans(text, 0, len(text), False) == expected  # from the cache
        ids, starts, ends = tok._fragment_columns("<" + text + ">", 1, len(text) + 1, False)
        assert list(zip(ids, starts, ends)) == [(t, a + 1, b + 1) for t, a, b in expected]
    finally:
        tok.vocab.flags.clear()
        tok.vocab.flags.update(flags)
        tok.clear_cache()


def test_longest_matches_take_the_longest_piece_each_time(bert):
    """`longest_matches` lists the pieces `encode` gives (HF's WordPiece agrees on this text,
    see above), each the longest the vocabulary has at the start of what is left: no longer
    prefix of the rest is a piece."""
    tok, hf = bert
    text = data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")[:20_000]
    words = sorted(set(text.split()))[:400] + ["Unaffable", "tokenization,", "naïve", "xqzjv"]
    checked = 0
    for word in words:
        steps = tok.longest_matches(word)
        assert [s.token_id for s in steps] == tok.encode(word) == hf.encode(word).ids, word
        for s in steps:
            data = s.word.encode("utf-8", "surrogatepass")
            assert tok.piece(s.token_id) == s.piece
            assert data[s.start:s.end].decode("utf-8") == s.piece
            for longer in range(s.end + 1, len(data) + 1):
                assert tok.id_of(data[s.start:longer].decode("utf-8", "surrogateescape")) is None, (word, s)
                checked += 1
    assert checked > 200  # (longer prefixes tried: most words are one piece)


def test_a_word_without_a_match_shows_where_it_stopped(bert):
    tok, _ = bert
    (step,) = [s for s in tok.longest_matches("ᚠᚢᚦ")]
    assert (step.token_id, step.piece, step.start, step.word) == (-1, "[UNK]", 0, "▁ᚠᚢᚦ")
    assert tok.longest_matches("") == []
