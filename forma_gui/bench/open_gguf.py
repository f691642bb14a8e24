"""Opening a GGUF and listing its tensors: `GGUFFile` against `gguf.GGUFReader`.

Both sides parse the header (all metadata, the vocabulary included) and list every
tensor's name, shape and type; neither reads tensor data. Time is the median wall time of
open + list; peak RSS is measured in a fresh interpreter per side (VmHWM from
/proc/self/status: unlike `ru_maxrss` it is not inherited from the parent across
fork + exec). It includes the interpreter and numpy, reported as the baseline in the note.
The issue's 100x target is set for Gemma-3 270M (262k vocabulary), which is not in the
test data; the figures here are for the files that are: SmolLM2 (49k vocabulary) and
llama-bpe (128k vocabulary, vocab only).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from forma_gui.bench import BenchResult, data_path, median_time

TARGET = 100.0
FILES = {"SmolLM2 98 MB": ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"),
         "llama-bpe vocab 7.8 MB": ("gguf-vocab", "ggml-vocab-llama-bpe.gguf")}

#: run in a fresh interpreter: open + list, then print peak RSS in KiB (Linux VmHWM)
RSS_SCRIPT = """
import json, sys
kind, path = sys.argv[1], sys.argv[2]
import numpy
if kind == "ours":
    from forma_gui.formats.gguf import GGUFFile
    g = GGUFFile(path); listed = [(t.name, t.shape, t.dtype) for t in g.tensors]
elif kind == "peer":
    from gguf import GGUFReader
    r = GGUFReader(path); listed = [(t.name, t.shape, t.tensor_type) for t in r.tensors]
with open("/proc/self/status") as f:
    print(next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")))
"""


def open_ours(path: Path) -> int:
    """Open with forma's GGUFFile and list every tensor's name, shape and type."""
    from forma_gui.formats.gguf import GGUFFile

    with GGUFFile(path) as g:
        return len([(t.name, t.shape, t.dtype) for t in g.tensors])


def open_peer(path: Path) -> int:
    """The same listing with gguf-py's GGUFReader."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    return len([(t.name, t.shape, t.tensor_type) for t in reader.tensors])


def peer_installed() -> bool:
    """Whether gguf-py can be imported."""
    import importlib.util

    return importlib.util.find_spec("gguf") is not None


def peak_rss_mb(kind: str, path: Path) -> float | None:
    """Peak RSS of a fresh interpreter that opens `path` ("ours", "peer" or "baseline")."""
    if not Path("/proc/self/status").exists():
        return None
    done = subprocess.run([sys.executable, "-c", RSS_SCRIPT, kind, str(path)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        return None
    return json.loads(done.stdout.strip().splitlines()[-1]) / 1024


def run(quick: bool = False) -> list[BenchResult]:
    """Time to open each GGUF and list its tensors, and peak RSS, against gguf-py."""
    results = []
    peer = peer_installed()
    files = dict(list(FILES.items())[:1]) if quick else FILES
    for label, parts in files.items():
        path = data_path(*parts)
        if not path.exists():
            continue
        ours = median_time(lambda: open_ours(path), repeat=3 if quick else 7)
        theirs = median_time(lambda: open_peer(path), repeat=1 if quick else 3, warmup=not quick) if peer else None
        results.append(BenchResult(
            name=f"open GGUF + list tensors, {label}", ours=ours * 1000,
            peer=None if theirs is None else theirs * 1000, peer_name="gguf.GGUFReader",
            unit="ms", higher_is_better=False, target=TARGET,
            note="struct over mmap; string arrays walked with numpy, decoded on access"))
        if not quick:
            results.append(_rss_result(label, path, peer))
    return results


def _rss_result(label: str, path: Path, peer: bool) -> BenchResult:
    base = peak_rss_mb("baseline", path)
    return BenchResult(
        name=f"open GGUF peak RSS, {label}", ours=peak_rss_mb("ours", path) or 0.0,
        peer=peak_rss_mb("peer", path) if peer else None, peer_name="gguf.GGUFReader",
        unit="MB", higher_is_better=False,
        note=f"fresh interpreter; python + numpy alone: {base:.0f} MB" if base else "")
