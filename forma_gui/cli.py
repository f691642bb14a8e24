"""The `forma` command: GUI-free access to the core library.

Each subcommand lives in `forma_gui/commands/<name>.py` and provides
`add_arguments(parser)` and `run(args) -> int`.
"""
from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> one-line help
COMMANDS = {
    "tokenize": "print the token segmentation of TEXT",
    "stream": "print the step-by-step streaming decode of TEXT or ids",
    "inspect": "print a weight file's metadata, tensor table and totals",
    "train": "train BPE on a corpus or a word dictionary",
    "bench": "run the benchmarks against the reference libraries",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="forma", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"forma_gui.commands.{name}")
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    from forma_gui.errors import FormatError

    args = build_parser().parse_args(argv)
    module = importlib.import_module(f"forma_gui.commands.{args.command}")
    try:
        return module.run(args)
    except FormatError as e:
        print(f"forma: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
