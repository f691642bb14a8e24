"""Fuzz the SentencePiece .model reader (our protobuf wire reader + ModelProto checks).

Seeds: the three .model files of the test data (botchan BPE and unigram with their
precompiled nmt_nfkc charsmap, and Mistral's BPE with byte fallback), read with the
library's own `sentencepiece_model_pb2` and cut to their first `KEEP` pieces. Each example
re-encodes a seed with a wire encoder written here (the library's one refuses invalid
UTF-8 and out-of-range enums), with structural edits: pieces replaced by hostile ones (empty,
NUL, not UTF-8, too long, duplicated, mis-spelled byte pieces), scores of NaN and infinity,
piece types outside the enum, trainer and normalizer fields overridden by extreme varints
or the wrong wire type, a damaged charsmap; then byte edits on top (varint fields known).
"""
from __future__ import annotations

import functools
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forma_gui import load_tokenizer
from forma_gui.formats.sentencepiece_model import load_sentencepiece
from tests.conftest import data_file
from tests.fuzz.harness import (EXTREME_INTS, TOKENIZER_MEMORY_MULTIPLE, Field, apply_ops,
                                byte_ops, check_tokenizer, fresh_path, fuzz_settings,
                                note_example, run_reader)

pb2 = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")

KEEP = 320  # normal pieces kept after the last reserved one (Mistral's <0xNN> end at 1026)
SEEDS = ["botchan_en_bpe_1000.model", "botchan_en_unigram_1000.model",
         "mistral_instruct_tokenizer_240323.model.v3"]
TRAINER_FIELD_NUMBERS = (3, 4, 24, 25, 26, 35, 40, 41, 42, 43, 44, 45, 46, 47, 48)
NORMALIZER_FIELD_NUMBERS = (1, 2, 3, 4, 5, 6)
HOSTILE_PIECES = [b"", b"\0", b"\xff\xfe", b"\xed\xa0\x80", b"a" * 9000, b"<0x4G>", b"<0x0A>",
                  b"<0x0a>", b"<unk>", b"\xe2\x96\x81", b"\xe2\x96\x81\xe2\x96\x81the"]
HOSTILE_FLOATS = [float("nan"), float("inf"), float("-inf"), 3.4e38, -0.0, 1e-45]
PIECE_TYPES = [0, 1, 2, 3, 4, 5, 6, 7, 2**31, 2**64 - 1]  # valid: 1..6


# -- a wire encoder --------------------------------------------------------------------------

def varint(value: int) -> bytes:
    value &= 2**64 - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def length_delimited(number: int, body: bytes) -> bytes:
    return tag(number, 2) + varint(len(body)) + body


def encode_piece(piece: bytes, score: float, kind: int | None) -> bytes:
    body = length_delimited(1, piece) + tag(2, 5) + struct.pack("<f", score)
    return body + (tag(3, 0) + varint(kind) if kind is not None else b"")


@functools.lru_cache(maxsize=None)
def seed(name: str) -> tuple[list[tuple[bytes, float, int | None]], bytes, bytes, bytes | None]:
    """(pieces, trainer_spec bytes, normalizer_spec bytes, denormalizer bytes) of a seed."""
    m = pb2.ModelProto()
    m.ParseFromString(data_file("sentencepiece", name).read_bytes())
    reserved = [i for i, p in enumerate(m.pieces) if p.type != pb2.ModelProto.SentencePiece.NORMAL]
    pieces = [(p.piece.encode(), p.score, p.type if p.HasField("type") else None)
              for p in m.pieces[:max(reserved, default=0) + 1 + KEEP]]
    deno = m.denormalizer_spec.SerializeToString() if m.HasField("denormalizer_spec") else None
    return pieces, m.trainer_spec.SerializeToString(), m.normalizer_spec.SerializeToString(), deno


def encode_model(pieces, trainer: bytes, normalizer: bytes,
                 deno: bytes | None) -> tuple[bytes, list[Field]]:
    """The ModelProto bytes and the varint fields (piece lengths, types) worth replacing."""
    out, fields = bytearray(), []
    for piece in pieces:
        body = encode_piece(*piece)
        fields.append(Field(len(out) + 1, 1))  # the piece's length varint
        if piece[2] is not None:
            fields.append(Field(len(out) + 1 + len(varint(len(body))) + len(body) - 1, 1))
        out += length_delimited(1, body)
    out += length_delimited(2, trainer) + length_delimited(3, normalizer)
    if deno is not None:
        out += length_delimited(5, deno)
    return bytes(out), fields


# -- structural edits ---------------------------------------------------------------------------

@st.composite
def piece_edits(draw: st.DrawFn, pieces: list) -> list:
    pieces = list(pieces)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(pieces) - 1))
        piece, score, kind = pieces[at]
        what = draw(st.sampled_from(["piece", "score", "type", "copy", "delete"]))
        if what == "piece":
            piece = draw(st.sampled_from(HOSTILE_PIECES) | st.binary(max_size=6))
        elif what == "score":
            score = draw(st.sampled_from(HOSTILE_FLOATS) | st.floats(width=32))
        elif what == "type":
            kind = draw(st.sampled_from(PIECE_TYPES))
        elif what == "copy":
            piece = pieces[draw(st.integers(0, len(pieces) - 1))][0]
        if what == "delete":
            del pieces[at]
        else:
            pieces[at] = (piece, score, kind)
    return pieces


@st.composite
def overrides(draw: st.DrawFn, numbers: tuple[int, ...]) -> bytes:
    """Fields appended to a spec: protobuf keeps the last value of a repeated scalar."""
    out = b""
    for _ in range(draw(st.integers(0, 2))):
        number = draw(st.sampled_from(numbers))
        wire = draw(st.sampled_from([0, 0, 0, 2, 5, 1]))
        if wire == 0:
            out += tag(number, 0) + varint(draw(st.sampled_from(EXTREME_INTS) | st.integers(-3, 9)))
        elif wire == 2:
            out += length_delimited(number, draw(st.binary(max_size=8)))
        else:
            out += tag(number, wire) + bytes(4 if wire == 5 else 8)
    return out


@st.composite
def models(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(SEEDS))
    pieces, trainer, normalizer, deno = seed(name)
    pieces = draw(piece_edits(pieces))
    trainer += draw(overrides(TRAINER_FIELD_NUMBERS))
    normalizer += draw(overrides(NORMALIZER_FIELD_NUMBERS))
    blob, fields = encode_model(pieces, trainer, normalizer, deno)
    return apply_ops(blob, draw(st.none() | byte_ops(len(blob), fields, max_ops=3)) or ())


@fuzz_settings()
@given(blob=models())
def test_structural_and_byte_edits(tmp_path: Path, blob: bytes) -> None:
    path = fresh_path(tmp_path, "tokenizer.model")
    path.write_bytes(blob)
    note_example("sentencepiece")
    # through the sniffing entry point when it would pick this reader, else directly
    load = load_tokenizer if blob[:1] == b"\n" else load_sentencepiece
    run_reader(lambda: load(path), [path], memory_multiple=TOKENIZER_MEMORY_MULTIPLE,
               check=check_tokenizer)


@pytest.mark.parametrize("name", SEEDS)
def test_seeds_load(tmp_path: Path, name: str) -> None:
    """The re-encoded seeds are valid models that the library loads too."""
    spm = pytest.importorskip("sentencepiece")
    blob, _ = encode_model(*seed(name))
    path = tmp_path / "tokenizer.model"
    path.write_bytes(blob)
    tok = load_tokenizer(path)
    check_tokenizer(tok)
    assert tok.vocab_size == len(seed(name)[0])
    ref = spm.SentencePieceProcessor(model_file=str(path))
    assert tok.encode("Hello world") == ref.encode("Hello world")


# -- regressions ----------------------------------------------------------------------------

@pytest.mark.parametrize("edit, words", [
    (lambda p: p.__setitem__(5, p[4]), "already defined"),
    (lambda p: p.__setitem__(5, (b"a\0b", 0.0, None)), "NUL"),
    (lambda p: p.__setitem__(5, (b"<0x41>", 0.0, 6)), "byte_fallback is off"),
    (lambda p: p.__setitem__(5, (p[5][0], float("nan"), None)), "finite"),
], ids=["duplicate", "nul", "byte-piece", "nan-score"])
def test_load_check_errors_name_the_piece_offset(tmp_path: Path, edit, words: str) -> None:
    """The checks sentencepiece makes at load time named the piece, not its byte offset."""
    pieces, trainer, normalizer, deno = seed("botchan_en_unigram_1000.model")
    pieces = list(pieces)
    edit(pieces)
    blob, _ = encode_model(pieces, trainer, normalizer, deno)
    path = tmp_path / "tokenizer.model"
    path.write_bytes(blob)
    err = run_reader(lambda: load_tokenizer(path), [path], expect_error=True,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE)
    at = sum(len(length_delimited(1, encode_piece(*p))) for p in pieces[:5])
    assert words in err.message and err.offset == at


def test_trainer_texts_that_are_not_utf8(tmp_path: Path) -> None:
    """unk_piece and unk_surface are proto2 strings: any bytes. They loaded, then encoding
    text with an unknown character leaked UnicodeEncodeError."""
    pieces, trainer, normalizer, deno = seed("botchan_en_unigram_1000.model")
    trainer += length_delimited(45, b"\x80") + length_delimited(44, b"\xfe?")
    blob, _ = encode_model(pieces, trainer, normalizer, deno)
    path = tmp_path / "tokenizer.model"
    path.write_bytes(blob)
    tok = run_reader(lambda: load_tokenizer(path), [path], check=check_tokenizer,
                     memory_multiple=TOKENIZER_MEMORY_MULTIPLE)
    ids = tok.encode("日")
    assert tok.decode_bytes(ids).endswith(b"\xfe?")
