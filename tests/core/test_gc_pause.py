"""`gc_paused`: one pause for the whole package, nestable across threads."""
from __future__ import annotations

import gc
import threading

import pytest

from forma_gui.core.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def _collector_on():
    gc.enable()
    yield
    gc.enable()


def _in_thread(enter: threading.Event, leave: threading.Event, settle: bool) -> threading.Thread:
    def run():
        with gc_paused(settle=settle):
            enter.set()
            leave.wait(10)
    thread = threading.Thread(target=run)
    thread.start()
    assert enter.wait(10)
    return thread


@pytest.mark.parametrize("first_settles", [True, False])
def test_overlapping_pauses_in_two_threads_resume_once_the_last_ends(first_settles):
    in_a, leave_a, in_b, leave_b = (threading.Event() for _ in range(4))
    a = _in_thread(in_a, leave_a, first_settles)
    b = _in_thread(in_b, leave_b, not first_settles)
    assert not gc.isenabled()
    leave_a.set()
    a.join(10)
    assert not gc.isenabled()  # b is still building its objects
    leave_b.set()
    b.join(10)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with gc_paused():
        with gc_paused(settle=False):
            pass
    assert not gc.isenabled()


def _young(obj) -> bool:
    return any(o is obj for o in gc.get_objects(generation=0))


def test_settling_moves_what_the_pause_built_out_of_the_young_generation():
    gc.collect()  # (counts start at 0: no young collection runs before the checks)
    with gc_paused(settle=False):
        kept = [[i] for i in range(100)]
    assert _young(kept)  # an encoder's small batch: only the collector was off
    with gc_paused():
        settled = [[i] for i in range(100)]
    assert not _young(settled)
    assert kept and settled
