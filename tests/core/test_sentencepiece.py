"""SentencePiece encoding, decoding and alignment against the `sentencepiece` library.

The oracle is the library itself: the three real models, plus models trained here on
botchan.txt for the options those lack (user-defined pieces, whitespace as suffix, WORD and
CHAR models) and protobuf edits of them (UNUSED pieces, no space escaping, a denormalizer,
no UNKNOWN piece under byte fallback).
"""
from __future__ import annotations

import itertools
import random
from unittest import mock

import pytest
import sentencepiece as spm
from hypothesis import given, settings
from hypothesis import strategies as st
from sentencepiece import sentencepiece_model_pb2 as pb

import forma_gui.core.sentencepiece as sp_module
from forma_gui.core.sentencepiece import (Normalizer, PrefixMatcher, SentencePieceTokenizer,
                                          decode_utf8_per_byte, float_priority, tile_columns,
                                          tile_spans, tile_spans_reference)
from forma_gui.formats.sentencepiece_model import load_sentencepiece
from tests.conftest import MAX_EXAMPLES, data_file

MODELS = ["botchan_en_bpe_1000.model", "botchan_en_unigram_1000.model",
          "mistral_instruct_tokenizer_240323.model.v3"]

CORPUS = [
    "", " ", "   ", "a", "Hello world", "  leading and trailing  ", "multiple   spaces\there",
    "tab\tnew\nline\r\nend", "I'm here, aren't I? Yes!", "1234567 89 3.14159",
    "日本語のテキスト", "中文 한국어", "Привет, мир", "emoji 😀👍🏽 ok 🦙.cpp",
    "ｆｕｌｌwidth ＡＢＣ ﬁ ligature ﬂ", "① ² ½ ™", "e\u0301 combining", "\u200b\u200d\ufeff",
    "ctrl\x00\x01\x7f chars", "unknown ß þ ∑ ð", "€", "▁already ▁▁", "\u3000ideographic space",
    "[INST] hi [/INST] [REFERENCE_DOC_3]", "<s> </s> <unk> <0x41>", "x" * 200,
    "The quick brown fox jumps over the lazy dog. " * 4,
]


def _lib(path) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(path))


@pytest.fixture(scope="module", params=MODELS)
def pair(request):
    path = data_file("sentencepiece", request.param)
    return load_sentencepiece(path), _lib(path)


def test_corpus_ids_and_decode_equal_library(pair):
    tok, lib = pair
    for text in CORPUS:
        ids = lib.encode(text)
        assert tok.encode(text) == ids, text
        assert tok.decode(ids) == lib.decode(ids), text


@given(st.text())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_hypothesis_ids_and_decode_equal_library(text):
    for name in MODELS:
        path = data_file("sentencepiece", name)
        tok, lib = _cached(path)
        ids = lib.encode(text)
        assert tok.encode(text) == ids
        assert tok.decode(ids) == lib.decode(ids)


_CACHE: dict = {}


def _cached(path):
    if path not in _CACHE:
        _CACHE[path] = (load_sentencepiece(path), _lib(path))
    return _CACHE[path]


def test_long_text_unigram_score_rebase():
    """Thousands of pieces push the float32 path score past 1e5, where the C++ rebases."""
    path = data_file("sentencepiece", MODELS[1])
    tok, lib = _cached(path)
    text = data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")[:40000]
    ids = lib.encode(text)
    assert len(ids) > 12000
    assert tok.encode(text) == ids


# ---- trained models and protobuf edits ---------------------------------------------------

TRAIN = {
    "unigram_user": dict(model_type="unigram", vocab_size=700, byte_fallback=True,
                         user_defined_symbols=["<ud>", "foo", "ba r"]),
    "bpe_suffix": dict(model_type="bpe", vocab_size=300, treat_whitespace_as_suffix=True,
                       user_defined_symbols=["<ud>", "xyz"]),
    "unigram_nfkc_cf": dict(model_type="unigram", vocab_size=300, add_dummy_prefix=False,
                            remove_extra_whitespaces=False, normalization_rule_name="nfkc_cf"),
    "bpe_identity": dict(model_type="bpe", vocab_size=700, byte_fallback=True, split_digits=True,
                         normalization_rule_name="identity", remove_extra_whitespaces=False),
    "word": dict(model_type="word", vocab_size=500),
    "char": dict(model_type="char", vocab_size=100, user_defined_symbols=["ab"]),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spm")
    text = data_file("sentencepiece", "botchan.txt")
    out = {}
    for name, config in TRAIN.items():
        spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(folder / name),
                                       input_sentence_size=2000, shuffle_input_sentence=False,
                                       minloglevel=2, **config)
        out[name] = folder / f"{name}.model"
    return out


def _variants(path, seed: int):
    """The model, and protobuf edits of it the library still loads."""
    rng = random.Random(seed)
    base = pb.ModelProto()
    base.ParseFromString(path.read_bytes())
    yield "as trained", base
    unused = pb.ModelProto()
    unused.CopyFrom(base)
    for piece in unused.pieces:
        if piece.type == 1 and rng.random() < 0.1:
            piece.type = 5
    yield "unused pieces", unused
    plain = pb.ModelProto()
    plain.CopyFrom(base)
    plain.normalizer_spec.escape_whitespaces = False
    plain.normalizer_spec.add_dummy_prefix = not base.normalizer_spec.add_dummy_prefix
    yield "no escaping, prefix flipped", plain
    denorm = pb.ModelProto()
    denorm.CopyFrom(base)
    nfkc = pb.ModelProto()
    nfkc.ParseFromString(data_file("sentencepiece", MODELS[1]).read_bytes())
    denorm.denormalizer_spec.CopyFrom(nfkc.normalizer_spec)
    denorm.trainer_spec.treat_whitespace_as_suffix = not base.trainer_spec.treat_whitespace_as_suffix
    yield "denormalizer, suffix flipped", denorm
    if base.trainer_spec.byte_fallback:
        no_unk = pb.ModelProto()
        no_unk.CopyFrom(base)
        for piece in no_unk.pieces:
            if piece.type == 2:
                piece.type = 1
        yield "no unknown piece", no_unk


ALPHABET = (list("abcdefghijklmnopqrstuvwxyz ABCXYZ  \t\n.,!?'\"-0123456789")
            + list("ｆｕｌｌﬁﬂ①²½é\u0301ñßþ∑€日本語中文한국어Привет😀👍🏽\u200b\ufeff\x00\x7f\xa0\u3000▁<>")
            + ["foo", "ba r", "<ud>", "xyz", "the", "ing", "ab", "  ", "<s>"])


@pytest.mark.parametrize("name", sorted(TRAIN))
def test_trained_models_and_edits_equal_library(trained, tmp_path, name):
    rng = random.Random(name)
    texts = CORPUS + ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 25)))
                      for _ in range(150)]
    for label, proto in _variants(trained[name], len(name)):
        path = tmp_path / f"{name}.model"
        path.write_bytes(proto.SerializeToString())
        tok, lib = load_sentencepiece(path), _lib(path)
        for text in texts:
            ids = lib.encode(text)
            assert tok.encode(text) == ids, (label, text)
            assert tok.decode(ids) == lib.decode(ids), (label, text)


# ---- decoding, alignment, helpers ----------------------------------------------------------

def test_byte_fallback_pieces_join_across_tokens():
    tok, lib = _cached(data_file("sentencepiece", MODELS[2]))
    ids = [tok.id_of(p) for p in ("<0xE2>", "<0x82>", "<0xAC>")]
    assert tok.decode(ids) == "€" == lib.decode(ids)
    rare = "\U0001d518"  # 𝔘 has no piece: four byte pieces after "▁"
    expected = [tok.id_of(f"<0x{b:02X}>") for b in rare.encode("utf-8")]
    assert tok.encode(rare)[-4:] == expected == lib.encode(rare)[-4:]
    assert tok.decode(tok.encode(rare)) == rare
    # a truncated character: one U+FFFD per byte, as the library
    assert tok.decode(ids[:2] + [tok.id_of("▁a")]) == lib.decode(ids[:2] + [tok.id_of("▁a")])
    assert decode_utf8_per_byte(b"\xe2\x82x") == "\ufffd\ufffdx"


def _char_offsets(text: str, normalized: bytes, n2o: list[int]) -> list[int]:
    """Our byte alignment as the library's with_offsets reports it: per normalized char."""
    data = text.encode("utf-8")
    to_char = [0] * (len(data) + 1)
    pos = 0
    for i, ch in enumerate(text):
        for _ in ch.encode("utf-8"):
            to_char[pos] = i
            pos += 1
    to_char[len(data)] = len(text)
    out, b = [], 0
    for ch in normalized.decode("utf-8"):
        out.append(to_char[n2o[b]])
        b += len(ch.encode("utf-8"))
    return out + [to_char[n2o[-1]]]


@pytest.mark.parametrize("name", MODELS[:2])
def test_normalizer_alignment_equals_library(name):
    path = data_file("sentencepiece", name)
    tok = load_sentencepiece(path)
    lib = spm.SentencePieceNormalizer(model_file=str(path))
    for text in CORPUS[1:]:
        if "\x00" in text:
            continue
        expected_text, expected_offsets = lib.normalize(text, with_offsets=True)
        normalized, n2o = tok.normalizer.normalize(text.encode("utf-8"))
        if not normalized:  # the C++ leaves no alignment at all for an empty result
            assert expected_text == ""
            continue
        assert normalized.decode("utf-8") == expected_text, text
        assert _char_offsets(text, normalized, n2o) == list(expected_offsets), text


# ---- the fast normalizer -----------------------------------------------------------------

#: what the fast path copies in runs or has to leave to the slow one: runs of spaces and
#: other whitespace, characters that start a charsmap key only before a combining mark
#: (Latin, Cyrillic, kana, halfwidth kana, Hangul jamo, Arabic), characters it maps
#: (fullwidth, ligatures, to nothing, to text with a space), user-defined piece texts and
#: their first characters
NORM_TEXTS = [
    " ", "  ", "    ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\xa0", "\u3000", "\u2003", "\u200b",
    "\ufeff", "▁", "▁▁", "a", "e", "A", "x", "[", "<", "Q", "\u0301", "\u0308", "\u0306",
    "e\u0301", "A\u030a\u0301", "\u0438\u0306", "\u0435", "\u304b\u3099", "\u304b",
    "\uff8a\uff9e", "\u1100\u1161", "\u1100", "\u0627\u0653", "ｆ", "，", "！", "ﬁ", "½", "①",
    "¨", "\u00b4", "\x01", "\x00", "\x7f", "Привет", "日本", "한", "😀", "👍🏽", "\ufffd",
    "ﷺ", "[INST]", "[/INST]", "[REFERENCE_DOC_3]", "<ud>", "ﬁx", "e\u0301t", "xyz", "ba r",
]
#: malformed UTF-8: stray continuation and lead bytes, truncated, overlong, surrogate,
#: past U+10FFFF
BAD_BYTES = [b"\x80", b"\xbf", b"\xc3", b"\xc0\xaf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xe2\x82",
             b"\xed\xa0\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80", b"\xff"]
NORM_BYTES = st.lists(st.sampled_from([t.encode() for t in NORM_TEXTS] + BAD_BYTES)
                      | st.text(max_size=3).map(str.encode), max_size=40).map(b"".join)
NORM_STR = st.lists(st.sampled_from(NORM_TEXTS) | st.text(max_size=3), max_size=40).map("".join)
#: user-defined pieces: whitespace, a charsmap key, a character mapped to whitespace, ones
#: beginning with a character that is plain alone or starts a key before a combining mark
USER_PIECES = [b"[INST]", b"[/INST]", b"<ud>", b"  ", b"\n\n", "▁▁".encode(), "ﬁ".encode(),
               "e\u0301t".encode(), "\u0438".encode(), b"xyz", b"ba r"]
OPTIONS = ("add_dummy_prefix", "remove_extra_whitespaces", "escape_whitespaces",
           "treat_whitespace_as_suffix")
_NORMALIZERS: dict = {}


def _normalizer(flags: tuple[bool, ...], charsmap: bool, matcher: bool) -> Normalizer:
    """A Normalizer with these options, nmt_nfkc's charsmap and `USER_PIECES` (cached: the
    fast path builds its tables once per normalizer)."""
    key = (flags, charsmap, matcher)
    if key not in _NORMALIZERS:
        nfkc = _cached(data_file("sentencepiece", MODELS[0]))[0].normalizer.charsmap
        _NORMALIZERS[key] = Normalizer(nfkc if charsmap else None, **dict(zip(OPTIONS, flags)),
                                       matcher=PrefixMatcher(USER_PIECES) if matcher else None)
    return _NORMALIZERS[key]


def _both_paths(normalizer: Normalizer, data: bytes) -> tuple[bytes, list[int]]:
    """The fast result with runs copied in Python and in numpy; asserts they agree."""
    short = normalizer.normalize(data)
    with mock.patch.object(sp_module, "LONG_RUN", 1):
        assert normalizer.normalize(data) == short
    return short


@given(NORM_BYTES, st.integers(1, 20), st.tuples(*[st.booleans()] * 4), st.booleans(),
       st.booleans())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_fast_normalizer_equals_reference_for_every_option(data, repeat, flags, charsmap,
                                                           matcher):
    normalizer = _normalizer(flags, charsmap, matcher)
    data = data * repeat
    assert _both_paths(normalizer, data) == normalizer.normalize(data, fast=False)


#: tokens whose joins are the fast path's edges: a run starting after a slow piece ending in
#: a space ("  " is a user-defined piece), blanks of several kinds, a key only before a
#: combining mark, mapped characters (to text, to text with an inner or a leading space, to
#: nothing), a piece and its first character, malformed bytes
EDGE_TOKENS = [b" ", b"  ", b"a", b"\n", "\u3000".encode(), "e".encode(), "\u0301".encode(),
               "，".encode(), "ﷺ".encode(), "¨".encode(), b"\x01", "▁".encode(), b"[INST]", b"[",
               b"\xff", b"\xe0\x80\x80"]


@pytest.mark.parametrize("flags", [(True, True, True, False), (True, False, True, False),
                                   (False, True, False, True)])
def test_fast_normalizer_equals_reference_on_every_short_join(flags):
    """Every sequence of up to three `EDGE_TOKENS`, with and without user-defined pieces."""
    texts = [b"".join(p) for n in range(1, 4) for p in itertools.product(EDGE_TOKENS, repeat=n)]
    for matcher in (False, True):
        normalizer = _normalizer(flags, True, matcher)
        for data in texts:
            assert _both_paths(normalizer, data) == normalizer.normalize(data, fast=False), data


@given(NORM_BYTES, st.integers(1, 20), st.tuples(*[st.booleans()] * 3), st.booleans())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_fast_normalizer_equals_library(data, repeat, flags, charsmap):
    """Without user-defined pieces and whitespace as suffix (which the library's
    SentencePieceNormalizer ignores): the library's output and byte offsets."""
    normalizer = _normalizer(flags + (False,), charsmap, False)
    data = data * repeat
    expected_text, expected_offsets = _lib_normalizer(flags, charsmap).normalize(
        data, with_offsets=True)
    normalized, n2o = _both_paths(normalizer, data)
    assert normalized == expected_text
    if normalized:  # the C++ leaves no alignment at all for an empty result
        assert n2o == list(expected_offsets)


_LIB_NORMALIZERS: dict = {}


def _lib_normalizer(flags: tuple[bool, ...], charsmap: bool) -> spm.SentencePieceNormalizer:
    if (flags, charsmap) not in _LIB_NORMALIZERS:
        proto = pb.ModelProto()
        proto.ParseFromString(data_file("sentencepiece", MODELS[0]).read_bytes())
        if not charsmap:
            proto.normalizer_spec.name = "identity"
            proto.normalizer_spec.precompiled_charsmap = b""
        _LIB_NORMALIZERS[flags, charsmap] = spm.SentencePieceNormalizer(
            model_proto=proto.SerializeToString(), **dict(zip(OPTIONS, flags)))
    return _LIB_NORMALIZERS[flags, charsmap]


PIECES = st.lists(st.text(max_size=3) | st.sampled_from(
    ["e\u0301", "a\u0308", " ", "  ", "ﬁ", "▁", "\x00", "[INST]", "<0x41>", "\u3000"]))


@given(PIECES, st.integers(0, 40))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_fast_normalizer_equals_reference(pieces, repeat):
    """Short runs, and long ones (numpy alignment) when the pieces are repeated."""
    data = "".join(pieces).encode("utf-8")
    data = data * (repeat if len(data) * repeat >= 512 else 1)
    for name in MODELS:
        normalizer = _cached(data_file("sentencepiece", name))[0].normalizer
        assert normalizer.normalize(data) == normalizer.normalize(data, fast=False)


@given(NORM_BYTES, st.integers(1, 20))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_model_normalizers_fast_equal_reference(data, repeat):
    data = data * repeat
    for name in MODELS:
        normalizer = _cached(data_file("sentencepiece", name))[0].normalizer
        assert _both_paths(normalizer, data) == normalizer.normalize(data, fast=False)


@given(NORM_STR)
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_hypothesis_normalizer_texts_ids_equal_library(text):
    for name in MODELS:
        tok, lib = _cached(data_file("sentencepiece", name))
        assert tok.encode(text) == lib.encode(text)


def _corpus_slices() -> list[str]:
    """Six ~40 kB slices of the benchmark's mixed text (English, Python source, Cyrillic,
    CJK): the start of each part and two stretches inside the code and the English."""
    from forma_gui.bench.encode import build_corpus

    data_file("sentencepiece", "botchan.txt")
    data_file("hf", "qwen3", "vocab.json")
    corpus = build_corpus(0.5)
    size = 40_000
    starts = [0, len(corpus) // 8, corpus.index("\n", len(corpus) // 4)]
    starts += [next(i for i in range(p, len(corpus)) if ord(corpus[i]) > 0x2000)
               for p in (len(corpus) * 5 // 8, len(corpus) * 7 // 8)]
    starts.append(len(corpus) - size)
    return [corpus[s:s + size] for s in starts]


@pytest.fixture(scope="module")
def corpus_slices() -> list[str]:
    return _corpus_slices()


@pytest.mark.parametrize("name", MODELS)
def test_corpus_slices_ids_equal_library(corpus_slices, name):
    tok, lib = _cached(data_file("sentencepiece", name))
    for text in corpus_slices:
        assert tok.encode(text) == lib.encode(text)


@pytest.mark.parametrize("name", MODELS[:2])
def test_corpus_slices_alignment_equals_library(corpus_slices, name):
    tok, _ = _cached(data_file("sentencepiece", name))
    lib = spm.SentencePieceNormalizer(model_file=str(data_file("sentencepiece", name)))
    for text in corpus_slices:
        data = text.encode()
        normalized, n2o = tok.normalizer.normalize(data)
        expected_text, expected_offsets = lib.normalize(data, with_offsets=True)
        assert normalized == expected_text
        assert n2o == list(expected_offsets)


@pytest.mark.parametrize("name", MODELS)
def test_segments_tile_the_input(name):
    tok, _ = _cached(data_file("sentencepiece", name))
    for text in CORPUS:
        segments = tok.segment(text)
        assert [t.id for t in segments] == tok.encode(text)
        pos = 0
        for t in segments:
            assert t.start == pos or (t.partial and t.start < pos), (text, segments)
            pos = max(pos, t.end)
        assert not segments or pos == len(text)


def test_segment_spans_known_answer():
    tok, _ = _cached(data_file("sentencepiece", MODELS[2]))
    segments = tok.segment("Hi \U0001d518!")
    assert [t.piece for t in segments] == ["▁Hi", "▁", "<0xF0>", "<0x9D>", "<0x94>", "<0x98>", "!"]
    assert [(t.start, t.end, t.partial) for t in segments] == [
        (0, 2, False), (2, 3, False), *[(3, 4, True)] * 4, (4, 5, False)]
    assert [t.data for t in segments[2:6]] == [bytes([b]) for b in "\U0001d518".encode()]
    botchan, _ = _cached(data_file("sentencepiece", MODELS[1]))
    segments = botchan.segment("  Hello   world  ")  # removed spaces join the next token
    assert [(t.piece, t.start, t.end) for t in segments] == [
        ("▁He", 0, 4), ("ll", 4, 6), ("o", 6, 7), ("▁world", 7, 17)]


def test_special_segments_match_control_pieces():
    tok, _ = _cached(data_file("sentencepiece", MODELS[2]))
    segments = tok.segment("[INST] hi [/INST]", special=True)
    assert segments[0].piece == "[INST]" and segments[0].special
    assert segments[-1].piece == "[/INST]" and (segments[-1].start, segments[-1].end) == (10, 17)
    assert tok.encode("[INST]") != [tok.id_of("[INST]")]  # plain encode never matches them


def test_tile_spans_examples():
    assert tile_spans([(2, 3), (3, 4), (3, 4), (4, 4)], 6) == [
        (0, 3, False), (3, 4, True), (3, 4, True), (4, 6, False)]
    assert tile_spans([(0, 0), (0, 5)], 5) == [(0, 0, False), (0, 5, False)]
    assert tile_spans([], 3) == []


def _token_spans(steps: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], int]:
    """(spans as tokenizers make them, overlapping or not, the furthest end) from drawn steps."""
    spans, pos = [], 0
    for back, width in steps:
        start = max(0, pos - back % 3) if back > 9 else pos + back % 2
        spans.append((start, start + width))
        pos = max(pos, start + width)
    return spans, pos


STEPS = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 4)))


@given(STEPS, st.integers(0, 3))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_tile_spans_shortcut_equals_clusters(steps, tail):
    """Spans as tokenizers make them (starts never go back), overlapping or not."""
    spans, pos = _token_spans(steps)
    assert tile_spans(spans, pos + tail) == tile_spans_reference(spans, pos + tail)


@given(STEPS, st.integers(0, 3))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_tile_columns_equal_clusters(steps, tail):
    """The numpy tiling: the reference's spans and flags while no end goes back, else None."""
    spans, pos = _token_spans(steps)
    tiled = tile_columns([s for s, _ in spans], [e for _, e in spans], pos + tail)
    if any(e1 < e0 for (_, e0), (_, e1) in zip(spans, spans[1:])):
        assert tiled is None
    else:
        assert list(zip(*(c.tolist() for c in tiled))) == tile_spans_reference(spans, pos + tail)


def test_float_priority_orders_like_the_cpp_comparator():
    scores = [-2.0, -1.0, -0.0, 0.0, 1.0, 3.5]
    assert sorted(scores, key=float_priority) == scores


def test_merge_steps_rebuild_the_bpe_pieces():
    tok, _ = _cached(data_file("sentencepiece", MODELS[0]))
    steps = tok.merge_steps("lowest")
    assert steps and "".join(steps[-1].symbols) == "▁lowest"
    assert list(steps[-1].symbols) == [tok.piece(i) for i in tok.encode("lowest")]


def test_direct_construction_and_types():
    sp = SentencePieceTokenizer(["<unk>", "<s>", "▁a", "b", "▁", "<0x41>"],
                                [0, 0, -1, -2, -3, 0], [2, 3, 1, 1, 1, 6],
                                algorithm="unigram", byte_fallback=True,
                                normalizer=Normalizer(add_dummy_prefix=True))
    assert sp.encode("ab b") == [2, 3, 4, 3]
    assert [sp.token_type(i) for i in range(6)] == [
        "unknown", "control", "normal", "normal", "normal", "byte"]
    assert sp.token_bytes(5) == b"A" and sp.token_bytes(1) == b"" and sp.token_bytes(4) == b" "
    assert sp.decode([1, 2, 3, 0]) == "ab \u2047 "


# ---- BPE word by word ----------------------------------------------------------------------

BPE_MODELS = [MODELS[0], MODELS[2]]
WORDS_ALPHABET = ALPHABET + ["[INST]", "[/INST]", "[TOOL_CALLS]", "▁▁", "   ", "\n"]


def _whole(tok: SentencePieceTokenizer, text: str) -> list[tuple[int, int]]:
    """The reference: BPE over the whole normalized text, no words, no cache."""
    normalized, _ = tok.normalizer.normalize(text.encode("utf-8", "surrogatepass"))
    return tok._bpe_whole(normalized, tok.tables(), None)


def _words(tok: SentencePieceTokenizer, text: str) -> list[tuple[int, int]]:
    normalized, _ = tok.normalizer.normalize(text.encode("utf-8", "surrogatepass"))
    return tok.encode_normalized(normalized)


@pytest.mark.parametrize("name", BPE_MODELS)
def test_bpe_models_are_cut_into_words(name):
    assert _cached(data_file("sentencepiece", name))[0].tables()["chunkable"]


@given(st.lists(st.sampled_from(WORDS_ALPHABET), max_size=60).map("".join) | st.text())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_bpe_words_equal_the_whole_text_and_the_library(text):
    """User-defined pieces (frozen), spaces, byte fallback and unknown characters."""
    for name in BPE_MODELS:
        tok, lib = _cached(data_file("sentencepiece", name))
        assert _words(tok, text) == _whole(tok, text)
        assert tok.encode(text) == lib.encode(text)
        normalized, n2o = tok.normalizer.normalize(text.encode("utf-8", "surrogatepass"))
        result = tok.encode_normalized(normalized)
        expected = tok._populate_reference(normalized, n2o, result)
        assert tok._populate(normalized, n2o, result) == expected


def test_bpe_words_on_botchan_equal_the_library():
    text = data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")[:60000]
    for name in BPE_MODELS:
        tok, lib = _cached(data_file("sentencepiece", name))
        assert tok.encode(text) == lib.encode(text)
    tok = _cached(data_file("sentencepiece", MODELS[0]))[0]
    assert _words(tok, text[:8000]) == _whole(tok, text[:8000])


def _edited(path, tmp_path, edit) -> tuple[SentencePieceTokenizer, spm.SentencePieceProcessor]:
    model = pb.ModelProto()
    model.ParseFromString(path.read_bytes())
    edit(model)
    out = tmp_path / "edited.model"
    out.write_bytes(model.SerializeToString())
    return load_sentencepiece(out), _lib(out)


def test_bpe_piece_across_a_word_start_keeps_the_whole_text(tmp_path):
    """A piece "e▁t" joins two words: the model is not cut (and still equals the library)."""
    def add(model):
        piece = model.pieces.add()
        piece.piece, piece.score, piece.type = "e▁t", 0.0, 1
    tok, lib = _edited(data_file("sentencepiece", MODELS[0]), tmp_path, add)
    assert not tok.tables()["chunkable"]
    text = "the tree the table"
    assert tok.id_of("e▁t") in lib.encode(text)
    assert tok.encode(text) == lib.encode(text)


@pytest.mark.parametrize("seed", range(3))
def test_bpe_unused_pieces_resegment_word_by_word(tmp_path, seed):
    """A merged UNUSED piece splits back by the pair that formed its text, which is the same
    in every word: word by word equals the whole text and the library."""
    rng = random.Random(seed)

    def unused(model):
        for piece in model.pieces[3:]:
            if piece.type == 1 and len(piece.piece) > 1 and rng.random() < 0.3:
                piece.type = 5
    tok, lib = _edited(data_file("sentencepiece", MODELS[0]), tmp_path, unused)
    assert tok.tables()["chunkable"]
    text = data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")[:30000]
    assert tok.encode(text) == lib.encode(text)
    assert _words(tok, text[:4000]) == _whole(tok, text[:4000])


def test_bpe_single_character_unused_pieces(tmp_path):
    def unused(model):
        for piece in model.pieces:
            if piece.piece in ("q", "z", "é"):
                piece.type = 5
    tok, lib = _edited(data_file("sentencepiece", MODELS[0]), tmp_path, unused)
    assert tok.tables()["chunkable"]
    for text in ("quiz zoo é q", "the queen quietly quit", CORPUS[-1]):
        assert tok.encode(text) == lib.encode(text) and _words(tok, text) == _whole(tok, text)


def test_bpe_word_cache_is_bounded(monkeypatch):
    import forma_gui.core.sentencepiece as sp_module

    tok = load_sentencepiece(data_file("sentencepiece", MODELS[0]))
    monkeypatch.setattr(sp_module, "CHUNK_CACHE_LIMIT", 4)
    text = "one two three four five six seven one two"
    assert tok.encode(text) == _lib(data_file("sentencepiece", MODELS[0])).encode(text)
    assert len(tok.tables()["chunk_cache"]) <= 4


# ---- segment_columns: segment() as numpy columns, no Token per token -----------------------

COLUMNS_ALPHABET = list("ab Zz  \n\t\r.,'0123") + [
    " ", "   ", "\n\n", "\t\t", "é", "e\u0301", "東京", "Привет", "😀", "👍🏽", "▁", "ß", "ｆ", "①",
    "\x00", "\x7f", "\u200b", "\ufffd", "<s>", "</s>", "<unk>", "[INST]", "[/INST]",
    "[REFERENCE_DOC_3]", "<0x0A>", "  x", "don't"]
COLUMNS_TEXT = (st.lists(st.sampled_from(COLUMNS_ALPHABET), max_size=40).map("".join)
                | st.text(max_size=40))


def _assert_columns_equal_segment(tok: SentencePieceTokenizer, text: str, special: bool) -> None:
    want = tok.segment(text, special=special)
    columns = tok.segment_columns(text, special=special)
    assert columns is not None, text
    ids, starts, ends, flags = (c.tolist() for c in columns)
    assert ids == [t.id for t in want]
    assert starts == [t.start for t in want]
    assert ends == [t.end for t in want]
    assert flags == [t.partial | t.special << 1 for t in want]


@pytest.mark.parametrize("special", [False, True])
def test_columns_equal_segment_on_the_corpus(pair, special):
    """The fast path is taken (never None) on ordinary and odd text alike."""
    tok, _ = pair
    for text in CORPUS + [" " + CORPUS[-1], "\n\n  \t x", "<s>a</s>[INST] 😀 [/INST]<unk>"]:
        _assert_columns_equal_segment(tok, text, special)


@given(COLUMNS_TEXT, st.booleans())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_columns_equal_segment(text, special):
    """Spaces (leading, repeated), newlines, tabs, byte fallback, unknown runs, charsmap
    changes, user-defined pieces and added tokens, special matching on and off."""
    for name in MODELS:
        tok, _ = _cached(data_file("sentencepiece", name))
        _assert_columns_equal_segment(tok, text, special)


def test_columns_of_a_long_mixed_text_equal_segment():
    """Long enough for the sliced word split and the numpy runs of the normalizer."""
    text = data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")[:20000]
    text = text + " 東京 😀\t\t" + text[:3000].upper() + "  [INST] <s>"
    for name in MODELS:
        tok, _ = _cached(data_file("sentencepiece", name))
        _assert_columns_equal_segment(tok, text, name == MODELS[2])


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(1, 4)), max_size=40), st.data())
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_populate_columns_equal_the_cpp_loop(steps, data):
    """Control, unknown (byte fallback and runs), byte and normal pieces in any order, with
    and without byte fallback, against `_populate_reference`."""
    import numpy as np

    for name in (MODELS[1], MODELS[2]):  # no byte fallback, byte fallback
        tok, _ = _cached(data_file("sentencepiece", name))
        tables = tok.tables()
        kinds = [sorted(tables["control_ids"]), tables["unknown_ids"][:1], [tok.vocab_size - 1, 100]]
        result = [(kinds[k % 3][k % len(kinds[k % 3])], width) for k, width in steps]
        size = sum(w for _, w in result)
        normalized = data.draw(st.binary(min_size=size, max_size=size))
        n2o = sorted(data.draw(st.lists(st.integers(0, 50), min_size=size + 1, max_size=size + 1)))
        expected = tok._populate_reference(normalized, n2o, result)
        off = np.cumsum([0] + [w for _, w in result])
        columns = tok._populate_columns(normalized, np.array([i for i, _ in result], dtype=np.int64),
                                        off, np.array(n2o, dtype=np.int64)[off])
        assert list(zip(*(c.tolist() for c in columns))) == expected
        assert tok._populate(normalized, n2o, result) == expected


@given(st.lists(st.sampled_from(["▁", "▁▁", "a", "bc", "é", "東", "\x00"]), max_size=80).map("".join))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
def test_word_split_in_slices_equals_one_split(text):
    import forma_gui.core.sentencepiece as sp_module

    data = text.encode()
    whole = sp_module._WORD_CUT.split(data)
    for size in (1, 3, 7):
        original, sp_module.WORD_SLICE = sp_module.WORD_SLICE, size
        try:
            assert sp_module.split_at_word_starts(data) == whole
        finally:
            sp_module.WORD_SLICE = original


def test_encode_without_spans_equals_the_spans_ids():
    for name in MODELS:
        tok, lib = _cached(data_file("sentencepiece", name))
        for text in CORPUS:
            assert tok.encode(text) == [i for i, _, _ in tok._encode_spans(text)] == lib.encode(text)
