"""`forma inspect FILE [--json]`: a weight file's metadata, tensor table and totals by type.

Long arrays (the vocabulary, merges, scores) are summarised as their first items and a
count, never dumped; long strings (chat templates) are cut in the text output. Strings
holding bytes that are not UTF-8 (possible in GGUF vocabularies) are shown with \\x escapes.
"""
from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from forma_gui.core.ggml_types import GGML_TYPES, bits_per_weight
from forma_gui.core.memory import totals_by_type
from forma_gui.formats.lazy_strings import LazyStrings
from forma_gui.formats.tensor_info import TensorInfo

HEAD_ITEMS = 8            # items shown of a long array
LONG_ARRAY = 16           # arrays longer than this are summarised
TEXT_WIDTH = 100          # characters of a string shown in the text output
#: control characters shown as escapes so that one value stays on one line
CONTROL_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]} | {
    0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE",
                        help=".gguf, .safetensors, a shard index, or a model folder")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")


def run(args: argparse.Namespace) -> int:
    from forma_gui import open_weights

    with open_weights(args.file) as w:
        report = build_report(w)
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        print(format_report(report))
    return 0


# -- the report, as plain data ------------------------------------------------------------

def build_report(w: Any) -> dict[str, Any]:
    """Everything `inspect` shows, JSON-ready, arrays summarised."""
    return {
        "file": w.path,
        "format": w.format,
        "files": w.files,
        "format_info": w.format_info,
        "metadata": [{"key": k, "type": w.metadata_types[k],
                      "value": summarise(v, float32="FLOAT32" in w.metadata_types[k])}
                     for k, v in w.metadata.items()],
        "tensors": [tensor_row(t) for t in w.tensors],
        "totals": totals(w.tensors),
        "would_need": totals_by_type({t.name: t.n_elements for t in w.tensors}),
    }


def tensor_row(t: TensorInfo) -> dict[str, Any]:
    return {"name": t.name, "shape": list(t.shape), "type": t.dtype, "elements": t.n_elements,
            "bytes": t.nbytes, "offset": t.offset, "file": t.file}


def totals(tensors: list[TensorInfo]) -> dict[str, dict[str, Any]]:
    """Per type: tensor count, elements, bytes and bits per weight; plus "total"."""
    out: dict[str, dict[str, Any]] = {}
    for t in tensors:
        row = out.setdefault(t.dtype, {"tensors": 0, "elements": 0, "bytes": 0})
        row["tensors"] += 1
        row["elements"] += t.n_elements
        row["bytes"] += t.nbytes
    out = dict(sorted(out.items(), key=lambda kv: -kv[1]["bytes"]))
    out["total"] = {k: sum(r[k] for r in out.values()) for k in ("tensors", "elements", "bytes")}
    for row in out.values():
        row["bits_per_weight"] = round(8 * row["bytes"] / row["elements"], 4) \
            if row["elements"] else None
    return out


def summarise(value: Any, *, float32: bool = False) -> Any:
    """A metadata value made JSON-ready; long arrays become {"count", "head"}.

    FLOAT32 values are written as the shortest decimal that reads back as the same float32
    (1e-05, not 9.999999747378752e-06).
    """
    if isinstance(value, (np.ndarray, list, LazyStrings)):
        n = len(value)
        head = value[:HEAD_ITEMS] if n > LONG_ARRAY else value
        head = head.tolist() if isinstance(head, np.ndarray) else head
        items = [summarise(v, float32=float32) for v in head]
        return {"count": n, "head": items} if n > LONG_ARRAY else items
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return float(str(np.float32(value))) if float32 else value
    return value


def printable(text: str) -> str:
    """`text` with undecodable bytes (kept as surrogates by the readers) shown as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# -- text rendering -------------------------------------------------------------------------

def format_report(report: dict[str, Any]) -> str:
    info = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in report["format_info"].items())
    lines = [f"file: {report['file']}", f"format: {report['format']} ({info})"]
    if len(report["files"]) > 1:
        lines.append(f"shards: {len(report['files'])}")
    lines += ["", f"metadata ({len(report['metadata'])} keys)"]
    lines += _table([[m["key"], m["type"], _short(m["value"])] for m in report["metadata"]])
    lines += ["", f"tensors ({len(report['tensors'])})"]
    lines += _table([["name", "shape", "type", "bytes", "offset"]]
                    + [[t["name"], " x ".join(map(str, t["shape"])) or "scalar", t["type"],
                        str(t["bytes"]), str(t["offset"])] for t in report["tensors"]],
                    right={3, 4})
    lines += ["", "totals by type"]
    lines += _table([["type", "tensors", "elements", "bytes", "bits/weight", "size"]]
                    + [[name, str(r["tensors"]), str(r["elements"]), str(r["bytes"]),
                        _bpw(name, r), human_bytes(r["bytes"])]
                       for name, r in report["totals"].items()], right={1, 2, 3, 4, 5})
    need = report["would_need"]
    lines += ["", "at f16 / int8 / int4: " + " / ".join(human_bytes(need[k])
                                                         for k in ("f16", "int8", "int4"))]
    return "\n".join(lines)


def _bpw(name: str, row: dict[str, Any]) -> str:
    if name in GGML_TYPES:
        return f"{bits_per_weight(name):g}"
    return "" if row["bits_per_weight"] is None else f"{row['bits_per_weight']:g}"


def _short(value: Any) -> str:
    """One line, at most TEXT_WIDTH characters."""
    if isinstance(value, dict) and "count" in value:
        text = ", ".join(_short(v) for v in value["head"])
        text = f"[{value['count']} items] {text}, ..."
    elif isinstance(value, str):
        text = f'"{value.translate(CONTROL_ESCAPES)}"'
    elif isinstance(value, list):
        text = "[" + ", ".join(_short(v) for v in value) + "]"
    else:
        text = str(value)
    return text if len(text) <= TEXT_WIDTH else text[:TEXT_WIDTH - 1] + "…"


def _table(rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                             for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


def human_bytes(n: int) -> str:
    """Binary-prefixed size.

    >>> human_bytes(98362432), human_bytes(512)
    ('93.8 MiB', '512 B')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
