"""`forma bench --quick` runs every benchmark module and prints the table (no figure is checked:
benchmarks are never timed tests)."""
from __future__ import annotations

import json
import subprocess
import sys

from forma_gui.commands.bench import BENCHMARKS
from tests.conftest import data_file


def test_quick_bench_prints_every_benchmark(tmp_path):
    data_file()  # the benchmarks read the real test data
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "forma_gui.cli", "bench", "--quick", "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine: ")
    assert lines[1].startswith("| benchmark | ours | peer | ratio | target | met |")
    report = json.loads(out.read_text())
    assert report["quick"] and {r["benchmark"] for r in report["results"]} == set(BENCHMARKS)
    table = "\n".join(lines[3:])
    for result in report["results"]:
        assert f"| {result['name']} |" in table
    for name in BENCHMARKS:
        assert f"running {name} ..." in done.stderr


def test_the_launch_note_says_when_each_start_compiled_the_sources(monkeypatch):
    """Under PYTHONDONTWRITEBYTECODE a fresh checkout never caches bytecode, so each start of
    the launch benchmark compiles the sources: its note says so, and only then."""
    from types import SimpleNamespace

    from forma_gui.bench import app as bench_app

    flags = SimpleNamespace(dont_write_bytecode=True)
    monkeypatch.setattr(bench_app, "sys", SimpleNamespace(flags=flags))
    cached = {"yes": False}
    monkeypatch.setattr(bench_app.os.path, "exists", lambda path: cached["yes"])
    assert "PYTHONDONTWRITEBYTECODE" in bench_app._bytecode_note()
    cached["yes"] = True
    assert bench_app._bytecode_note() == ""
    cached["yes"], flags.dont_write_bytecode = False, False
    assert bench_app._bytecode_note() == ""
