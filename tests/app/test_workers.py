"""Worker utilities: results on the GUI thread, progress, cancel, newest request wins."""
from __future__ import annotations

import threading
import time

import pytest
import shiboken6
from PySide6.QtCore import QObject, QThread

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
