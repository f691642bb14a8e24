"""`forma bench [--quick] [--json FILE]`: every benchmark against its reference library, in one run.

Each module in BENCHMARKS exposes `run(quick) -> list[BenchResult]`. A peer that is not
installed (the `[bench]` extra) leaves its column empty; nothing here fails a build.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import platform
import sys
import time

#: benchmark modules, run in this order
BENCHMARKS = ("encode", "incremental", "load", "open_gguf", "dequant", "train", "app",
              "tokenizer_load")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="small inputs and few repeats: checks that every benchmark runs")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--only", nargs="*", choices=BENCHMARKS, help="run only these")


def run(args: argparse.Namespace) -> int:
    results, owners, failures = [], [], []
    for name in args.only or BENCHMARKS:
        try:
            module = importlib.import_module(f"forma_gui.bench.{name}")
        except ImportError as e:
            failures.append(f"{name}: not available ({e})")
            continue
        t0 = time.perf_counter()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            found = module.run(args.quick)
        except Exception as e:  # noqa: BLE001 - one broken benchmark must not hide the others
            failures.append(f"{name}: failed ({type(e).__name__}: {e})")
            continue
        results.extend(found)
        owners.extend([name] * len(found))
        print(f"  {name} took {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    print(machine_line())
    print(format_table(results))
    for line in failures:
        print(line, file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": machine_line(), "quick": args.quick,
                       "results": [dict(dataclasses.asdict(r), benchmark=owner, ratio=r.ratio, met=r.met)
                                   for owner, r in zip(owners, results)]}, f, indent=2)
    return 1 if failures else 0


def machine_line() -> str:
    import os

    cpu = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")),
               platform.processor() or platform.machine())
    return (f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def _cpuinfo() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError:
        return []


def format_table(results) -> str:
    """A Markdown table: benchmark, ours, peer, ratio, target, met."""
    rows = [("benchmark", "ours", "peer", "ratio", "target", "met", "note"),
            ("---",) * 7]
    for r in results:
        peer = f"{_num(r.peer)} {r.unit} ({r.peer_name})" if r.peer is not None else f"— ({r.peer_name})"
        ratio = f"{r.ratio:.2f}×" if r.ratio is not None else "—"
        target = f"≥ {r.target:g}×" if r.target is not None else "—"
        met = {True: "yes", False: "**no**", None: "—"}[r.met]
        rows.append((r.name, f"{_num(r.ours)} {r.unit}", peer, ratio, target, met, r.note))
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def _num(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"
