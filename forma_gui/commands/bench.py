"""`forma bench` (not implemented yet)."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs="*")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("forma bench: not implemented yet")
