"""One sniff for tokenizers and weights: unreadable, empty and pickled files refused alike."""
from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import pytest

from forma_gui.errors import FormatError
from forma_gui.formats.file_bytes import is_pickle, read_bytes, read_head
from forma_gui.formats.loader import load_tokenizer
from forma_gui.formats.weights import open_weights


def _pickles(tmp_path: Path) -> list[Path]:
    plain = tmp_path / "pytorch_model.bin"
    plain.write_bytes(pickle.dumps({"w": [1, 2]}, protocol=2))
    archive = tmp_path / "model.pt"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": 1}))
    return [plain, archive]


@pytest.mark.parametrize("opener", [load_tokenizer, open_weights, lambda p: read_head(p, 16)])
def test_pickles_are_refused_by_every_opener(tmp_path: Path, opener) -> None:
    for path in _pickles(tmp_path):
        with pytest.raises(FormatError, match="pickle") as info:
            opener(path)
        assert str(path) in str(info.value)


@pytest.mark.parametrize("opener", [load_tokenizer, open_weights])
def test_empty_and_missing_files(tmp_path: Path, opener) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(FormatError, match="empty"):
        opener(empty)
    with pytest.raises(FormatError, match="cannot read"):
        opener(tmp_path / "missing.gguf")


def test_is_pickle_on_protocols() -> None:
    assert all(is_pickle(pickle.dumps([1], protocol=p)) for p in range(2, pickle.HIGHEST_PROTOCOL + 1))
    assert not is_pickle(b"GGUF\x03\x00\x00\x00") and not is_pickle(b'{"model": {}}')


def test_read_bytes_limit(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    path.write_bytes(b"{}" * 10)
    assert read_bytes(path, limit=20) == b"{}" * 10
    with pytest.raises(FormatError, match="index larger than 19 bytes"):
        read_bytes(path, limit=19, what="index")
    with pytest.raises(FormatError, match="cannot read"):
        read_bytes(tmp_path / "missing.json")


@pytest.mark.parametrize("opener", [load_tokenizer, open_weights, lambda p: read_bytes(p)])
def test_named_pipes_are_refused_unread(tmp_path: Path, opener) -> None:
    """Reading a FIFO blocks until a writer comes: it is refused before it is opened."""
    import os

    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(FormatError, match="regular file, found a named pipe") as info:
        opener(fifo)
    assert str(fifo) in str(info.value)
