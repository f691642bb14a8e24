"""Worker utilities: results on the GUI thread, progress, cancel, newest request wins."""
from __future__ import annotations

import threading
import time

import pytest
import shiboken6
from PySide6.QtCore import QObject, Qt, QThread

from forma_gui.app.workers import LatestRunner, gc_paused, run_in_thread


def test_result_arrives_on_the_gui_thread(qtbot):
    seen = {}
    main = QThread.currentThread()
    run_in_thread(lambda a, b: (threading.get_ident(), a + b), 2, 3,
                  on_done=lambda r: seen.update(result=r, thread=QThread.currentThread()))
    qtbot.waitUntil(lambda: "result" in seen)
    worker_ident, total = seen["result"]
    assert total == 5
    assert worker_ident != threading.get_ident()
    assert seen["thread"] is main


def test_failure_is_reported(qtbot):
    errors = []
    run_in_thread(lambda: 1 / 0, on_error=errors.append)
    qtbot.waitUntil(lambda: bool(errors))
    assert isinstance(errors[0], ZeroDivisionError)
    assert "ZeroDivisionError" in errors[0].__traceback_text__


def test_generator_reports_progress_and_can_be_cancelled(qtbot):
    progress, outcome = [], []
    release = threading.Event()

    def job():
        for i in range(1000):
            yield i, 1000
            if i == 3:
                release.wait(5)
        return "finished"

    worker = run_in_thread(job, on_done=outcome.append, on_progress=progress.append,
                           on_cancel=lambda: outcome.append("cancelled"))
    qtbot.waitUntil(lambda: len(progress) >= 3)
    worker.cancel()
    release.set()
    qtbot.waitUntil(lambda: bool(outcome))
    assert outcome == ["cancelled"]
    assert progress == sorted(progress) and 0 <= progress[0] < 0.01


def test_generator_return_value_is_the_result(qtbot):
    outcome = []

    def job():
        yield 0.5
        return 42

    run_in_thread(job, on_done=outcome.append)
    qtbot.waitUntil(lambda: bool(outcome))
    assert outcome == [42]


def test_latest_request_wins(qtbot):
    runner = LatestRunner()
    results, discarded = [], []
    runner.finished.connect(lambda tag, result: results.append((tag, result)))
    gate = threading.Event()

    def slow(x):
        gate.wait(5)
        return x * 10

    runner.submit(slow, 1, tag="first", on_discard=discarded.append)
    for i in range(2, 6):
        runner.submit(slow, i, tag=f"request {i}")
    gate.set()
    qtbot.waitUntil(lambda: not runner.busy, timeout=10_000)
    assert results == [("request 5", 50)]
    assert discarded == [10]  # the stale result was handed back for clean-up


def test_cancel_delivers_nothing(qtbot):
    runner = LatestRunner()
    results = []
    runner.finished.connect(lambda tag, result: results.append(result))
    runner.submit(time.sleep, 0.05)
    runner.cancel()
    qtbot.waitUntil(lambda: not runner.busy, timeout=5_000)
    assert results == []


def test_a_deleted_owner_is_not_called(qtbot):
    class Owner(QObject):
        def __init__(self):
            super().__init__()
            self.runner = LatestRunner(self)
            self.runner.finished.connect(self.got)

        def got(self, tag, result):
            raise AssertionError("called after deletion")

    owner = Owner()
    gate = threading.Event()
    owner.runner.submit(gate.wait, 5)
    runner = owner.runner
    shiboken6.delete(owner)
    gate.set()
    qtbot.wait(200)  # the worker finishes; nothing may touch the deleted runner
    assert not shiboken6.isValid(runner)


@pytest.mark.parametrize("nested", [False, True])
def test_gc_paused_restores_the_collector(nested):
    import gc

    assert gc.isenabled()
    with gc_paused():
        if nested:
            with gc_paused():
                assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_workers_wait_between_slices_while_the_gui_thread_is_busy(qtbot):
    """give_gui_priority: a worker at a slice boundary waits while the GUI thread works on
    something marked busy (a posted event, a timer's slice), goes on at once when the event
    loop has moved on, and never waits longer than the limit."""
    from PySide6.QtCore import QMetaObject, QTimer, Slot

    from forma_gui.app import workers
    from forma_gui.core import slices

    workers.give_gui_priority()
    assert slices._pause is workers.pause_for_gui
    waits: dict[str, float] = {}

    def timed_pause(label: str) -> None:
        started = time.perf_counter()
        slices.pause()  # what every sliced pass in core calls between two slices
        waits[label] = time.perf_counter() - started

    def busy(label: str) -> None:  # the GUI thread works for 60 ms, a worker pauses meanwhile
        worker = threading.Thread(target=timed_pause, args=(label,))
        worker.start()
        time.sleep(0.06)
        worker.join()

    class Receiver(QObject):
        @Slot()
        def handle(self) -> None:  # a posted event, as a worker's result is
            workers.mark_gui_busy()
            busy("posted")

    receiver = Receiver()
    QMetaObject.invokeMethod(receiver, "handle", Qt.ConnectionType.QueuedConnection)
    qtbot.waitUntil(lambda: "posted" in waits, timeout=5000)

    def timer_slice() -> None:
        workers.mark_gui_busy()
        busy("timer")
    QTimer.singleShot(0, timer_slice)
    qtbot.waitUntil(lambda: "timer" in waits, timeout=5000)
    # the GUI thread joined each worker before it could idle: the waits ended at the limit
    for label in ("posted", "timer"):
        assert 0.9 * workers.GUI_FIRST_MAX_WAIT_SECONDS <= waits[label] < 0.055, label

    qtbot.wait(50)  # the event loop is waiting for events now
    idle = threading.Thread(target=timed_pause, args=("idle",))
    idle.start()
    idle.join()
    assert waits["idle"] < workers.GUI_FIRST_MAX_WAIT_SECONDS / 2
    started = time.perf_counter()
    workers.mark_gui_busy()
    workers.pause_for_gui()  # on the GUI thread itself: never waits
    assert time.perf_counter() - started < 0.01


def test_gc_paused_keeps_what_others_froze_frozen():
    """Objects frozen before a pause (by a host, or the test run) stay frozen after it: the
    end of a pause moves what it allocated out of the young generations without handing the
    frozen heap back to the collector. With nothing frozen, nothing stays frozen."""
    import gc

    gc.collect()
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        assert before > 0
        with gc_paused():
            kept = [[k] for k in range(1000)]  # noqa: F841 - alive across the pause's end
        assert gc.get_freeze_count() >= before + 1000
    finally:
        gc.unfreeze()
    with gc_paused():
        kept = [[k] for k in range(1000)]  # noqa: F841
    assert gc.get_freeze_count() == 0
