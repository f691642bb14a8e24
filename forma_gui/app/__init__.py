"""The Qt application: the only package that imports PySide6 and pyqtgraph.

`forma_gui.app.MainWindow` is imported on first use, so `import forma_gui.app` stays cheap.
"""
from __future__ import annotations

__all__ = ["MainWindow"]


def __getattr__(name: str):
    if name == "MainWindow":
        from forma_gui.app.main_window import MainWindow

        return MainWindow
    raise AttributeError(f"module 'forma_gui.app' has no attribute {name!r}")
