"""A main window for a test: settings in tmp_path (the user's are never touched), shown."""
from __future__ import annotations

from PySide6.QtCore import QSettings

from forma_gui.app.main_window import MainWindow


def shown_window(qtbot, tmp_path, *, default: bool = True) -> MainWindow:
    """A shown MainWindow; with `default`, once the embedded GPT-2 vocabulary is open."""
    settings = QSettings(str(tmp_path / "forma-gui.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    if default:
        win.open_default()
        qtbot.waitUntil(lambda: win.session.tokenizer is not None and not win.loading, timeout=60_000)
    return win
