"""Print how many fuzz examples each reader ran (acceptance: at least 2,000 in CI).

``FORMA_FUZZ_STATS=1`` also prints how often each kind of FormatError came up, to see where
the mutations end (a fuzz whose examples all die at the magic check tests nothing).
"""
from __future__ import annotations

import os

from tests.fuzz.harness import EXAMPLES_RUN, FUZZ_EXAMPLES, OUTCOMES


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not EXAMPLES_RUN:
        return
    counts = ", ".join(f"{name} {n}" for name, n in sorted(EXAMPLES_RUN.items()))
    terminalreporter.write_line(
        f"fuzz examples: {sum(EXAMPLES_RUN.values())} in total ({counts}); "
        f"FORMA_FUZZ_EXAMPLES={FUZZ_EXAMPLES} per reader")
    if os.environ.get("FORMA_FUZZ_STATS"):
        for message, n in OUTCOMES.most_common(40):
            terminalreporter.write_line(f"{n:6d}  {message}")
