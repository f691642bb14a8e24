"""Run long work off the GUI thread: one small API for every view.

Four pieces, all used from the GUI thread:

* ``run_in_thread(fn, *args, on_done=..., on_error=..., on_progress=...) -> Worker``
  runs ``fn(*args)`` on the global QThreadPool and delivers the outcome back on the GUI
  thread. If ``fn`` is a generator function, each value it yields is progress
  (``(done, total)`` or a fraction) and its ``return`` value is the result; between two
  yields the worker checks its abort flag, so ``worker.cancel()`` stops it promptly.
* ``Worker`` is the QRunnable behind it; its ``signals`` QObject carries ``finished``,
  ``failed``, ``progressed`` and ``cancelled``.
* ``gc_paused()`` suspends Python's cyclic garbage collector while a job builds millions
  of small objects, so that its full passes do not stall the GUI thread.
* ``LatestRunner`` keeps at most one job running and only the newest request pending:
  while the user types, older requests are dropped and only the newest result is
  delivered (``finished(tag, result)``). Stale results that hold resources can be handed to
  ``on_discard`` (e.g. to close a memory map).

Starting the first job shortens the interpreter's switch interval to 0.2 ms
(`share_gil_with_gui`): the GUI thread needs the GIL for every call Qt makes into Python, and
with the default 5 ms one table repaint waited seconds behind a busy worker. It also makes
workers wait, between slices of their work, while the GUI thread is handling events
(`give_gui_priority`).

Callbacks are connected through QObjects that live on the GUI thread, so they always run
there, whatever thread emitted the signal; a callback bound to a QObject that Qt has
deleted meanwhile (a closed view) is skipped.

>>> runner = LatestRunner()                                    # doctest: +SKIP
>>> runner.finished.connect(lambda tag, tokens: view.show(tokens))  # doctest: +SKIP
>>> runner.submit(tokenizer.segment, text, tag=text)           # doctest: +SKIP
"""
from __future__ import annotations

import inspect
import logging
import sys
import threading
import traceback
from collections import deque
from typing import Any, Callable

import shiboken6
from PySide6.QtCore import (QAbstractEventDispatcher, QCoreApplication, QObject, QRunnable, QThread,
                            QThreadPool, Qt, Signal, Slot)

from forma_gui.core import slices
from forma_gui.core.gc_pause import gc_paused  # noqa: F401 - re-exported for the views

log = logging.getLogger(__name__)


class Cancelled(Exception):
    """Raised inside a job (or by ``Worker.check``) when its abort flag is set."""


class WorkerSignals(QObject):
    """What a worker reports. Lives on the thread that created the worker (the GUI thread)."""

    finished = Signal(object)        # the result
    failed = Signal(object)          # the exception (with __traceback_text__ set)
    progressed = Signal(float)       # fraction in [0, 1], or -1 when unknown
    cancelled = Signal()


class Worker(QRunnable):
    """A QRunnable that calls ``fn(*args, **kwargs)`` and reports through ``self.signals``."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.signals = WorkerSignals()
        self._abort = threading.Event()
        self.setAutoDelete(False)  # Python keeps it alive (see _LIVE) until delivery

    def cancel(self) -> None:
        """Ask the job to stop at its next yield; its result will not be delivered."""
        self._abort.set()

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    def check(self) -> None:
        """Raise Cancelled if cancel() was called; for jobs that poll instead of yielding."""
        if self._abort.is_set():
            raise Cancelled()

    def run(self) -> None:  # noqa: D102 - Qt override, runs on a pool thread
        try:
            result = self._call()
        except Cancelled:
            self.signals.cancelled.emit()
        except Exception as e:  # noqa: BLE001 - every failure is reported, none is lost
            e.__traceback_text__ = traceback.format_exc()
            self.signals.failed.emit(e)
        else:
            # A job that ran to the end reports its result even if cancelled meanwhile:
            # the receiver decides whether to use it or release it (e.g. close a file).
            self.signals.finished.emit(result)

    def _call(self) -> Any:
        out = self.fn(*self.args, **self.kwargs)
        if not inspect.isgenerator(out):
            return out
        try:
            while True:
                self.check()
                pause_for_gui()
                self.signals.progressed.emit(_fraction(next(out)))
        except StopIteration as stop:
            return stop.value
        finally:
            out.close()


def _fraction(value: Any) -> float:
    """A progress value: (done, total) or a number -> fraction, -1 when unknown."""
    if isinstance(value, tuple) and len(value) == 2:
        done, total = value
        return min(1.0, done / total) if total else -1.0
    return float(value) if isinstance(value, (int, float)) else -1.0


class _Relay(QObject):
    """Receives a worker's signals on the GUI thread, calls the callbacks, then lets go."""

    def __init__(self, worker: Worker, on_done, on_error, on_progress, on_cancel,
                 deliver_cancelled: bool = False) -> None:
        super().__init__()
        self.worker = worker
        self.deliver_cancelled = deliver_cancelled
        self.callbacks = (on_done, on_error, on_progress, on_cancel)
        s = worker.signals
        s.finished.connect(self._done)
        s.failed.connect(self._failed)
        s.progressed.connect(self._progressed)
        s.cancelled.connect(self._cancelled)

    @Slot(object)
    def _done(self, result: Any) -> None:
        mark_gui_busy()  # what the result is handed to runs now
        if self.worker.aborted and not self.deliver_cancelled:
            self._end(3)
        else:
            self._end(0, result)

    @Slot(object)
    def _failed(self, error: BaseException) -> None:
        if self.callbacks[1] is None:
            log.error("worker failed: %s", getattr(error, "__traceback_text__", error))
        self._end(1, error)

    @Slot(float)
    def _progressed(self, fraction: float) -> None:
        mark_gui_busy()  # the worker's next slice waits for this turn
        if self.callbacks[2] is not None and not self.worker.aborted and _alive(self.callbacks[2]):
            self.callbacks[2](fraction)

    @Slot()
    def _cancelled(self) -> None:
        self._end(3)

    def _end(self, which: int, *args: Any) -> None:
        _LIVE.discard(self)
        # The pool thread may still be unwinding run() when this runs: keep the worker a
        # little longer than that instead of freeing it under its feet.
        _RETIRED.append(self.worker)
        callback = self.callbacks[which]
        if callback is not None and _alive(callback):
            callback(*args)


def _alive(callback: Callable) -> bool:
    """False for a bound method of a QObject that Qt has deleted meanwhile (a closed view)."""
    owner = getattr(callback, "__self__", None)
    return not isinstance(owner, QObject) or shiboken6.isValid(owner)


#: relays (and through them workers) in flight; dropped on delivery, on the GUI thread
_LIVE: set[_Relay] = set()
_RETIRED: deque[Worker] = deque(maxlen=16)


def run_in_thread(fn: Callable[..., Any], *args: Any,
                  on_done: Callable[[Any], None] | None = None,
                  on_error: Callable[[BaseException], None] | None = None,
                  on_progress: Callable[[float], None] | None = None,
                  on_cancel: Callable[[], None] | None = None,
                  pool: QThreadPool | None = None, **kwargs: Any) -> Worker:
    """Start ``fn(*args, **kwargs)`` on a pool thread; callbacks run on the GUI thread.

    After ``worker.cancel()`` only ``on_cancel`` is called, even if the job ran to its end.
    """
    callbacks = (on_done, on_error, on_progress, on_cancel)
    return _start(Worker(fn, *args, **kwargs), pool, callbacks)


#: how long a thread may keep the GIL while another one waits for it (CPython's default: 5 ms)
GIL_SWITCH_SECONDS = 0.0002


def share_gil_with_gui() -> None:
    """Let a thread that waits for the GIL have it within 0.2 ms instead of 5 ms.

    Qt calls into Python for every virtual method of a Python subclass it uses, hundreds of
    times for one repaint of a table, and each call needs the GIL. While a worker runs Python
    code, each of those waits for the worker's switch interval: 5 ms each made one repaint of
    the 262k-vocabulary table take 2-3 s while the vocabulary was being indexed. Workers lose
    little: the interpreter only switches when another thread is actually waiting.
    """
    if sys.getswitchinterval() > GIL_SWITCH_SECONDS:
        sys.setswitchinterval(GIL_SWITCH_SECONDS)


#: longest a worker waits for the GUI thread to finish its events before its next slice
GUI_FIRST_MAX_WAIT_SECONDS = 0.03

_gui_idle = threading.Event()   # cleared by mark_gui_busy, set again by the next loop iteration
_gui_idle.set()
_watching: list = []            # the dispatcher connections, made once


def give_gui_priority() -> None:
    """Hold workers back, between two slices of their work, while the GUI thread is busy.

    With two cores, a worker running Python gets the GIL every other switch interval, so a
    repaint that makes thousands of calls into Python (the token canvas, a table) takes two
    to five times as long as on an idle machine: 16 ms of painting became 60-80 ms.

    Heavy GUI work says so: `mark_gui_busy()` at the start of a repaint of the token canvas
    or a table, a slice of layout or paste, a worker's result being delivered. The mark lasts
    until the event loop starts its next iteration (the dispatcher's `awake` and
    `aboutToBlock`; Qt's glib and unix dispatchers emit them in different places relative to
    the wait, but both before the next iteration's events). A worker reaching a slice
    boundary meanwhile (`pause_for_gui`, called by core.slices and between the steps of a
    generator job) waits until then, at most `GUI_FIRST_MAX_WAIT_SECONDS`: a GUI that never
    rests slows workers down but never stops them.
    """
    if _watching:
        return
    dispatcher = QAbstractEventDispatcher.instance(QThread.currentThread())
    if dispatcher is None or QThread.currentThread() is not QCoreApplication.instance().thread():
        return
    direct = Qt.ConnectionType.DirectConnection
    dispatcher.awake.connect(_gui_idle.set, direct)
    dispatcher.aboutToBlock.connect(_gui_idle.set, direct)
    _watching.append(dispatcher)
    slices.set_pause(pause_for_gui)


def mark_gui_busy() -> None:
    """The GUI thread starts a stretch of heavy work (a repaint, a slice): workers pause at
    their next slice boundary until this iteration of the event loop is over."""
    _gui_idle.clear()


class PaintMarksBusy:
    """Mixin for a view whose repaint calls into Python many times (a model's data() per cell
    and role): each repaint holds workers back (`mark_gui_busy`)."""

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        mark_gui_busy()
        super().paintEvent(event)  # type: ignore[misc]


def pause_for_gui() -> None:
    """In a worker: wait (briefly) while the GUI thread handles events. Free on the GUI thread."""
    if not _gui_idle.is_set() and threading.current_thread() is not threading.main_thread():
        _gui_idle.wait(GUI_FIRST_MAX_WAIT_SECONDS)


def _start(worker: Worker, pool: QThreadPool | None, callbacks: tuple,
           deliver_cancelled: bool = False) -> Worker:
    share_gil_with_gui()
    give_gui_priority()
    _LIVE.add(_Relay(worker, *callbacks, deliver_cancelled=deliver_cancelled))
    (pool or QThreadPool.globalInstance()).start(worker)
    return worker


class LatestRunner(QObject):
    """At most one job running, at most one pending; only the newest result is delivered.

    ``submit`` while a job runs cancels it (a generator job stops at its next yield) and
    queues the new request, replacing any request queued before. When the running job
    ends its result is discarded and the queued one starts.
    """

    finished = Signal(object, object)   # (tag, result) of the newest request
    failed = Signal(object, object)     # (tag, exception)
    progressed = Signal(float)
    busy_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None, *, pool: QThreadPool | None = None) -> None:
        super().__init__(parent)
        self._pool = pool
        self._running: tuple[Worker, Any, Callable | None] | None = None
        self._pending: tuple[Callable, tuple, dict, Any, Callable | None] | None = None

    @property
    def busy(self) -> bool:
        return self._running is not None

    def submit(self, fn: Callable[..., Any], *args: Any, tag: Any = None,
               on_discard: Callable[[Any], None] | None = None, **kwargs: Any) -> None:
        """Run ``fn(*args, **kwargs)`` as the newest request; ``tag`` comes back with the result."""
        self._pending = (fn, args, kwargs, tag, on_discard)
        if self._running is None:
            self._start_pending()
        else:
            self._running[0].cancel()

    def cancel(self) -> None:
        """Drop the queued request and stop the running one; nothing more is delivered."""
        self._pending = None
        if self._running is not None:
            self._running[0].cancel()

    def _start_pending(self) -> None:
        fn, args, kwargs, tag, on_discard = self._pending
        self._pending = None
        callbacks = (self._done, self._failed, self._progressed, self._cancelled)
        worker = _start(Worker(fn, *args, **kwargs), self._pool, callbacks,
                        deliver_cancelled=True)
        was_busy = self._running is not None
        self._running = (worker, tag, on_discard)
        if not was_busy:
            self.busy_changed.emit(True)

    def _done(self, result: Any) -> None:
        if not shiboken6.isValid(self):  # the owning view was closed while the job ran
            return
        worker, tag, on_discard = self._running
        if self._pending is None and not worker.aborted:
            self._finish()
            self.finished.emit(tag, result)
            return
        if on_discard is not None:
            on_discard(result)
        self._cancelled()

    def _failed(self, error: BaseException) -> None:
        if not shiboken6.isValid(self):
            return
        worker, tag, _ = self._running
        if worker.aborted:
            self._cancelled()
        elif self._pending is None:
            self._finish()
            self.failed.emit(tag, error)
        else:
            self._start_pending()

    def _progressed(self, fraction: float) -> None:
        if self._pending is None and shiboken6.isValid(self):
            self.progressed.emit(fraction)

    def _cancelled(self) -> None:
        if self._pending is not None:
            self._start_pending()
        else:
            self._finish()

    def _finish(self) -> None:
        self._running = None
        self.busy_changed.emit(False)


