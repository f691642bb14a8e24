"""The main window: a tab per view, File ▸ Open, recent files, drag-and-drop, status bar.

Views are listed in VIEWS as "module:Class" and built when their tab is first shown, so
launching imports neither pyqtgraph nor any heavy view. A view whose module does not exist
(yet) is left out with a logged warning.

Opening a file runs in a worker. Failures go through one handler (Session.error_raised ->
`_show_error`): one dialog naming the file, the problem and the offset, and whatever was
open before stays open, because the session is only updated after everything loaded.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QFileDialog, QLabel, QMainWindow, QMessageBox, QProgressBar,
                               QTabWidget, QVBoxLayout, QWidget)

from forma_gui.app import configure_pyqtgraph
from forma_gui.app.opening import Opened, close_unused, describe_error, load_path
from forma_gui.app.state import Session
from forma_gui.app.workers import LatestRunner, gc_paused

log = logging.getLogger(__name__)

#: tab title -> "module:Class"; each class is constructed as View(session, parent)
VIEWS = {
    "Tokenize": "forma_gui.app.tokenize_view:TokenizeView",
    "Vocabulary": "forma_gui.app.vocab_view:VocabView",
    "Stream": "forma_gui.app.stream_view:StreamPlayer",
    "Tensors": "forma_gui.app.model_view:ModelView",
    "Layout": "forma_gui.app.layout_view:LayoutView",
    "Quantization": "forma_gui.app.quant_view:QuantView",
    "Train": "forma_gui.app.train_view:TrainView",
}
#: views that never touch pyqtgraph (everything else gets it configured before import)
LIGHT_VIEWS = {"forma_gui.app.tokenize_view", "forma_gui.app.vocab_view"}

RECENT_KEY = "recentFiles"
MAX_RECENT = 10
FILE_FILTER = ("Models and tokenizers (*.gguf *.safetensors *.json *.model *.model.v3 *.v3 "
               "*.tiktoken *.bpe *.txt);;All files (*)")


class MainWindow(QMainWindow):
    """forma's window over one Session; `open_path(path)` loads a file or folder."""

    def __init__(self, session: Session | None = None, settings: QSettings | None = None,
                 parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.session = session or Session(self)
        self.settings = settings if settings is not None else QSettings("forma_gui", "forma-gui")
        self.last_error: str | None = None
        self.views: dict[str, QWidget] = {}
        self._view_specs: dict[int, tuple[str, str]] = {}
        self._error_box: QMessageBox | None = None
        self._opening: str | None = None
        self._loader = LatestRunner(self)
        self._loader.finished.connect(self._on_loaded)
        self._loader.failed.connect(self._on_load_failed)
        self.setWindowTitle("forma")
        self.setAcceptDrops(True)
        self.resize(1400, 900)
        self._build_tabs()
        self._build_menus()
        self._build_status()
        self.session.error_raised.connect(self._show_error)
        self.session.status_posted.connect(lambda msg: self.statusBar().showMessage(msg, 6000))
        self.session.tokenizer_changed.connect(lambda _t: self._update_status())
        self.session.weights_changed.connect(lambda _w: self._update_status())

    # ---- views ------------------------------------------------------------------------
    def _build_tabs(self) -> None:
        self.tabs = QTabWidget(self)
        self.tabs.setObjectName("viewTabs")
        self.tabs.setDocumentMode(True)
        for title, spec in VIEWS.items():
            module_name, class_name = spec.split(":")
            if not _module_exists(module_name):
                log.warning("view %s left out: module %s not found", title, module_name)
                continue
            page = QWidget(self.tabs)
            page.setObjectName(f"page{title}")
            QVBoxLayout(page).setContentsMargins(0, 0, 0, 0)
            index = self.tabs.addTab(page, title)
            self._view_specs[index] = (module_name, class_name)
        self.setCentralWidget(self.tabs)
        self.tabs.currentChanged.connect(self.ensure_view)
        if self.tabs.count():
            self.ensure_view(0)

    def ensure_view(self, index: int) -> QWidget | None:
        """Build the view of tab `index` if it does not exist yet; returns it."""
        title = self.tabs.tabText(index)
        if title in self.views or index not in self._view_specs:
            return self.views.get(title)
        module_name, class_name = self._view_specs[index]
        page = self.tabs.widget(index)
        try:
            if module_name not in LIGHT_VIEWS:
                configure_pyqtgraph()
            cls = getattr(importlib.import_module(module_name), class_name)
            view = cls(self.session, page)
        except Exception as e:  # noqa: BLE001 - one broken view must not take the window down
            log.warning("view %s failed to build", title, exc_info=True)
            view = QLabel(f"The {title} view could not be created:\n{type(e).__name__}: {e}", page)
            view.setAlignment(Qt.AlignmentFlag.AlignCenter)
        page.layout().addWidget(view)
        self.views[title] = view
        return view

    def view(self, title: str) -> QWidget | None:
        """The view under tab `title`, built on demand (None if that view is left out)."""
        for index in range(self.tabs.count()):
            if self.tabs.tabText(index) == title:
                return self.ensure_view(index)
        return None

    # ---- menus --------------------------------------------------------------------------
    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.open_action = self._action(file_menu, "&Open…", self._open_dialog, QKeySequence.StandardKey.Open)
        self.open_folder_action = self._action(file_menu, "Open &Folder…", self._open_folder_dialog,
                                               QKeySequence("Ctrl+Shift+O"))
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.recent_menu.setObjectName("recentMenu")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        self._fill_recent_menu()
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        view_menu = self.menuBar().addMenu("&View")
        for index in range(self.tabs.count()):
            action = self._action(view_menu, self.tabs.tabText(index),
                                  lambda _=False, i=index: self.tabs.setCurrentIndex(i),
                                  QKeySequence(f"Ctrl+{index + 1}"))
            action.setCheckable(False)

    def _action(self, menu, text: str, slot, shortcut=None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(shortcut)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _open_dialog(self) -> None:
        start = os.path.dirname(self.recent_files()[0]) if self.recent_files() else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open a model or tokenizer", start, FILE_FILTER)
        if path:
            self.open_path(path)

    def _open_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a model folder")
        if path:
            self.open_path(path)

    # ---- recent files ----------------------------------------------------------------------
    def recent_files(self) -> list[str]:
        value = self.settings.value(RECENT_KEY, [])
        if isinstance(value, str):  # QSettings returns a bare string for one-item lists
            value = [value]
        return [str(v) for v in value or []]

    def _remember(self, path: str) -> None:
        recent = [path] + [p for p in self.recent_files() if p != path]
        self.settings.setValue(RECENT_KEY, recent[:MAX_RECENT])
        self.settings.sync()

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        recent = self.recent_files()
        for i, path in enumerate(recent):
            action = self.recent_menu.addAction(f"&{(i + 1) % 10}  {path}")
            action.triggered.connect(lambda _=False, p=path: self.open_path(p))
        if recent:
            self.recent_menu.addSeparator()
            self.recent_menu.addAction("Clear list", self._clear_recent)
        self.recent_menu.setEnabled(bool(recent))

    def _clear_recent(self) -> None:
        self.settings.remove(RECENT_KEY)
        self._fill_recent_menu()

    # ---- opening ---------------------------------------------------------------------------
    def open_path(self, path: str | os.PathLike) -> None:
        """Load a file or folder in a worker; the session changes only if it all succeeds."""
        path = os.fspath(path)
        self._opening = path
        self.statusBar().showMessage(f"Opening {path}…")
        self.busy.show()
        self._loader.submit(_load_paused, path, tag=path, on_discard=close_unused)

    def open_default(self) -> None:
        """Open the embedded GPT-2 vocabulary (what the app shows with no file)."""
        from forma_gui._resources import default_tokenizer_path

        self.open_path(default_tokenizer_path())

    @property
    def loading(self) -> bool:
        return self._loader.busy

    def _on_loaded(self, path: str, opened: Opened) -> None:
        self.busy.hide()
        self._opening = None
        if opened.tokenizer is not None:
            self.session.set_tokenizer(opened.tokenizer, path)
        else:
            self.session.path = path
        if not _is_default(path):
            self._remember(path)  # now, not a turn later: once loading ends the file is open
        # the weight views react in a turn of the event loop of their own: together with
        # the tokenizer views they kept the GUI thread busy for up to ~100 ms
        QTimer.singleShot(0, self, lambda: self._on_loaded_weights(path, opened))

    def _on_loaded_weights(self, path: str, opened: Opened) -> None:
        if opened.weights is not None or opened.tokenizer is not None:
            self.session.set_weights(opened.weights)
        self.statusBar().showMessage(opened.note or f"Opened {path}", 6000)
        self._update_status()

    def _on_load_failed(self, path: str, error: BaseException) -> None:
        self.busy.hide()
        self._opening = None
        self.statusBar().clearMessage()
        if not isinstance(error, (OSError, ValueError)):
            log.error("opening %s failed:\n%s", path, getattr(error, "__traceback_text__", error))
        self.session.error_raised.emit("Cannot open file", describe_error(path, error))
        if self.session.tokenizer is None and not _is_default(path):
            self.open_default()  # nothing was open before (a bad FILE argument): stay usable

    def _show_error(self, title: str, message: str) -> None:
        """The one place errors are shown: a single dialog, replaced if already up."""
        self.last_error = message
        log.warning("%s: %s", title, message)
        path = self.session.path
        still = "The embedded GPT-2 vocabulary" if path and _is_default(path) else path and Path(path).name
        detail = f"{still} is still open." if still else ""
        if self._error_box is None:
            self._error_box = QMessageBox(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, self)
            self._error_box.setObjectName("errorDialog")
            self._error_box.setWindowModality(Qt.WindowModality.WindowModal)
        box = self._error_box
        box.setWindowTitle(title)
        box.setText(message)
        box.setInformativeText(detail)
        box.open()

    # ---- status bar --------------------------------------------------------------------------
    def _build_status(self) -> None:
        bar = self.statusBar()
        self.busy = QProgressBar(self)
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(120)
        self.busy.setMaximumHeight(14)
        self.busy.hide()
        self.path_label = QLabel(self)
        self.path_label.setObjectName("statusPath")
        self.kind_label = QLabel(self)
        self.kind_label.setObjectName("statusKind")
        self.vocab_label = QLabel(self)
        self.vocab_label.setObjectName("statusVocab")
        bar.addPermanentWidget(self.busy)
        bar.addPermanentWidget(self.path_label, 1)
        bar.addPermanentWidget(self.kind_label)
        bar.addPermanentWidget(self.vocab_label)
        self._update_status()

    def _update_status(self) -> None:
        s = self.session
        path = s.path or ""
        shown = "embedded GPT-2 vocabulary" if path and _is_default(path) else path
        self.path_label.setText(shown)
        self.path_label.setToolTip(path)
        tok = s.tokenizer
        kinds = []
        if tok is not None:
            kinds.append(" ".join(x for x in (getattr(tok, "name", ""), tok.kind) if x))
        if s.weights is not None:
            count = _safe_len(getattr(s.weights, "tensors", None))
            kinds.append(f"{count:,} tensors" if count is not None else "weights")
        self.kind_label.setText(" · ".join(kinds))
        self.vocab_label.setText(f"{tok.vocab_size:,} tokens" if tok is not None else "no tokenizer")
        name = Path(path).name if path else ""
        self.setWindowTitle(f"{name} — forma" if name and not _is_default(path) else "forma")

    # ---- drag and drop -------------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:  # noqa: N802 - Qt override
        if _local_paths(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        self.dragEnterEvent(event)

    def dropEvent(self, event) -> None:  # noqa: N802 - Qt override
        paths = _local_paths(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.open_path(paths[0])


def _load_paused(path: str) -> Opened:
    """load_path with the GC paused: a 262k-token vocabulary is millions of new objects,
    and the collector's passes over them held the GIL for up to ~300 ms at a time."""
    with gc_paused():
        return load_path(path)


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _local_paths(mime) -> list[str]:
    if not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile()]


def _is_default(path: str) -> bool:
    try:
        from forma_gui._resources import default_tokenizer_path

        return Path(path).resolve() == default_tokenizer_path().resolve()
    except (OSError, ModuleNotFoundError):
        return False


def _safe_len(obj) -> int | None:
    try:
        return len(obj)
    except TypeError:
        return None
