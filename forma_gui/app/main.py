"""`forma-gui [FILE]` and `python -m forma_gui [FILE]`: open the window.

Startup imports only Qt and the Tokenize view; the embedded GPT-2 vocabulary (or FILE)
loads in a worker while the window is shown, and the other views are built when their
tab is first shown.
"""
from __future__ import annotations

import argparse
import logging
import sys


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
    return app.exec()


if __name__ == "__main__":
    raise SystemExit(main())
