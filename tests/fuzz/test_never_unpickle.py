"""Pickles are refused, never loaded: PyTorch .bin/.pt/.pth zips and raw pickles.

The pickles are built here with the pickle module from an object whose unpickling would call
`_unpickled` (recorded in UNPICKLED); they are only ever written, never loaded. Every entry
point must refuse them by content, whatever the file is called, with a message that points
to safetensors.
"""
from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path
from typing import Callable

import pytest

from forma_gui import load_tokenizer, open_weights
from forma_gui.errors import FormatError

UNPICKLED: list[str] = []


def _unpickled(note: str) -> None:
    UNPICKLED.append(note)  # only runs if something unpickles the payload


class Payload:
    """Unpickling this calls _unpickled: the observable proof of an unpickle."""

    def __reduce__(self):
        return (_unpickled, ("a reader unpickled a file",))


def raw_pickle(protocol: int) -> bytes:
    return pickle.dumps({"model": Payload(), "weight": [1.0, 2.0]}, protocol=protocol)


def torch_zip(protocol: int = 2) -> bytes:
    """The layout torch.save writes since PyTorch 1.6: a zip with archive/data.pkl."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", raw_pickle(protocol))
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/data/0", bytes(16))
        z.writestr("archive/version", "3\n")
    return out.getvalue()


PICKLES: dict[str, Callable[[], bytes]] = {
    **{f"pickle-protocol-{p}": (lambda p=p: raw_pickle(p)) for p in range(2, 6)},
    "torch-zip": torch_zip,
}
#: what people name them, and names of the formats they are not
NAMES = ["pytorch_model.bin", "model.pt", "consolidated.00.pth", "model.safetensors",
         "tokenizer.json", "vocab.json", "tokenizer.model", "model.gguf", "cl100k_base.tiktoken"]
ENTRY_POINTS = {"load_tokenizer": load_tokenizer, "open_weights": open_weights}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", PICKLES)
def test_pickles_are_refused_by_content(tmp_path: Path, kind: str, name: str, entry: str) -> None:
    path = tmp_path / name
    path.write_bytes(PICKLES[kind]())
    with pytest.raises(FormatError) as info:
        ENTRY_POINTS[entry](path)
    err = info.value
    assert err.path == str(path) and err.offset == 0
    assert "pickle" in err.message and "safetensors" in err.message
    assert not UNPICKLED


def test_a_folder_with_only_pytorch_weights(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(torch_zip())
    with pytest.raises(FormatError) as info:
        open_weights(tmp_path)
    assert "safetensors" in info.value.message and info.value.path == str(tmp_path)
    assert not UNPICKLED

