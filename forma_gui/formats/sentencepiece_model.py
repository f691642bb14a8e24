"""SentencePiece `.model` files: the `ModelProto` message, read with our own wire reader.

Field numbers from sentencepiece_model.proto (sentencepiece 0.2)::

    ModelProto       1 pieces (repeated SentencePiece)  2 trainer_spec  3 normalizer_spec
                     4 self_test_data (ignored)         5 denormalizer_spec
    SentencePiece    1 piece (string)  2 score (float)  3 type (enum, default NORMAL = 1)
    TrainerSpec      see TRAINER_FIELDS
    NormalizerSpec   see NORMALIZER_FIELDS

The checks sentencepiece makes when it loads a model (model_interface.cc
``InitializePieces``) are made here too, so a file the library refuses is refused here with
a FormatError naming the offset: empty or duplicate pieces, no (or two) UNKNOWN pieces,
BYTE pieces without ``byte_fallback`` or not spelled ``<0xNN>``. Like protobuf, an enum value
outside the enum leaves the field at its default; unlike protobuf, a known field with the
wrong wire type is an error rather than an unknown field.
"""
from __future__ import annotations

import mmap
import os
import struct
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forma_gui.core.charsmap import CharsMap
from forma_gui.core.sentencepiece import (BYTE, CONTROL, DEFAULT_UNK_SURFACE,
                                          MODEL_PIECE_TYPES, PIECE_TYPES, UNKNOWN, UNUSED,
                                          Normalizer, SentencePieceTokenizer, indices_of,
                                          piece_to_byte)
from forma_gui.core.tokenizer import AddedToken, Tokenizer
from forma_gui.errors import FormatError
from forma_gui.formats.protobuf_wire import (I32, LEN, SGROUP, VARINT, Field, as_float,
                                             as_int32, as_text, iter_fields, read_value,
                                             read_varint, value_start)

#: TrainerSpec.ModelType -> algorithm name
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}

#: field number -> (name, kind, default); kinds: int32, enum, bool, float, text
TRAINER_FIELDS: dict[int, tuple[str, str, Any]] = {
    3: ("model_type", "enum", 1),
    4: ("vocab_size", "int32", 8000),
    24: ("treat_whitespace_as_suffix", "bool", False),
    26: ("allow_whitespace_only_pieces", "bool", False),
    25: ("split_digits", "bool", False),
    35: ("byte_fallback", "bool", False),
    40: ("unk_id", "int32", 0),
    41: ("bos_id", "int32", 1),
    42: ("eos_id", "int32", 2),
    43: ("pad_id", "int32", -1),
    45: ("unk_piece", "text", "<unk>"),
    46: ("bos_piece", "text", "<s>"),
    47: ("eos_piece", "text", "</s>"),
    48: ("pad_piece", "text", "<pad>"),
    44: ("unk_surface", "text", DEFAULT_UNK_SURFACE),
}
NORMALIZER_FIELDS: dict[int, tuple[str, str, Any]] = {
    1: ("name", "text", ""),
    2: ("precompiled_charsmap", "bytes", b""),
    3: ("add_dummy_prefix", "bool", True),
    4: ("remove_extra_whitespaces", "bool", True),
    5: ("escape_whitespaces", "bool", True),
    6: ("normalization_rule_tsv", "text", ""),
}
#: the wire type each kind must arrive with
KIND_WIRE = {"int32": VARINT, "enum": VARINT, "bool": VARINT, "float": I32, "text": LEN,
             "bytes": LEN}
WIRE_NAMES = {0: "VARINT", 1: "I64", 2: "LEN", 5: "I32"}
_F32 = struct.Struct("<f")


@dataclass
class ModelProto:
    """The parts of a SentencePiece ModelProto the tokenizer needs."""

    pieces: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    types: bytearray = field(default_factory=bytearray)
    trainer: dict[str, Any] = field(default_factory=dict)
    normalizer: dict[str, Any] = field(default_factory=dict)
    denormalizer: dict[str, Any] | None = None
    offsets: array = field(default_factory=lambda: array("q"))  # file offset of each piece


def piece_offset(model: ModelProto, index: int) -> int | None:
    """The byte offset of piece `index` in the file, if the model was parsed from one."""
    return model.offsets[index] if 0 <= index < len(model.offsets) else None


def parse_model_proto(buf: bytes | memoryview, *, path: str | None = None) -> ModelProto:
    """Decode a serialized ModelProto (the whole `.model` file)."""
    model = ModelProto(trainer=_defaults(TRAINER_FIELDS), normalizer=_defaults(NORMALIZER_FIELDS))
    data = bytes(buf)
    bodies = array("q")  # per piece: tag offset, body start, body end
    pos, end = 0, len(data)
    while pos < end:
        pos = _walk_pieces(data, pos, end, bodies, path)
        if pos >= end:
            break
        f, pos = _next_field(data, pos, end, path)
        if f is None:
            continue
        if f.number in (1, 2, 3, 5):
            _expect_wire(f, LEN, ("ModelProto", f.number), path)
        if f.number == 1:
            bodies.extend((f.offset, -1, -1))  # a piece whose tag was not the plain 0x0A
            model.pieces.append(f.value)  # decoded below
        elif f.number == 2:
            _merge(model.trainer, f, TRAINER_FIELDS, "TrainerSpec", path)
        elif f.number == 3:
            _merge(model.normalizer, f, NORMALIZER_FIELDS, "NormalizerSpec", path)
        elif f.number == 5:
            if model.denormalizer is None:
                model.denormalizer = _defaults(NORMALIZER_FIELDS)
            _merge(model.denormalizer, f, NORMALIZER_FIELDS, "denormalizer NormalizerSpec", path)
    _decode_pieces(model, data, bodies, path)
    model.offsets = bodies[0::3]
    return model


def _walk_pieces(data: bytes, pos: int, end: int, bodies: array,
                 path: str | None) -> int:
    """Step over consecutive field-1 records (the pieces), noting where each body lies."""
    while pos < end and data[pos] == 0x0A:
        if pos + 1 < end and data[pos + 1] < 0x80:  # a one-byte length, inlined
            length, body = data[pos + 1], pos + 2
        else:
            length, body = read_varint(data, pos + 1, end, path=path)
        stop = body + length
        if stop > end:
            raise FormatError(f"piece {len(bodies) // 3} claims {length} bytes, but only "
                              f"{end - body} are left in the file", path=path, offset=pos)
        bodies.extend((pos, body, stop))
        pos = stop
    return pos


def _next_field(data: bytes, pos: int, end: int, path: str | None) -> tuple[Field | None, int]:
    """The field at `pos` (None for a skipped group) and the position after it."""
    tag_at = pos
    tag, pos = read_varint(data, pos, end, path=path)
    if tag >> 3 == 0:
        raise FormatError("expected a field number >= 1, found 0", path=path, offset=tag_at)
    value, pos = read_value(data, pos, end, tag & 7, tag >> 3, path, 0, tag_at)
    field = None if tag & 7 == SGROUP else Field(tag >> 3, tag & 7, value, tag_at,
                                                 value_start(value, pos, tag_at))
    return field, pos


def _decode_pieces(model: ModelProto, data: bytes, bodies: array,
                   path: str | None) -> None:
    """Decode every piece: the usual layout (1: piece shorter than 128 bytes, 2: score,
    optional 3: type) vectorized with numpy, anything else with the generic parser."""
    import numpy as np

    odd = list(model.pieces)  # bodies of pieces found by the generic path, in order
    table = np.frombuffer(bodies, dtype=np.int64).reshape(-1, 3)
    body, stop = table[:, 1], table[:, 2]
    arr = np.frombuffer(data + bytes(8), dtype=np.uint8)  # padded: clipped reads stay inside
    end = len(data)
    safe = np.where(body >= 0, body, 0)
    plen = arr[safe + 1].astype(np.int64)
    score_at = safe + 2 + plen
    at = np.minimum(score_at, end)
    fast = ((body >= 0) & (arr[safe] == 0x0A) & (plen < 0x80) & (plen > 0)
            & (score_at + 5 <= stop) & (arr[at] == 0x15))
    tag = np.minimum(at + 5, end)  # the optional type field: tag 0x18, then a one-byte value
    kind = np.where(score_at + 5 == stop, 1, arr[tag + 1])
    fast &= (score_at + 5 == stop) | ((score_at + 7 == stop) & (arr[tag] == 0x18)
                                       & (kind >= 1) & (kind <= 6))
    scores = arr[at[:, None] + np.arange(1, 5)].copy().view("<f4").ravel()
    model.pieces = [data[b:e].decode("utf-8", "surrogateescape") if ok else ""
                    for b, e, ok in zip((safe + 2).tolist(), at.tolist(), fast.tolist())]
    model.scores = scores.astype(np.float32)
    model.types = bytearray(kind.astype(np.uint8).tobytes())
    for i in np.flatnonzero(~fast).tolist():
        at, b, e = bodies[3 * i:3 * i + 3]
        raw = data[b:e] if b >= 0 else odd.pop(0)
        model.pieces[i], model.scores[i], model.types[i] = _parse_piece(raw, i, at, path)


def _defaults(table: dict[int, tuple[str, str, Any]]) -> dict[str, Any]:
    return {name: default for name, _, default in table.values()}


def _expect_wire(f: Field, wire: int, where: tuple[str, int], path: str | None) -> None:
    if f.wire_type != wire:
        raise FormatError(f"{where[0]} field {where[1]}: expected wire type "
                          f"{WIRE_NAMES.get(wire, wire)}, found {WIRE_NAMES.get(f.wire_type, f.wire_type)}",
                          path=path, offset=f.offset)


def _parse_piece(raw: bytes, index: int, offset: int, path: str | None) -> tuple[str, float, int]:
    """One ModelProto.SentencePiece: (piece, score, type)."""
    piece, score, kind = "", 0.0, 1
    for g in iter_fields(raw, path=path, base=offset):
        if g.number == 1:
            _expect_wire(g, LEN, ("SentencePiece", 1), path)
            piece = as_text(g.value)
        elif g.number == 2:
            _expect_wire(g, I32, ("SentencePiece", 2), path)
            score = as_float(g.value)
        elif g.number == 3:
            _expect_wire(g, VARINT, ("SentencePiece", 3), path)
            value = as_int32(g.value)
            if value in PIECE_TYPES:  # proto2 closed enum: an unknown value leaves the default
                kind = value
    if not piece:
        raise FormatError(f"piece {index} is empty (sentencepiece refuses empty pieces)",
                          path=path, offset=offset)
    return piece, score, kind


def _merge(target: dict[str, Any], f: Field, table: dict[int, tuple[str, str, Any]],
           what: str, path: str | None) -> None:
    """Parse a sub-message into `target` (protobuf merges repeated sub-messages)."""
    for g in iter_fields(f.value, path=path, base=f.value_at):
        spec = table.get(g.number)
        if spec is None:
            continue
        name, kind, _ = spec
        _expect_wire(g, KIND_WIRE[kind], (what, g.number), path)
        if kind == "enum" and as_int32(g.value) not in MODEL_TYPES:
            continue  # proto2 closed enum: an unknown value leaves the field unset
        target[name] = _convert(g.value, kind)
        if kind == "bytes":
            target[name + "_at"] = g.value_at  # (for the charsmap's error messages)


def _convert(raw: int | bytes, kind: str) -> Any:
    if kind in ("int32", "enum"):
        return as_int32(raw)
    if kind == "bool":
        return bool(raw)
    if kind == "float":
        return as_float(raw)
    if kind == "text":
        return as_text(raw)
    return bytes(raw)


# ---- validation and construction ------------------------------------------------------------

MAX_PIECE_BYTES = 8000  # model_interface.cc kMaxPieceSize


def check_pieces(model: ModelProto, algorithm: str, *, path: str | None = None) -> None:
    """The checks sentencepiece makes when it loads a model (ModelInterface::InitializePieces
    and the unigram model's constructor), as FormatErrors."""
    byte_fallback = model.trainer["byte_fallback"]
    _check_duplicates(model, algorithm, path)
    for i, piece in enumerate(model.pieces):
        if "\0" in piece and not (piece == "\0" and (byte_fallback or model.types[i] == UNUSED)):
            raise FormatError(f"piece {i} {piece!r:.60} contains a NUL character", path=path,
                              offset=piece_offset(model, i))
        if len(piece) * 4 >= MAX_PIECE_BYTES and len(piece.encode("utf-8", "surrogateescape")) >= MAX_PIECE_BYTES:
            raise FormatError(f"piece {i} is {MAX_PIECE_BYTES} bytes or longer", path=path,
                              offset=piece_offset(model, i))
    unknown = indices_of(model.types, UNKNOWN)
    if not unknown and not byte_fallback:
        raise FormatError("the model has no UNKNOWN piece (sentencepiece requires one unless "
                          "byte_fallback is on)", path=path)
    if len(unknown) > 1:
        raise FormatError(f"piece {unknown[1]}: a second UNKNOWN piece (the first is "
                          f"{unknown[0]})", path=path, offset=piece_offset(model, unknown[1]))
    _check_byte_pieces(model, path)
    if algorithm == "unigram":
        _check_unigram(model, path)


def _check_duplicates(model: ModelProto, algorithm: str, path: str | None) -> None:
    """BPE keeps all pieces in one map; the other models keep reserved ones apart."""
    if len(set(model.pieces)) == len(model.pieces):
        return
    seen: dict[tuple[str, bool], int] = {}
    for i, (piece, kind) in enumerate(zip(model.pieces, model.types)):
        if piece == "\0" and kind == UNUSED:
            continue
        key = (piece, algorithm == "bpe" or kind in MODEL_PIECE_TYPES)
        if key in seen:
            raise FormatError(f"piece {i} {piece!r:.60} is already defined (as piece "
                              f"{seen[key]})", path=path, offset=piece_offset(model, i))
        seen[key] = i


def _check_byte_pieces(model: ModelProto, path: str | None) -> None:
    found = set()
    for i in indices_of(model.types, BYTE):
        piece = model.pieces[i]
        if not model.trainer["byte_fallback"]:
            raise FormatError(f"piece {i} {piece!r:.60} is a BYTE piece, but byte_fallback is "
                              "off", path=path, offset=piece_offset(model, i))
        byte = piece_to_byte(piece)
        if byte is None:
            raise FormatError(f"piece {i} {piece!r:.60}: a BYTE piece must be spelled <0xNN>",
                              path=path, offset=piece_offset(model, i))
        found.add(byte)
    if model.trainer["byte_fallback"] and len(found) != 256:
        missing = min(set(range(256)) - found)
        raise FormatError(f"byte_fallback is on, but there are not 256 byte pieces (<0x{missing:02X}> "
                          "is missing)", path=path)


def _check_unigram(model: ModelProto, path: str | None) -> None:
    import math

    for i, score in enumerate(model.scores):
        if not math.isfinite(score):
            raise FormatError(f"piece {i} has score {score} (a unigram model needs finite "
                              "scores)", path=path, offset=piece_offset(model, i))
    if not any(t in MODEL_PIECE_TYPES for t in model.types):
        raise FormatError("a unigram model needs at least one NORMAL, USER_DEFINED or UNUSED "
                          "piece", path=path)


def make_normalizer(spec: dict[str, Any], *, treat_whitespace_as_suffix: bool = False,
                    path: str | None = None) -> Normalizer:
    """A Normalizer from a NormalizerSpec dict."""
    charsmap = CharsMap(spec["precompiled_charsmap"], path=path,
                        offset=spec.get("precompiled_charsmap_at"))
    return Normalizer(charsmap, name=spec["name"], add_dummy_prefix=spec["add_dummy_prefix"],
                      remove_extra_whitespaces=spec["remove_extra_whitespaces"],
                      escape_whitespaces=spec["escape_whitespaces"],
                      treat_whitespace_as_suffix=treat_whitespace_as_suffix)


def tokenizer_from_proto(model: ModelProto, *, path: str | None = None,
                         name: str = "") -> SentencePieceTokenizer:
    """Validate a parsed ModelProto and build its tokenizer."""
    trainer = model.trainer
    algorithm = MODEL_TYPES.get(trainer["model_type"])
    if algorithm is None:
        raise FormatError(f"unknown SentencePiece model type {trainer['model_type']} (expected "
                          "1 UNIGRAM, 2 BPE, 3 WORD or 4 CHAR)", path=path)
    check_pieces(model, algorithm, path=path)
    normalizer = make_normalizer(model.normalizer, path=path,
                                 treat_whitespace_as_suffix=trainer["treat_whitespace_as_suffix"])
    denormalizer = None
    if model.denormalizer is not None and model.denormalizer["precompiled_charsmap"]:
        denormalizer = make_normalizer(model.denormalizer, path=path)
    reserved = sorted(indices_of(model.types, CONTROL) + indices_of(model.types, UNKNOWN))
    added = [AddedToken(model.pieces[i], i, special=True) for i in reserved]
    tok = SentencePieceTokenizer(
        model.pieces, array("f", model.scores.tobytes()) if hasattr(model.scores, "tobytes")
        else model.scores, model.types, algorithm=algorithm, normalizer=normalizer,
        byte_fallback=trainer["byte_fallback"], unk_piece=trainer["unk_piece"] or "<unk>",
        unk_surface=trainer["unk_surface"], denormalizer=denormalizer, name=name, path=path,
        added_tokens=added)
    # sentencepiece's bos_id()/eos_id()/pad_id(): the piece's id if it is a CONTROL piece
    controls = {t.content: t.id for t in added if model.types[t.id] == CONTROL}
    tok.bos_id = controls.get(trainer["bos_piece"] or "<s>")
    tok.eos_id = controls.get(trainer["eos_piece"] or "</s>")
    tok.pad_id = controls.get(trainer["pad_piece"] or "<pad>")
    return tok


def load_sentencepiece(path: str | os.PathLike, *, pattern: str | None = None) -> Tokenizer:
    """Load a SentencePiece `.model` file (`pattern` does not apply: SentencePiece has no
    pre-tokenizer regex, and is ignored)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise FormatError("the file is empty, expected a SentencePiece ModelProto",
                                  path=path, offset=0)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
                model = parse_model_proto(view, path=path)
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror or e}", path=path) from e
    if not model.pieces:
        raise FormatError("the model has no pieces (expected ModelProto field 1)", path=path)
    return tokenizer_from_proto(model, path=path, name=Path(path).name)
