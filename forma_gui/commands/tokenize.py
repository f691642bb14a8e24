"""`forma tokenize FILE TEXT`: the token segmentation of TEXT, one row per token.

Columns: index, id, piece (as stored in the vocabulary, control characters escaped), the raw
bytes in hex, and the character span ``start:end`` into TEXT (``*`` marks a token that covers
only part of a character). ``--json`` prints the same records as a JSON list. TEXT ``-``
reads standard input.
"""
from __future__ import annotations

import argparse
import json
import sys

from forma_gui.core.tokenizer import Token


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="tokenizer file or model folder")
    parser.add_argument("text", metavar="TEXT", help="text to tokenize ('-' reads standard input)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of token records")
    parser.add_argument("--special", action="store_true",
                        help="match special/added tokens in TEXT (otherwise they are plain text)")
    parser.add_argument("--pattern", metavar="NAME|REGEX",
                        help="pre-tokenizer pattern for tiktoken files whose name does not say it")


def run(args: argparse.Namespace) -> int:
    import forma_gui

    tokenizer = forma_gui.load_tokenizer(args.file, pattern=args.pattern)
    text = sys.stdin.read() if args.text == "-" else args.text
    tokens = tokenizer.segment(text, special=args.special)
    if args.json:
        json.dump([record(t) for t in tokens], sys.stdout, ensure_ascii=False, indent=1)
        print()
    else:
        print(format_table(tokens))
        print(f"{len(tokens)} tokens, {len(text)} characters"
              + (f", {len(text) / len(tokens):.2f} characters per token" if tokens else ""))
    return 0


def record(token: Token) -> dict:
    """A token as a JSON-ready dict."""
    return {"id": token.id, "piece": token.piece, "bytes": token.data.hex(" "),
            "start": token.start, "end": token.end, "partial": token.partial, "special": token.special}


def format_table(tokens: list[Token]) -> str:
    """Aligned columns: index, id, piece, bytes, span."""
    rows = [("#", "id", "piece", "bytes", "span")]
    rows += [(str(n), str(t.id), escape(t.piece), t.data.hex(" "),
              f"{t.start}:{t.end}{'*' if t.partial else ''}") for n, t in enumerate(tokens)]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    return "\n".join("  ".join([*(r[c].ljust(widths[c]) for c in range(4)), r[4]]).rstrip() for r in rows)


def escape(piece: str) -> str:
    """Control characters and line breaks as escapes, so each token stays on one line.

    >>> escape("a\\nb\\x00")
    'a\\\\nb\\\\x00'
    """
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in piece)
