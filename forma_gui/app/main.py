"""`forma-gui [FILE]` and `python -m forma_gui [FILE]`: open the window.

Startup imports only Qt and the Tokenize view; the embedded GPT-2 vocabulary (or FILE)
loads in a worker while the window is shown, and the other views are built when their
tab is first shown.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

#: set by `forma bench`: print "ready SECONDS" once the first tokens are drawn, then quit
BENCH_ENV = "FORMA_BENCH_STARTUP"


def build_parser() -> argparse.ArgumentParser:
    from forma_gui import __version__

    parser = argparse.ArgumentParser(
        prog="forma-gui", description="See how a language model sees text and weights.")
    parser.add_argument("file", nargs="?", help="a tokenizer, .gguf, .safetensors or model folder "
                        "(default: the embedded GPT-2 vocabulary)")
    parser.add_argument("--version", action="version", version=f"forma-gui {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the app until its window closes; returns the exit code."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="forma-gui: %(levelname)s: %(message)s")

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setApplicationName("forma-gui")
    app.setOrganizationName("forma_gui")

    from forma_gui.app.main_window import MainWindow

    window = MainWindow()
    # Start loading before the first paint, so the worker overlaps with showing the window.
    # (Starting it before importing Qt is slower: the loader and the imports share the GIL.)
    if args.file:
        window.open_path(args.file)
    else:
        window.open_default()
    window.show()
    if os.environ.get(BENCH_ENV):
        _quit_when_ready(window, app)
    return app.exec()


def _quit_when_ready(window, app, started: float = time.perf_counter()) -> None:
    """For the startup benchmark: once the Tokenize view has drawn the tokens of the default
    text, print the seconds since this module was imported, and quit."""
    from PySide6.QtCore import QTimer

    def check() -> None:
        view = window.views.get("Tokenize")
        if view is None or view.tokenizer is None or not len(view.tokens) or not view.canvas.laid_out:
            QTimer.singleShot(2, check)
            return
        window.repaint()  # paint synchronously: the tokens are on screen when this returns
        print(f"ready {time.perf_counter() - started:.4f}", flush=True)
        app.quit()

    QTimer.singleShot(0, check)


if __name__ == "__main__":
    raise SystemExit(main())
