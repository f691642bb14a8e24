"""`forma train`: learn BPE merges from a text file (byte level) or a word dictionary.

    forma train botchan.txt --merges 1000 --out tok/       # writes the four tokenizer files
    forma train --words "l o w </w>:5,l o w e r </w>:2" --merges 10   # prints the trace
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from forma_gui.core.bpe import (ByteLevelTraining, Step, learn_bpe, parse_words, pattern_names,
                                pattern_regex, train_bytelevel)
from forma_gui.errors import FormatError

#: seconds between two progress lines on a terminal
PROGRESS_INTERVAL = 0.2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", nargs="?", help="UTF-8 text file to train byte-level BPE on")
    parser.add_argument("--words", metavar="SPEC",
                        help='word dictionary "l o w </w>:5,l o w e r </w>:2,..." '
                             "(Sennrich et al.); prints the merge trace instead")
    parser.add_argument("--merges", type=int, required=True, metavar="N",
                        help="number of merges to learn")
    parser.add_argument("--pattern", default="gpt2", metavar="NAME",
                        help="pre-tokenizer pattern for byte level: "
                             f"{', '.join(pattern_names())} (default gpt2)")
    parser.add_argument("--out", metavar="DIR", help="folder for vocab.json, merges.txt, "
                        "tokenizer.json and ranks.tiktoken (byte level)")


def run(args: argparse.Namespace) -> int:
    if args.merges < 0:
        return _usage("--merges must be >= 0")
    if (args.corpus is None) == (args.words is None):
        return _usage("give either a CORPUS file or --words, not both")
    if args.words is not None:
        return _run_words(args.words, args.merges)
    if args.out is None:
        return _usage("byte-level training needs --out DIR")
    try:
        pattern_regex(args.pattern)
    except ValueError as e:
        return _usage(f"--pattern: {e}")
    return _run_corpus(Path(args.corpus), args.merges, args.pattern, Path(args.out))


def _usage(message: str) -> int:
    print(f"forma train: {message}", file=sys.stderr)
    return 2


def _run_words(spec: str, merges: int) -> int:
    try:
        vocab = parse_words(spec)
    except ValueError as e:
        return _usage(f"--words: {e}")
    if not vocab:
        return _usage("--words: the dictionary is empty")
    training = learn_bpe(vocab, merges)
    for step in training.steps:
        print(format_step(step))
    if len(training.merges) < merges:
        print(f"stopped after {len(training.merges)} merges: no pair left", file=sys.stderr)
    print()
    for word, freq in training.words.items():
        print(f"{word}:{freq}")
    return 0


def format_step(step: Step) -> str:
    """One trace line: number, pair, new symbol, count, and the pairs it beat on the tie rule.

    >>> format_step(Step(0, ("e", "s"), 9, ()))
    '1  e + s -> es  (9)'
    """
    a, b = step.pair
    line = f"{step.index + 1}  {a} + {b} -> {a}{b}  ({step.count})"
    tied = [f"{p.pair[0]} + {p.pair[1]}" for p in step.runners_up if p.tied]
    return line + (f"  tie, beat: {', '.join(tied)}" if tied else "")


def _run_corpus(corpus: Path, merges: int, pattern: str, out: Path) -> int:
    from forma_gui.formats.bpe_export import export_all

    try:
        text = corpus.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise FormatError("expected UTF-8 text", path=corpus, offset=e.start) from e
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror or e}", path=corpus) from e
    started = time.perf_counter()
    training = train_bytelevel(text, merges, pattern=pattern, progress=_progress_printer(merges))
    elapsed = time.perf_counter() - started
    written = export_all(training, out)
    _report(training, elapsed, written)
    return 0


def _progress_printer(total: int):
    """A progress callback for stderr: a live counter on a terminal, else a line per 10 %."""
    tty = sys.stderr.isatty()
    last = [0.0, -1]  # time of the last print, tenth last printed

    def progress(done: int, _total: int) -> None:
        if tty:
            now = time.perf_counter()
            if done == total or now - last[0] >= PROGRESS_INTERVAL:
                last[0] = now
                end = "\n" if done == total else ""
                print(f"\rtraining: {done}/{total} merges", end=end, file=sys.stderr, flush=True)
        elif done * 10 // total > last[1]:
            last[1] = done * 10 // total
            print(f"training: {done}/{total} merges", file=sys.stderr, flush=True)

    return progress


def _report(training: ByteLevelTraining, elapsed: float, written: list[Path]) -> None:
    print(f"{len(training.merges)} merges on {training.n_words} distinct pre-tokens "
          f"in {elapsed:.2f} s; vocabulary {training.vocab_size}", file=sys.stderr)
    for path in written:
        print(path)
