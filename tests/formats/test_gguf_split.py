"""Split GGUF models (gguf-split / GGUFWriter(split_max_tensors=...)) open as one model.

Files are written by gguf-py's GGUFWriter; every tensor is checked against gguf-py's
GGUFReader on the shard that holds it and against the data written. Broken splits are
shards written one by one with hand-set split.* keys.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import forma_gui
from forma_gui import open_weights
from forma_gui.errors import FormatError
from forma_gui.formats.gguf_split import (is_one_split_model, parse_shard_name, split_path,
                                          split_prefix)

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
T = gguf.GGUFValueType


def _stored() -> dict[str, tuple[np.ndarray, Q | None]]:
    """name -> (the array given to the writer, its raw GGML type or None for element types)."""
    rng = np.random.default_rng(21)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    bf16 = f32(3, 8).view(np.uint32) >> 16
    return {
        "token_embd.weight": (gguf.quants.quantize(f32(4, 64), Q.Q8_0), Q.Q8_0),
        "blk.0.attn_norm.weight": (f32(16), None),
        "blk.0.attn_q.weight": (f32(8, 16).astype(np.float16), None),
        "blk.0.ffn_up.weight": (gguf.quants.quantize(f32(2, 64), Q.Q4_0), Q.Q4_0),
        "blk.0.ffn_down.weight": (bf16.astype(np.uint16).view(np.uint8).reshape(3, 16), Q.BF16),
        "output.weight": (f32(3, 5), None),
    }


STORED = _stored()


def _expected_f32(name: str) -> np.ndarray:
    data, qtype = STORED[name]
    return data.astype(np.float32) if qtype is None else gguf.quants.dequantize(data, qtype)


def _finish(writer) -> None:
    """Write everything a GGUFWriter holds (each shard, when it splits) and close it."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_model(path: Path, kv: dict | None = None, **split) -> list[Path]:
    """The STORED model written by GGUFWriter(path, **split); the files it made, in order."""
    writer = gguf.GGUFWriter(path, "llama", **split)
    writer.add_name("split test")
    for key, (value, vtype, sub) in (kv or {}).items():
        writer.add_key_value(key, value, vtype, sub_type=sub)
    for name, (data, qtype) in STORED.items():
        writer.add_tensor(name, data, raw_dtype=qtype)
    _finish(writer)
    return [Path(p) for p in writer.format_shard_names(Path(path))]


def held(folder: Path) -> list[str]:
    """Files under `folder` this process still has open or mapped (Linux; [] elsewhere)."""
    out: list[str] = []
    if not os.path.isdir("/proc/self/fd"):
        return out
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    with open("/proc/self/maps") as maps:
        out += [line.split(maxsplit=5)[-1].strip() for line in maps]
    return [p for p in out if p.startswith(str(folder))]


# -- names (llama.cpp's llama_split_path / llama_split_prefix) ------------------------------

def test_names_follow_llama_cpp() -> None:
    # the examples in llama.h's comments on llama_split_path and llama_split_prefix
    assert split_path("/models/ggml-model-q4_0", 1, 4) == "/models/ggml-model-q4_0-00002-of-00004.gguf"
    assert split_prefix("/models/ggml-model-q4_0-00002-of-00004.gguf", 1, 4) == "/models/ggml-model-q4_0"
    assert split_prefix("/models/ggml-model-q4_0-00002-of-00004.gguf", 0, 4) is None
    assert split_prefix("-00001-of-00002.gguf", 0, 2) is None  # the prefix may not be empty
    assert parse_shard_name("m-00003-of-00003.gguf") == ("m", 2, 3)
    assert parse_shard_name("m-00000-of-00003.gguf") is None
    assert not is_one_split_model(["m-00001-of-00002.gguf", "m-00001-of-00003.gguf"])
    assert not is_one_split_model(["m-00001-of-00002.gguf", "other.gguf"])


def test_names_equal_gguf_py_writer(tmp_path: Path) -> None:
    paths = write_model(tmp_path / "m.gguf", split_max_tensors=2)
    assert [p.name for p in paths] == [Path(split_path("m", i, 3)).name for i in range(3)]
    assert sorted(tmp_path.iterdir()) == paths


# -- a split model opens as one --------------------------------------------------------------

SPLITS = {
    "max tensors": dict(split_max_tensors=2),
    "metadata-only first shard": dict(split_max_tensors=3, small_first_shard=True),
    "max size": dict(split_max_size=400),
    "one tensor each": dict(split_max_tensors=1),
}


@pytest.mark.parametrize("split", SPLITS.values(), ids=SPLITS.keys())
def test_any_shard_opens_the_whole_model(tmp_path: Path, split: dict) -> None:
    paths = write_model(tmp_path / "m.gguf", **split)
    assert len(paths) > 1
    readers = [gguf.GGUFReader(p) for p in paths]
    in_order = [(t.name, str(p)) for p, r in zip(paths, readers) for t in r.tensors]
    assert sorted(name for name, _ in in_order) == sorted(STORED)
    for opened in paths:
        with open_weights(opened) as w:
            assert w.path == str(opened) and w.format == "gguf"
            assert [(t.name, t.file) for t in w.tensors] == in_order
            assert w.files == [str(p) for p in paths]
            assert w.format_info["file_size"] == sum(os.path.getsize(p) for p in paths)
            assert w.format_info["split_count"] == len(paths)
            _check_metadata(w, readers[0])
            _check_tensors(w, paths, readers)


def _check_metadata(w, first) -> None:
    """The first shard's metadata, split.* included, with gguf-py's values and types."""
    fields = {k: f for k, f in first.fields.items() if not k.startswith("GGUF.")}
    assert list(w.metadata) == list(fields)
    for key, field in fields.items():
        assert w.metadata[key] == field.contents(), key
        assert w.metadata_types[key] == field.types[0].name, key
    assert (w.metadata["split.no"], w.metadata["split.tensors.count"]) == (0, len(STORED))


def _check_tensors(w, paths: list[Path], readers: list) -> None:
    for path, reader in zip(paths, readers):
        for r in reader.tensors:
            t = w.tensor(r.name)
            assert t.file == str(path)
            data, qtype = STORED[r.name]
            raw = w.raw(r.name)  # BF16 as uint16 bits, where gguf-py gives the bytes
            np.testing.assert_array_equal(raw.view(np.uint8) if qtype == Q.BF16 else raw, r.data)
            np.testing.assert_array_equal(raw, data.view(np.uint16) if qtype == Q.BF16 else data)
            ours = w.dequantize(r.name)
            for expected in (gguf.quants.dequantize(r.data, r.tensor_type), _expected_f32(r.name)):
                assert ours.shape == expected.shape
                np.testing.assert_array_equal(ours.view(np.uint32),
                                              expected.astype(np.float32).view(np.uint32))
            layout = w.layout(r.name)
            assert layout.offset == t.offset == r.data_offset
            with open(path, "rb") as f:  # the layout's bytes are the shard's bytes
                f.seek(layout.offset)
                assert f.read(t.nbytes) == data.tobytes()


def test_big_endian_shards(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(tmp_path / "b.gguf", "llama", split_max_tensors=1,
                             endianess=gguf.GGUFEndian.BIG)
    arrays = {name: STORED[name][0] for name in ("blk.0.attn_q.weight", "output.weight")}
    for name, data in arrays.items():
        writer.add_tensor(name, data)
    _finish(writer)
    with open_weights(tmp_path / "b-00002-of-00002.gguf") as w:
        assert w.format_info["byte_order"] == "big" and len(w.files) == 2
        for name, data in arrays.items():
            assert w.raw(name).dtype.byteorder == ">"
            np.testing.assert_array_equal(w.dequantize(name), data.astype(np.float32))


def test_one_file_models_are_unchanged(tmp_path: Path) -> None:
    """No split keys, or split.count 1, is an ordinary file: its data offset, no split count."""
    plain = write_model(tmp_path / "plain.gguf")
    one = tmp_path / "one.gguf"
    _write_shard(one, {"w": np.zeros(4, np.float32)}, {"split.no": (0, T.UINT16),
                                                       "split.count": (1, T.UINT16)})
    for path in (*plain, one):
        with open_weights(path) as w:
            assert w.files == [str(path)] and "split_count" not in w.format_info
            assert w.format_info["data_offset"] == gguf.GGUFReader(path).data_offset


# -- folders -------------------------------------------------------------------------------

def test_a_folder_of_one_split_model(tmp_path: Path) -> None:
    paths = write_model(tmp_path / "m.gguf", split_max_tensors=2)
    with open_weights(tmp_path) as w:
        assert w.files == [str(p) for p in paths] and len(w.tensors) == len(STORED)
        np.testing.assert_array_equal(w.dequantize("output.weight"), STORED["output.weight"][0])


def _folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


def test_folders_with_more_than_one_model_are_refused(tmp_path: Path) -> None:
    two = _folder(tmp_path, "two")
    write_model(two / "a.gguf", split_max_tensors=3)
    write_model(two / "b.gguf", split_max_tensors=3)
    extra = _folder(tmp_path, "extra")
    write_model(extra / "a.gguf", split_max_tensors=3)
    write_model(extra / "vocab.gguf")
    # shard names on files without split keys: not one model either
    renamed = _folder(tmp_path, "renamed")
    for no in range(2):
        write_model(renamed / f"m-0000{no + 1}-of-00002.gguf")
    for folder, n in ((two, 4), (extra, 3), (renamed, 2)):
        with pytest.raises(FormatError, match=f"{n} GGUF files in this folder; open one") as e:
            open_weights(folder)
        assert e.value.path == str(folder)
        assert held(tmp_path) == []


def test_a_folder_missing_a_shard_names_it(tmp_path: Path) -> None:
    paths = write_model(tmp_path / "m.gguf", split_max_tensors=2)
    paths[1].unlink()
    with pytest.raises(FormatError, match="shard 2 of 3 .* is missing") as e:
        open_weights(tmp_path)
    assert e.value.path == str(paths[1])
    assert held(tmp_path) == []


# -- broken splits -------------------------------------------------------------------------

def _write_shard(path: Path, tensors: dict[str, np.ndarray], kv: dict) -> None:
    writer = gguf.GGUFWriter(path, "llama")
    for key, (value, vtype) in kv.items():
        writer.add_key_value(key, value, vtype)
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    _finish(writer)


SHARD_TENSORS = (("a", "b"), ("c", "d"), ("e",))


def hand_split(folder: Path, changes: dict[int, dict] | None = None,
               tensors: tuple[tuple[str, ...], ...] = SHARD_TENSORS) -> list[Path]:
    """Three shards of m.gguf with the split keys gguf-py writes; `changes` maps a shard
    index to keys to replace ((value, type)) or drop (None)."""
    paths = [folder / Path(split_path("m", no, 3)).name for no in range(3)]
    for no, (path, names) in enumerate(zip(paths, tensors)):
        kv = {"split.no": (no, T.UINT16), "split.count": (3, T.UINT16),
              "split.tensors.count": (sum(map(len, tensors)), T.INT32)}
        for key, value in (changes or {}).get(no, {}).items():
            kv.pop(key) if value is None else kv.__setitem__(key, value)
        _write_shard(path, {n: np.full(4, ord(n), np.float32) for n in names}, kv)
    return paths


def test_hand_split_is_valid(tmp_path: Path) -> None:
    paths = hand_split(tmp_path)
    with open_weights(paths[2]) as w:
        assert [t.name for t in w.tensors] == ["a", "b", "c", "d", "e"]
        np.testing.assert_array_equal(w.dequantize("e"), np.full(4, ord("e"), np.float32))


def _refused(tmp_path: Path, opened: Path, match: str) -> FormatError:
    with pytest.raises(FormatError, match=match) as e:
        open_weights(opened)
    assert held(tmp_path) == []  # every shard opened before the error was closed
    return e.value


def _key_offset(path: Path, key: str) -> int:
    return int(gguf.GGUFReader(path).fields[key].offset)


def test_missing_shard(tmp_path: Path) -> None:
    paths = hand_split(tmp_path)
    paths[1].unlink()
    for opened in (paths[0], paths[2]):
        e = _refused(tmp_path, opened, r"shard 2 of 3 of this split model is missing")
        assert e.path == str(paths[1]) and "m-00002-of-00003.gguf" in str(e)


#: case -> (shard changed, its changes, shard opened, shard named, key at the offset, message)
BROKEN = {
    "split.no disagrees with the name": (
        1, {"split.no": (2, T.UINT16)}, 0, 1, "split.no",
        r"its name makes it shard 2 of 3 \(split.no 1, split.count 3\), but it holds split.no 2"),
    "split.count disagrees with the first": (
        2, {"split.count": (4, T.UINT16)}, 0, 2, "split.count",
        r"shard 3 of 3 .* but it holds split.no 2, split.count 4"),
    "later shard without split keys": (
        1, {"split.no": None, "split.count": None}, 2, 1, None,
        r"but it holds split.no \(none\), split.count \(none\)"),
    "the opened shard's name disagrees": (
        1, {"split.no": (0, T.UINT16)}, 1, 1, "split.no",
        r"should end in -00001-of-00003.gguf"),
    "split.no past split.count": (
        2, {"split.no": (3, T.UINT16)}, 2, 2, "split.no", r"split.no 3 is not below split.count 3"),
    "split.count of the wrong type": (
        0, {"split.count": (3, T.UINT32)}, 0, 0, "split.count",
        r"expected split.count of type UINT16, found UINT32"),
    "split.no missing": (0, {"split.no": None}, 0, 0, None, r"expected split.no \(UINT16\)"),
    "split.tensors.count of the wrong type": (
        0, {"split.tensors.count": (5, T.UINT32)}, 1, 0, "split.tensors.count",
        r"expected split.tensors.count of type INT32, found UINT32"),
    "split.tensors.count missing in the first": (
        0, {"split.tensors.count": None}, 2, 0, None, r"expected split.tensors.count"),
    "split.tensors.count disagrees with the first": (
        2, {"split.tensors.count": (6, T.INT32)}, 0, 2, "split.tensors.count",
        r"split.tensors.count is 6 here but 5 in the first shard"),
}


@pytest.mark.parametrize("case", BROKEN.values(), ids=BROKEN.keys())
def test_broken_split_keys(tmp_path: Path, case) -> None:
    changed, changes, opened, named, key, match = case
    paths = hand_split(tmp_path, {changed: changes})
    e = _refused(tmp_path, paths[opened], match)
    assert e.path == str(paths[named])
    assert e.offset == (None if key is None else _key_offset(paths[named], key))


def test_total_tensor_count(tmp_path: Path) -> None:
    six = {no: {"split.tensors.count": (6, T.INT32)} for no in range(3)}
    paths = hand_split(tmp_path, six)
    e = _refused(tmp_path, paths[1], r"split.tensors.count says 6 tensors, but the 3 shards hold 5")
    assert (e.path, e.offset) == (str(paths[0]), _key_offset(paths[0], "split.tensors.count"))


def test_a_tensor_in_two_shards(tmp_path: Path) -> None:
    paths = hand_split(tmp_path, tensors=(("a", "b"), ("b", "d"), ("e",)))
    e = _refused(tmp_path, paths[0], "tensor 'b' is in both")
    assert str(paths[0]) in str(e) and e.path == str(paths[1])


def test_a_corrupt_shard_is_named(tmp_path: Path) -> None:
    paths = hand_split(tmp_path)
    paths[2].write_bytes(paths[2].read_bytes()[:40])
    e = _refused(tmp_path, paths[0], "cannot fit")
    assert e.path == str(paths[2])


# -- the tokenizer lives in the first shard -------------------------------------------------

K = "tokenizer.ggml."


def _vocab_kv() -> dict:
    """A tiny valid gpt2 vocabulary: the 256 byte symbols, "ab" and a control token."""
    from forma_gui.core.byte_map import BYTE_TO_UNICODE

    tokens = list(BYTE_TO_UNICODE.values()) + ["ab", "<|end|>"]
    return {K + "model": ("gpt2", T.STRING, None), K + "pre": ("gpt-2", T.STRING, None),
            K + "tokens": (tokens, T.ARRAY, T.STRING),
            K + "token_type": ([1] * (len(tokens) - 1) + [3], T.ARRAY, T.INT32),
            K + "merges": (["a b"], T.ARRAY, T.STRING)}


def test_every_shard_loads_the_first_shards_tokenizer(tmp_path: Path) -> None:
    from forma_gui.core.byte_map import BYTE_TO_UNICODE

    paths = write_model(tmp_path / "m.gguf", _vocab_kv(), split_max_tensors=2)
    assert K + "tokens" not in gguf.GGUFReader(paths[1]).fields
    space, c = (list(BYTE_TO_UNICODE.values()).index(BYTE_TO_UNICODE[ord(x)]) for x in " c")
    for path in paths:
        tok = forma_gui.load_tokenizer(path)
        assert tok.vocab_size == 258 and tok.token_type(257) == "control"
        assert tok.encode("ab abc") == [256, space, 256, c]


def test_a_missing_first_shard_is_named(tmp_path: Path) -> None:
    paths = write_model(tmp_path / "m.gguf", _vocab_kv(), split_max_tensors=2)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(paths[0], moved / paths[0].name)
    with pytest.raises(FormatError, match="first shard of this split model.* is missing") as e:
        forma_gui.load_tokenizer(paths[2])
    assert e.value.path == str(paths[0])
    assert held(tmp_path) == []
