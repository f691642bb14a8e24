"""Incremental re-encoding for SentencePiece .model files (`SentencePieceTokenizer`): after every
edit the ids equal a from-scratch `encode` and the `sentencepiece` library's, and the tokens equal
`segment`; BPE models re-encode only between two cuts around the edit (`EditCuts`) (unigram
models: tests/core/test_incremental_unigram.py)."""
from __future__ import annotations

import functools
import random

import pytest
import sentencepiece as spm
from hypothesis import given, settings, strategies as st
from sentencepiece import sentencepiece_model_pb2 as pb

from forma_gui.core import incremental as inc
from forma_gui.core.sentencepiece import EditCuts, key_characters
from forma_gui.formats.sentencepiece_model import load_sentencepiece
from tests.conftest import MAX_EXAMPLES, data_file
from tests.core.incremental_checks import EDIT_SETTINGS
from tests.core.incremental_checks import check as _check
from tests.core.incremental_checks import random_edits as _edits
from tests.core.incremental_checks import records as _records

BOTCHAN_BPE = "botchan_en_bpe_1000.model"      # nmt_nfkc, extra whitespace removed, no byte fallback
BOTCHAN_UNIGRAM = "botchan_en_unigram_1000.model"
MISTRAL = "mistral_instruct_tokenizer_240323.model.v3"  # identity, spaces kept, byte fallback, user pieces
SPACE = "\u2581"
#: what the normalizer and the models care about: blanks and runs of them (leading, trailing),
#: other whitespace; characters nmt_nfkc maps (fullwidth, ligatures, circled and superscript
#: digits, no-break and ideographic spaces, BOM, removed controls), letters with combining marks
#: and the marks alone (its keys longer than a character), "<" + U+0338 (≮), Hangul jamo,
#: halfwidth katakana and voicing marks, characters mapped to text with blanks inside or first
#: (ﷺ, ￣, ゛, U+FFFD), to several letters (㍿, Ⅻ, ǆ), odd line breaks; Mistral's user-defined pieces and their prefixes, control
#: texts (cut out with special=True); CJK (unknown in botchan: runs collapse into one <unk>),
#: emoji (byte fallback), a lone surrogate, NUL, a literal ▁
PIECES = [" ", "  ", "   ", "\n", "\n\n", "\t", " \t ", "\r\n", "1", "42", "a", "e", "x", "the", "Hello",
          "world", "don't", "é", "e\u0301", "\u0301", "\u0302", "<\u0338", "\u0338", "ｆｕｌｌ", "ﬁ", "①",
          "²", "½", "\xa0", "\u3000", "\ufeff", "\x01", "\u200b", "ᄀ", "ᅡ", "ᆨ", "한", "ｶ", "ﾞ", "゙",
          "[REFERENCE_DOC_1]", "[REFERENCE_DOC_12]", "[REFERENCE_DOC_", "[", "]", "REF", "[INST]",
          "[/INST]", "<s>", "</s>", "<unk>", "<", "s>", "Привет", "東京は日本の首都です", "。", "😀",
          "👩\u200d💻", "\ud83d", "\x00", SPACE, SPACE + SPACE, " " + SPACE, "ﷺ", "￣", "\ufffd", "゛", "㍿",
          "Ⅻ", "ǆ", "\x85", "\u2028"]
DOC = st.lists(st.sampled_from(PIECES), max_size=25).map("".join) | st.text(max_size=20)
INSERT = st.lists(st.sampled_from(PIECES), max_size=3).map("".join) | st.text(max_size=2)


@functools.cache
def _model(name: str):
    return load_sentencepiece(data_file("sentencepiece", name))


@functools.cache
def _library(name: str) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(data_file("sentencepiece", name)))








# ---- which models qualify ------------------------------------------------------------------

@pytest.mark.parametrize("name", [BOTCHAN_BPE, MISTRAL])
@pytest.mark.parametrize("special", [False, True])
def test_bpe_models_edit_locally_but_are_never_sliced(name, special):
    """core.chunked cannot cut a SentencePiece text into slices: supports_edits stays False."""
    tok = _model(name)
    assert inc.local_edits(tok, special) and not inc.supports_edits(tok, special)
    enc = inc.IncrementalEncoder(tok, "x", special=special)
    assert enc.incremental and enc.reason == ""


# ---- incremental == from scratch -----------------------------------------------------------

@EDIT_SETTINGS
@given(name=st.sampled_from([BOTCHAN_BPE, MISTRAL]), text=DOC, data=st.data(), special=st.booleans())
def test_random_edits_equal_a_fresh_encode_and_the_library(name, text, data, special):
    tok, library = _model(name), _library(name)
    enc = inc.IncrementalEncoder(tok, text, special=special)
    _check(enc, tok, text, library)
    _edits(enc, tok, text, data, INSERT, library=library)
    assert enc.full_encodes == 0  # lone surrogates, removed characters, trailing blanks included


#: protobuf edits of the real models (the library loads them too): every normalizer option, user
#: pieces (a prefix of another, one holding ▁ or a space, one a charsmap key, one a control
#: text's prefix), byte fallback beside nmt_nfkc, UNUSED pieces (merged, then resegmented)
USER_PIECES = ["[REF_1]", "[REF_12]", "ab", "e\u2581t", "x y", "ﬁ", "é", "<s>x", "ﾞ"]


def _user(model) -> None:
    have = {p.piece: p for p in model.pieces}
    for text in USER_PIECES:
        piece = have.get(text) or model.pieces.add()
        piece.piece, piece.type = text, 4


def _suffix(model) -> None:
    model.trainer_spec.treat_whitespace_as_suffix = True


def _spaces_kept(model) -> None:
    model.normalizer_spec.remove_extra_whitespaces = False


def _byte_fallback(model) -> None:
    model.trainer_spec.byte_fallback = True
    for b in range(256):
        piece = model.pieces.add()
        piece.piece, piece.type = f"<0x{b:02X}>", 6


def _unescaped(model) -> None:
    model.normalizer_spec.escape_whitespaces = False
    model.normalizer_spec.add_dummy_prefix = False


def _unused(model) -> None:
    rng = random.Random(0)
    for piece in model.pieces:
        if piece.type == 1 and rng.random() < 0.15:
            piece.type = 5


def _identity(model) -> None:
    model.normalizer_spec.precompiled_charsmap = b""
    model.normalizer_spec.name = "identity"


VARIANTS = {
    "user pieces": (BOTCHAN_BPE, [_user]),
    "dummy suffix": (BOTCHAN_BPE, [_suffix]),
    "spaces kept": (BOTCHAN_BPE, [_spaces_kept]),
    "byte fallback": (BOTCHAN_BPE, [_byte_fallback]),
    "no escaping, no dummy prefix": (BOTCHAN_BPE, [_unescaped]),
    "unused pieces": (BOTCHAN_BPE, [_unused]),
    "identity normalizer": (BOTCHAN_BPE, [_identity]),
    "user pieces, suffix, spaces kept": (BOTCHAN_BPE, [_user, _suffix, _spaces_kept]),
    "byte fallback, unused and user pieces": (BOTCHAN_BPE, [_byte_fallback, _unused, _user]),
    "Mistral, unused and user pieces": (MISTRAL, [_unused, _user]),
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spm_variants")
    out = {}
    for k, (label, (base, edits)) in enumerate(VARIANTS.items()):
        model = pb.ModelProto()
        model.ParseFromString(data_file("sentencepiece", base).read_bytes())
        for edit in edits:
            edit(model)
        path = folder / f"variant{k}.model"
        path.write_bytes(model.SerializeToString())
        out[label] = (load_sentencepiece(path), spm.SentencePieceProcessor(model_file=str(path)))
    return out


VARIANT_PIECES = PIECES + USER_PIECES + ["[REF_", "2]", "y", "b", "t", "x y z", "e t"]
VARIANT_INSERT = st.lists(st.sampled_from(VARIANT_PIECES), max_size=3).map("".join)


@EDIT_SETTINGS
@given(label=st.sampled_from(sorted(VARIANTS)), data=st.data(), special=st.booleans())
def test_random_edits_with_every_normalizer_option(variants, label, data, special):
    tok, library = variants[label]
    text = data.draw(st.lists(st.sampled_from(VARIANT_PIECES), max_size=20).map("".join), label="text")
    enc = inc.IncrementalEncoder(tok, text, special=special)
    assert enc.incremental
    _check(enc, tok, text, library)
    for _ in range(6):
        start = data.draw(st.integers(0, len(text)), label="start")
        removed = data.draw(st.integers(0, min(6, len(text) - start)), label="removed")
        inserted = data.draw(VARIANT_INSERT, label="inserted")
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, tok, text, library)
    assert enc.full_encodes == 0


# ---- the cut rule --------------------------------------------------------------------------

def test_key_characters_are_those_of_every_charsmap_key():
    """The breadth-first numpy walk finds the characters that follow another one in some key
    and the last characters of the longer keys, as a walk over every key (path) does."""
    charsmap = _model(BOTCHAN_BPE).normalizer.charsmap
    keys, stack = [], [(0, b"")]
    while stack:
        node, prefix = stack.pop()
        for byte, child in charsmap.children(node):
            if charsmap.value(child) is not None:
                keys.append(prefix + bytes([byte]))
            stack.append((child, prefix + bytes([byte])))
    longer = [k.decode("utf-8") for k in keys if len(k.decode("utf-8")) > 1]
    continuations, tails, whole = key_characters(charsmap)
    assert whole and longer
    assert continuations == {c for k in longer for c in k[1:]}
    assert tails == {k[-1] for k in longer}
    assert "\u0301" in continuations and "e" not in continuations


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(name=st.sampled_from([BOTCHAN_BPE, MISTRAL, *VARIANTS]),
       text=st.lists(st.sampled_from(VARIANT_PIECES), max_size=25).map("".join))
def test_a_cut_splits_the_tokens_into_the_two_sides_own(variants, name, text):
    """At every cut, the raw token spans of the whole text are those of the text before the cut
    (a head) followed by those of the text after it (a middle part up to the text's end)."""
    tok = variants[name][0] if name in variants else _model(name)
    is_cut = tok.edit_cuts()
    whole = tok.fragment_spans(text, 0, len(text), head=True, tail=True)
    for k in range(1, len(text)):
        if is_cut(text[k - 1:k + 1]):
            left = tok.fragment_spans(text, 0, k, head=True, tail=False)
            assert left + tok.fragment_spans(text, k, len(text), head=False, tail=True) == whole
            assert left and left[-1][2] == k  # the last token before a cut ends there


@pytest.mark.parametrize("name", [BOTCHAN_BPE, MISTRAL])
def test_the_cut_rule_on_known_places(name):
    """Word starts are cuts; two letters of a piece and a lone surrogate are not; CJK is cut with
    byte fallback only (botchan: both unknown, they would join one <unk>); a letter and a
    combining mark only without a charsmap (nmt_nfkc has keys for the pair)."""
    is_cut = _model(name).edit_cuts()
    assert isinstance(is_cut, EditCuts)
    assert is_cut("o ") and not is_cut("th") and not is_cut("a\ud83d") and not is_cut("\udc00a")
    assert is_cut("東京") == is_cut("e\u0301") == (name == MISTRAL)


def test_the_cut_rule_of_the_normalizers():
    """nmt_nfkc removing extra whitespace: nothing after a blank (is_prev_space), nor before a
    removed character (the token before would take it in); Mistral keeps both, but never cuts
    inside its user-defined pieces."""
    botchan, mistral = _model(BOTCHAN_BPE).edit_cuts(), _model(MISTRAL).edit_cuts()
    assert not botchan("\n東") and not botchan(" 😀") and not botchan("a\x01") and not botchan("x\u0338")
    assert mistral("\n東") and mistral(" 😀")
    assert not mistral("C_") and not mistral("[R") and not mistral("1]")


def test_a_literal_lower_block_before_trailing_blanks_is_no_cut_end():
    """A text's end drops trailing escaped spaces, and a literal ▁ looks like one: text after a
    ▁ that ends in blanks takes the ▁ with it (the identity normalizer keeps ▁ as it is)."""
    tok = load_sentencepiece(data_file("sentencepiece", BOTCHAN_BPE))
    tok.normalizer.charsmap = None
    is_cut = tok.edit_cuts()
    assert tok.edit_reason() == "" and not is_cut(SPACE + " ")
    text = "\nт\t\x01" + SPACE + "  "
    enc = inc.IncrementalEncoder(tok, text)
    enc.apply_edit(6, 0, "world")
    _check(enc, tok, text[:6] + "world" + text[6:])
    assert enc.full_encodes == 0


@pytest.mark.parametrize("name", [BOTCHAN_BPE, MISTRAL])
def test_normalizing_a_middle_part(name):
    """normalize_offsets(head=False, tail=False): no blank dropped at either end, no dummy prefix,
    the alignment ending at the part's length; at a cut the two parts join into the whole."""
    normalizer = _model(name).normalizer
    data = "ab  cd ".encode()
    normalized, n2o = normalizer.normalize_offsets(data, head=False, tail=False)
    assert normalized.decode() == ("ab▁cd▁" if name == BOTCHAN_BPE else "ab▁▁cd▁") and n2o[-1] == len(data)
    head, head_n2o = normalizer.normalize_offsets(b"x", head=True, tail=False)
    whole, whole_n2o = normalizer.normalize_offsets(b"x" + data, head=True, tail=False)
    assert head + normalized == whole
    assert list(head_n2o[:-1]) + [o + 1 for o in n2o] == list(whole_n2o)


# ---- edits are local ----------------------------------------------------------------------

LINE = ("The quick brown fox can't jump 1234 times;  Привет, мир!\t東京は日本の首都です。 ｆｕｌｌ ﬁ é 😀 "
        "[INST]x[/INST] [REFERENCE_DOC_1] <s>y</s>\n")


@pytest.mark.parametrize("name", [BOTCHAN_BPE, MISTRAL])
@pytest.mark.parametrize("special", [False, True])
def test_typing_in_a_large_document_stays_local(name, special):
    tok = _model(name)
    text = LINE * 300
    enc = inc.IncrementalEncoder(tok, text, special=special)
    middle = len(text) // 2
    for start, removed, inserted in [(middle, 0, "x"), (middle, 1, ""), (10, 0, " "), (0, 0, "Z"), (0, 1, ""),
                                     (0, 0, "   "), (0, 3, ""), (len(text) - 1, 1, "!"), (len(text), 0, "  "),
                                     (len(text), 0, "end  "), (LINE.index("東") + 2, 0, "京"),
                                     (LINE.index("<s>") + 1, 1, ""), (LINE.index("<s>") + 1, 0, "s"),
                                     (LINE.index("[INST]") + 2, 0, "N"), (777, 3, "</s>")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        assert enc.last_splice.removed < 30 and enc.last_splice.added < 30
    assert enc.full_encodes == 0
    assert list(enc.ids) == tok.encode(text, special=special) and enc.text == text
    assert _records(enc.tokens()[-60:]) == _records(tok.segment(text, special=special)[-60:])
    assert _records(enc.tokens()[:60]) == _records(tok.segment(text, special=special)[:60])


@pytest.mark.parametrize("special", [False, True])
def test_trailing_blanks_and_special_tokens_at_the_ends(special):
    """Blanks typed at the end vanish into the last token's span (and come back out of it);
    deleting a special token joins two fragments, typing one splits a fragment; blanks between
    two special tokens or after the last one give no token; emptying the text and starting again."""
    tok = _model(BOTCHAN_BPE)
    text = "Hello<s> world</s>"
    enc = inc.IncrementalEncoder(tok, text, special=special)
    for start, removed, inserted in [(18, 0, " "), (19, 0, "  "), (21, 0, "x"), (21, 1, ""), (5, 3, ""),
                                     (5, 0, "<s>   </s>"), (0, 0, "  "), (0, 2, ""), (8, 3, ""),
                                     (len("Hello<s></s> world</s>   "), 0, "<unk> "), (0, 0, "\t</s>\n"),
                                     (0, len("\t</s>\nHello<s></s> world</s>   <unk> "), ""), (0, 0, " a ")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, tok, text, _library(BOTCHAN_BPE))
    assert enc.full_encodes == 0


def test_an_unknown_run_is_one_region_without_byte_fallback():
    """botchan has no piece for these characters and no byte fallback: a run of them is one <unk>,
    so no cut stands inside it and an edit re-encodes the run whole."""
    tok = _model(BOTCHAN_BPE)
    text = "a " + "東京は日本の首都です" * 20 + " b"
    enc = inc.IncrementalEncoder(tok, text)
    for start, removed, inserted in [(50, 0, "x"), (50, 1, ""), (100, 0, "😀"), (3, 2, "")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, tok, text, _library(BOTCHAN_BPE))
    assert enc.full_encodes == 0 and tok.unk_id in enc.ids
