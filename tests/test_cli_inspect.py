"""`forma inspect`: metadata, tensor table and totals of a weight file, as text or JSON."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from forma_gui.cli import main
from tests.conftest import data_file

SMOLLM2 = ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_matches_gguf_reader(capsys) -> None:
    gguf = pytest.importorskip("gguf")
    path = data_file(*SMOLLM2)
    code, out, _ = run(capsys, str(path), "--json")
    assert code == 0
    report = json.loads(out)
    ref = gguf.GGUFReader(path)
    assert report["format"] == "gguf" and report["format_info"]["version"] == 3
    assert [(t["name"], t["type"], t["bytes"], t["offset"]) for t in report["tensors"]] == [
        (t.name, t.tensor_type.name, int(t.n_bytes), int(t.data_offset)) for t in ref.tensors]
    meta = {m["key"]: m for m in report["metadata"]}
    assert meta["tokenizer.ggml.tokens"]["value"]["count"] == 49152
    assert meta["tokenizer.ggml.tokens"]["value"]["head"] == \
        ref.fields["tokenizer.ggml.tokens"].contents(slice(0, 8))
    assert meta["llama.attention.layer_norm_rms_epsilon"]["value"] == 1e-05
    assert meta["llama.block_count"] == {"key": "llama.block_count", "type": "UINT32",
                                         "value": 30}
    totals = report["totals"]
    assert {k: v["tensors"] for k, v in totals.items()} == \
        {"Q4_1": 210, "Q8_0": 1, "F32": 61, "total": 272}
    assert totals["total"]["bytes"] == sum(int(t.n_bytes) for t in ref.tensors)
    assert totals["Q8_0"]["bits_per_weight"] == 8.5
    n = totals["total"]["elements"]
    assert report["would_need"] == {"f16": 2 * n, "int8": n * 34 // 32, "int4": n * 18 // 32}


def test_text_output_summarises_the_vocabulary(capsys) -> None:
    code, out, _ = run(capsys, str(data_file(*SMOLLM2)))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) < 400  # 33 keys + 272 tensors + totals; never 49152 tokens
    tokens = next(line for line in lines if "tokenizer.ggml.tokens" in line)
    assert "[49152 items]" in tokens and len(tokens) < 200
    assert any(line.split()[:3] == ["token_embd.weight", "49152", "x"] for line in lines)
    assert "totals by type" in lines
    total = next(line for line in lines if line.strip().startswith("total "))
    assert total.split()[1:4] == ["272", "134515008", "96576768"]


def test_safetensors_and_odd_strings(tmp_path: Path, capsys) -> None:
    st_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "m.safetensors"
    st_numpy.save_file({"b": np.zeros((2, 3), np.float16), "a": np.ones(4, np.int32)}, path,
                       metadata={"format": "pt"})
    code, out, _ = run(capsys, str(path), "--json")
    report = json.loads(out)
    assert code == 0 and report["format"] == "safetensors"
    assert report["metadata"] == [{"key": "format", "type": "STRING", "value": "pt"}]
    assert {t["name"]: t["shape"] for t in report["tensors"]} == {"b": [2, 3], "a": [4]}
    code, out, _ = run(capsys, str(path))
    assert code == 0 and "F16" in out and "I32" in out


def test_invalid_utf8_metadata_prints(tmp_path: Path, capsys) -> None:
    """A GGUF string with bytes that are not UTF-8 is shown escaped, not a crash."""
    key = b"bad"
    value = b"ok\xff\xfe"
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(value)) + value
    blob = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv
    path = tmp_path / "x.gguf"
    path.write_bytes(blob)
    code, out, _ = run(capsys, str(path))
    assert code == 0 and '"ok\\xff\\xfe"' in out
    code, out, _ = run(capsys, str(path), "--json")
    assert code == 0 and json.loads(out)["metadata"][0]["value"] == "ok\\xff\\xfe"


def test_bad_file_is_one_clean_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGUF\x03\0\0\0" + struct.pack("<Q", 2**63) + b"\0" * 8)
    code, out, err = run(capsys, str(path))
    assert code == 2 and out == ""
    assert str(path) in err and "at byte 8" in err and "Traceback" not in err
