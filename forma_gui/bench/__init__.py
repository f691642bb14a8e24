"""Benchmarks against the reference libraries, measured in the same run.

Each module here exposes `run(quick: bool) -> list[BenchResult]`; `forma bench` collects them.
Benchmarks are never unit tests: they print ratios, they do not fail builds.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class BenchResult:
    """One measured figure, ours beside the peer's, in the same unit."""

    name: str                    # "dequantize Q4_0"
    ours: float                  # value in `unit`
    peer: float | None           # the peer's value in `unit`, None if not installed
    peer_name: str               # "gguf.quants"
    unit: str                    # "GB/s", "MB/s", "ms"
    higher_is_better: bool = True
    target: float | None = None  # required ratio (ours vs peer, oriented so bigger is better)
    note: str = ""               # what bounded the figure

    @property
    def ratio(self) -> float | None:
        """How many times better ours is than the peer (> 1 is better)."""
        if not self.peer or not self.ours:
            return None
        return self.ours / self.peer if self.higher_is_better else self.peer / self.ours

    @property
    def met(self) -> bool | None:
        """Whether the ratio reaches `target` (None without a target or a peer figure)."""
        if self.target is None or self.ratio is None:
            return None
        return self.ratio >= self.target


def median_time(fn: Callable[[], object], *, repeat: int = 5, warmup: bool = True) -> float:
    """Median wall time of `fn()` in seconds over `repeat` runs (after one warm-up, unless
    warmup=False: --quick runs of slow peers)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def alternating(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of each function, run in turns (after one warm-up turn).

    CPU time is reported beside wall time because on a shared machine the wall clock also
    counts time spent waiting for a core; all the work measured here runs on one thread.
    The result is freed after the clock stops: freeing a large result is not part of making it.
    """
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    for turn in range(repeat + 1):
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            result = fn()
            elapsed = (time.perf_counter() - t0, time.process_time() - c0)
            del result
            if turn:
                times[name].append(elapsed)
    return {name: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
            for name, ts in times.items()}


def cpu_note(secs: dict[str, tuple[float, float]], ours: str, peer: str) -> str:
    """"CPU-time ratio 1.23x" of `alternating`'s results, "" without the peer."""
    if peer not in secs:
        return ""
    return f"CPU-time ratio {secs[peer][1] / secs[ours][1]:.2f}x"


def data_path(*parts: str) -> Path:
    """A file of the test data (FORMA_TEST_DATA, default ../shared/data beside the checkout)."""
    root = os.environ.get("FORMA_TEST_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    return base.joinpath(*parts)
