"""The Qt application: the only package that imports PySide6 and pyqtgraph.

`forma_gui.app.MainWindow` is imported on first use, so `import forma_gui.app` stays cheap.
"""
from __future__ import annotations

__all__ = ["MainWindow", "configure_pyqtgraph"]


def configure_pyqtgraph():
    """Import pyqtgraph once, with the options every view relies on; returns the module.

    Views are built lazily, so whichever needs pyqtgraph first gets here first: call it
    instead of `import pyqtgraph` at module level (which would also slow the launch).
    """
    import pyqtgraph

    if not getattr(pyqtgraph, "_forma_configured", False):
        pyqtgraph.setConfigOptions(imageAxisOrder="row-major", antialias=True)
        pyqtgraph._forma_configured = True
    return pyqtgraph


def __getattr__(name: str):
    if name == "MainWindow":
        from forma_gui.app.main_window import MainWindow

        return MainWindow
    raise AttributeError(f"module 'forma_gui.app' has no attribute {name!r}")
