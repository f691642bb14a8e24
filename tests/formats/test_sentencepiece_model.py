"""Reading `.model` files: every field against protobuf's own parse, and every malformed
model refused with a FormatError (where the sentencepiece library refuses it too, it is
asked as the oracle)."""
from __future__ import annotations

import math

import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

from forma_gui.errors import FormatError
from forma_gui.formats.loader import load_tokenizer
from forma_gui.formats.sentencepiece_model import (TRAINER_FIELDS, load_sentencepiece,
                                                   parse_model_proto)
from tests.conftest import data_file

MODELS = ["botchan_en_bpe_1000.model", "botchan_en_unigram_1000.model",
          "mistral_instruct_tokenizer_240323.model.v3"]


def _proto(name: str) -> pb.ModelProto:
    m = pb.ModelProto()
    m.ParseFromString(data_file("sentencepiece", name).read_bytes())
    return m


@pytest.mark.parametrize("name", MODELS)
def test_fields_equal_protobuf(name):
    raw = data_file("sentencepiece", name).read_bytes()
    ours, theirs = parse_model_proto(raw), _proto(name)
    assert ours.pieces == [p.piece for p in theirs.pieces]
    assert list(ours.scores) == [p.score for p in theirs.pieces]
    assert list(ours.types) == [p.type for p in theirs.pieces]
    for name_, _, _ in TRAINER_FIELDS.values():
        assert ours.trainer[name_] == getattr(theirs.trainer_spec, name_), name_
    for key in ("name", "precompiled_charsmap", "add_dummy_prefix",
                "remove_extra_whitespaces", "escape_whitespaces"):
        assert ours.normalizer[key] == getattr(theirs.normalizer_spec, key), key


@pytest.mark.parametrize("name", MODELS)
def test_load_tokenizer_dispatches(name):
    tok = load_tokenizer(data_file("sentencepiece", name))
    lib = spm.SentencePieceProcessor(model_file=str(data_file("sentencepiece", name)))
    assert tok.vocab_size == lib.get_piece_size()
    assert [tok.piece(i) for i in range(0, tok.vocab_size, 97)] == \
        [lib.id_to_piece(i) for i in range(0, tok.vocab_size, 97)]
    assert (tok.bos_id, tok.eos_id, tok.unk_id) == (lib.bos_id(), lib.eos_id(), lib.unk_id())
    assert tok.kind == {"botchan_en_unigram_1000.model": "SentencePiece unigram"}.get(
        name, "SentencePiece BPE")


def test_piece_types_and_scores():
    tok = load_sentencepiece(data_file("sentencepiece", MODELS[2]))
    lib = spm.SentencePieceProcessor(model_file=str(data_file("sentencepiece", MODELS[2])))
    for i in range(tok.vocab_size):
        kind = tok.token_type(i)
        assert (kind == "control") == lib.is_control(i)
        assert (kind == "unknown") == lib.is_unknown(i)
        assert (kind == "byte") == lib.is_byte(i)
        assert (kind == "user-defined") == (lib.id_to_piece(i).startswith("[REFERENCE_DOC"))
        assert tok.token_score(i) == lib.get_score(i)


def _write(tmp_path, model: pb.ModelProto | bytes, name="bad.model"):
    path = tmp_path / name
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    return path


def _library_refuses(path) -> bool:
    try:
        spm.SentencePieceProcessor(model_file=str(path))
    except Exception:
        return True
    return False


def _edited(edit) -> pb.ModelProto:
    m = _proto(MODELS[1])
    edit(m)
    return m


MALFORMED = {
    "duplicate piece": lambda m: setattr(m.pieces[10], "piece", m.pieces[11].piece),
    "empty piece": lambda m: setattr(m.pieces[10], "piece", ""),
    "no unknown piece": lambda m: setattr(m.pieces[0], "type", 1),
    "two unknown pieces": lambda m: setattr(m.pieces[5], "type", 2),
    "byte piece without byte_fallback": lambda m: m.pieces.add(piece="<0x41>", type=6),
    "byte piece misspelt": lambda m: (setattr(m.trainer_spec, "byte_fallback", True),
                                      m.pieces.add(piece="<0x4G>", type=6)),
    "byte fallback without 256 byte pieces": lambda m: setattr(m.trainer_spec,
                                                               "byte_fallback", True),
    "NUL inside a piece": lambda m: setattr(m.pieces[10], "piece", "a\0b"),
    "infinite unigram score": lambda m: setattr(m.pieces[10], "score", math.inf),
    "broken charsmap": lambda m: setattr(m.normalizer_spec, "precompiled_charsmap", b"\x10\x00"),
    "charsmap trie past the blob": lambda m: setattr(
        m.normalizer_spec, "precompiled_charsmap",
        m.normalizer_spec.precompiled_charsmap[:5000]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_models_refused(tmp_path, case):
    path = _write(tmp_path, _edited(MALFORMED[case]))
    assert _library_refuses(path), case  # the oracle agrees these are broken
    with pytest.raises(FormatError):
        load_sentencepiece(path)


def test_corrupt_charsmap_units_refused(tmp_path):
    m = _proto(MODELS[1])
    blob = bytearray(m.normalizer_spec.precompiled_charsmap)
    blob[4:8] = b"\xff\xff\xff\xff"  # the root unit's offset points far outside the array
    m.normalizer_spec.precompiled_charsmap = bytes(blob)
    path = _write(tmp_path, m)
    assert _library_refuses(path)
    with pytest.raises(FormatError, match="double array") as info:
        load_sentencepiece(path)
    assert info.value.offset == path.read_bytes().find(bytes(blob)) + 4  # the trie's first byte


@pytest.mark.parametrize("cut", [1, 2, 3, 50, 1000, 200000, -1])
def test_truncated_files_refused(tmp_path, cut):
    raw = data_file("sentencepiece", MODELS[0]).read_bytes()
    path = _write(tmp_path, raw[:cut])
    with pytest.raises(FormatError) as info:
        load_sentencepiece(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("data, words", [
    (b"\x0a\x05\x0d\x00\x00\x00\x00", "wire type"),  # a piece's text sent as fixed32
    (b"\x0a\x02\x0d\x00", "expected 4 bytes"),       # a fixed32 cut short
    (b"\x0a\x04\x18\x09\x0a\x00", "empty"),          # piece type 9 (ignored), empty text
    (b"\x12\x03\x1a\x01\x00", "wire type"),          # trainer_spec.model_type as LEN
    (b"\x0a\x03\x0a\x01a\x1a\x02\x08\x01", "wire type"),  # normalizer name as varint
    (b"\x22\x01", "claims"),                         # field 4 (self-test data) cut short
    (b"", "empty"),
])
def test_wrong_wire_types_refused(tmp_path, data, words):
    path = _write(tmp_path, data)
    with pytest.raises(FormatError, match=words):
        load_sentencepiece(path)


def test_unknown_enum_values_keep_the_default(tmp_path):
    """proto2 closed enums: model_type 7 and piece type 9 are unknown fields, so the model
    stays UNIGRAM and the piece NORMAL, for the library and for us."""
    raw = _proto(MODELS[1]).SerializeToString()
    # a second trainer_spec (protobuf merges it into the first) and one more piece
    extra = b"\x12\x02\x18\x07" + b"\x0a\x06\x0a\x02zz\x18\x09"
    path = _write(tmp_path, raw + extra)
    lib = spm.SentencePieceProcessor(model_file=str(path))
    tok = load_sentencepiece(path)
    assert tok.kind == "SentencePiece unigram"
    assert tok.token_type(tok.vocab_size - 1) == "normal" and lib.is_control(tok.vocab_size - 1) is False
    assert tok.encode("zz top") == lib.encode("zz top")


def test_unreadable_path(tmp_path):
    with pytest.raises(FormatError):
        load_sentencepiece(tmp_path / "missing.model")


def test_usual_layout_takes_the_vectorized_path(monkeypatch):
    """Pieces laid out the usual way never reach the one-by-one parser (it is ~20x slower);
    only the few without a score field (botchan's <unk>, <s>, </s>) do."""
    import forma_gui.formats.sentencepiece_model as module

    slow: list[int] = []
    original = module._parse_piece

    def spy(raw, index, offset, path):
        slow.append(index)
        return original(raw, index, offset, path)

    monkeypatch.setattr(module, "_parse_piece", spy)
    for name in MODELS:
        slow.clear()
        tok = load_sentencepiece(data_file("sentencepiece", name))
        assert len(slow) <= 3 and tok.vocab_size > 999
