"""`forma stream FILE TEXT`: the step-by-step streaming decode of TEXT (or of --ids) as a table.

Each row is one token: its bytes, what the UTF-8 buffer holds after it, what the buffered
decoder emits, and what decoding the token alone would print. With --stop, the stop
matcher's buffer and output are added and the row where the stream stops is marked.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from forma_gui.core.stream import (
    StreamStep, format_trace_table, joined, parse_ids, trace_stream, unescape, visible,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="tokenizer file or model folder")
    parser.add_argument("text", metavar="TEXT", nargs="?", help="text to encode and stream")
    parser.add_argument("--ids", metavar="1,2,3", help="stream these token ids instead of TEXT")
    parser.add_argument("--stop", metavar="STR", action="append", default=[],
                        help=r"stop string (repeatable; \n, \t, \r and \\ are understood)")


def run(args: argparse.Namespace) -> int:
    import forma_gui

    if (args.text is None) == (args.ids is None):
        print("forma stream: give TEXT or --ids, not both", file=sys.stderr)
        return 2
    stops = [s for s in map(unescape, args.stop) if s]
    tokenizer = forma_gui.load_tokenizer(args.file)
    try:
        ids = parse_ids(args.ids) if args.ids is not None else tokenizer.encode(args.text)
        steps = trace_stream(tokenizer, ids, stops=stops)
    except ValueError as e:
        print(f"forma stream: {e}", file=sys.stderr)
        return 2
    print(format_trace_table(steps, with_stops=bool(stops)))
    print()
    print(f"buffered: {visible(joined(steps))}")
    print(f"naive:    {visible(joined(steps, 'naive'))}")
    if stops:
        print(f"stopped:  {_stop_summary(steps)}")
    return 0


def _stop_summary(steps: Sequence[StreamStep]) -> str:
    """Where the stream stopped, on which stop string, and what came out."""
    hit = next((s for s in steps if s.stops_here), None)
    if hit is None:
        return "no (the whole text was emitted)"
    return (f"at step {hit.index} on {visible(hit.stopped or '')}, character {hit.stop_offset}; "
            f"output {visible(joined(steps, 'stop_emitted'))}")
