"""open_weights: GGUF views equal gguf-py's, formats are sniffed by content, pickles refused."""
from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from forma_gui import open_weights
from forma_gui.errors import FormatError
from tests.conftest import data_file

gguf = pytest.importorskip("gguf")
SMOLLM2 = ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="module")
def smollm2():
    path = data_file(*SMOLLM2)
    with open_weights(path) as w:
        yield w, gguf.GGUFReader(path)


def test_raw_views_equal_gguf_reader(smollm2) -> None:
    w, ref = smollm2
    assert w.format == "gguf" and len(w.tensors) == len(ref.tensors) == 272
    for r in ref.tensors:
        raw = w.raw(r.name)
        assert raw.shape == r.data.shape and raw.dtype == r.data.dtype, r.name
        assert not raw.flags.writeable and not raw.flags.owndata  # a view of the map
        np.testing.assert_array_equal(raw, r.data)


def test_dequantize_is_bit_identical_to_gguf_py(smollm2) -> None:
    """One tensor of each type in the file (the quant tests cover every tensor)."""
    w, ref = smollm2
    by_type = {}
    for r in ref.tensors:
        by_type.setdefault(r.tensor_type.name, r)
    assert set(by_type) == {"F32", "Q8_0", "Q4_1"}
    for name, r in by_type.items():
        ours = w.dequantize(r.name)
        expected = gguf.quants.dequantize(r.data, r.tensor_type).astype(np.float32)
        assert ours.dtype == np.float32 and ours.shape == w.tensor(r.name).shape == expected.shape
        np.testing.assert_array_equal(ours.view(np.uint32), expected.view(np.uint32))


def test_tensor_lookup(smollm2) -> None:
    w, _ = smollm2
    t = w.tensor("token_embd.weight")
    assert (t.shape, t.dtype, t.n_elements) == ((49152, 576), "Q8_0", 49152 * 576)
    assert t.nbytes == 49152 * 576 // 32 * 34
    assert w.raw("token_embd.weight").shape == (49152, 576 // 32 * 34)
    with pytest.raises(KeyError):
        w.tensor("nope")


def write_gguf(path: Path, tensors: dict[str, np.ndarray], big: bool = False) -> None:
    from gguf import GGUFEndian, GGUFWriter

    writer = GGUFWriter(path, "test", endianess=GGUFEndian.BIG if big else GGUFEndian.LITTLE)
    for name, arr in tensors.items():
        writer.add_tensor(name, arr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


ELEMENT_TENSORS = {
    "F32": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
    "F16": np.array([[0.5, -65504.0], [6e-8, 1.0]], np.float16),
    "F64": np.array([1e-300, -2.0]),
    "I8": np.array([-128, 127], np.int8), "I16": np.array([-3, 4], np.int16),
    "I32": np.arange(-2, 4, dtype=np.int32).reshape(2, 3),
    "I64": np.array([2**40, -7], np.int64),
}


@pytest.mark.parametrize("big", [False, True], ids=["little", "big"])
def test_gguf_element_types(tmp_path: Path, big: bool) -> None:
    path = tmp_path / "e.gguf"
    write_gguf(path, ELEMENT_TENSORS, big)
    with open_weights(path) as w:
        for name, arr in ELEMENT_TENSORS.items():
            t = w.tensor(name)
            assert t.dtype == name and t.shape == arr.shape
            raw = w.raw(name)
            assert raw.dtype.byteorder in ((">",) if big and arr.itemsize > 1 else ("=", "|", "<"))
            np.testing.assert_array_equal(raw, arr)
            np.testing.assert_array_equal(w.dequantize(name), arr.astype(np.float32))


def test_gguf_bf16(tmp_path: Path) -> None:
    from gguf import GGMLQuantizationType as Q

    values = np.array([[1.0, -3.0], [0.15625, 2.0**100]], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    path = tmp_path / "bf16.gguf"
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "test")
    writer.add_tensor("w", bits.view(np.uint8).reshape(2, 4), raw_dtype=Q.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with open_weights(path) as w:
        assert w.tensor("w").dtype == "BF16" and w.tensor("w").shape == (2, 2)
        np.testing.assert_array_equal(w.raw("w"), bits)
        np.testing.assert_array_equal(w.dequantize("w"), values)
        expected = gguf.quants.dequantize(bits.view(np.uint8).reshape(2, 4), Q.BF16)
        np.testing.assert_array_equal(w.dequantize("w"), expected)


# -- detection -------------------------------------------------------------------------------

def test_pickles_are_refused(tmp_path: Path) -> None:
    plain = tmp_path / "model.pt"
    plain.write_bytes(pickle.dumps({"w": [1, 2]}, protocol=2))
    zipped = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": 1}))
    for path in (plain, zipped, tmp_path):
        with pytest.raises(FormatError, match="safetensors"):
            open_weights(path)


@pytest.mark.parametrize("content, words", [
    (b"", "empty"), (b"hello world, not weights", "not a weight file"),
    (b"GGUF\x03\0\0\0", "tensor count"),
])
def test_unknown_content(tmp_path: Path, content: bytes, words: str) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(content)
    with pytest.raises(FormatError, match=words):
        open_weights(path)


def test_detected_by_content_not_name(tmp_path: Path) -> None:
    st_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "weights.dat"
    st_numpy.save_file({"a": np.ones(3, np.float32)}, path)
    with open_weights(path) as w:
        assert w.format == "safetensors"
    gguf_path = tmp_path / "model.safetensors"
    write_gguf(gguf_path, {"a": np.ones(3, np.float32)})
    with open_weights(gguf_path) as w:
        assert w.format == "gguf"


def test_folders(tmp_path: Path) -> None:
    write_gguf(tmp_path / "only.gguf", {"a": np.ones(3, np.float32)})
    with open_weights(tmp_path) as w:
        assert w.format == "gguf" and w.path.endswith("only.gguf")
    write_gguf(tmp_path / "second.gguf", {"a": np.ones(3, np.float32)})
    with pytest.raises(FormatError, match="2 GGUF files"):
        open_weights(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FormatError, match="no weight file"):
        open_weights(empty)
    with pytest.raises(FormatError, match="cannot"):
        open_weights(tmp_path / "missing.gguf")


# -- lifetime ---------------------------------------------------------------------------------

def test_shrunk_file_raises_instead_of_crashing(tmp_path: Path) -> None:
    path = tmp_path / "s.gguf"
    write_gguf(path, {"a": np.arange(64, dtype=np.float32), "b": np.ones(64, np.float32)})
    with open_weights(path) as w:
        np.testing.assert_array_equal(w.raw("a"), np.arange(64))
        with open(path, "r+b") as f:
            f.truncate(w.tensor("a").offset + 8)
        for call in (w.raw, w.dequantize):
            with pytest.raises(FormatError, match="shrank"):
                call("b")


def test_views_outlive_close(tmp_path: Path) -> None:
    path = tmp_path / "v.gguf"
    write_gguf(path, {"a": np.arange(8, dtype=np.float32)})
    w = open_weights(path)
    view = w.raw("a")
    w.close()
    np.testing.assert_array_equal(view, np.arange(8))
    with pytest.raises(FormatError, match="closed"):
        w.raw("a")
