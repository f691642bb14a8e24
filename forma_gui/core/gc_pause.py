"""Pause Python's cyclic garbage collector while a job builds many objects that hold no cycles.

One pause for the whole package (core loaders, file readers, the app's workers): the pauses
nest and may overlap across threads, and the collector comes back once, when the last one
ends, and only if it was on when the first one began. (Each loader pausing on its own
re-enabled the collector while another thread's pause was still running.)
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_gc_lock = threading.Lock()
_gc_state = {"pauses": 0, "was_enabled": True, "settle": False}


@contextmanager
def gc_paused(settle: bool = True) -> Iterator[None]:
    """Suspend the cyclic GC (process-wide) for the duration; nestable, thread-safe.

    Building a few million objects makes the collector run full passes over all of them,
    each one holding the GIL for 100+ ms: the window freezes although the work is in a
    worker. Reference counting still frees everything that has no cycles meanwhile.

    At the end, what was allocated meanwhile is moved to the oldest generation (freeze then
    unfreeze: two list splices) instead of staying young, where the first collection after
    the pause would scan all of it in one go (~100 ms after a 10 MB encode); the next full
    collection, which runs anyway, takes it along. When something was frozen before (a host
    that embeds the app, the test run), unfreezing would hand all of that back to the
    collector too (600k objects of collected test modules: 250-300 ms per full collection),
    so what was allocated meanwhile is frozen with it instead. That settling happens when
    any of the overlapping pauses asked for it: a hot path that pauses for small batches
    (an encoder filling its cache) passes settle=False and only turns the collector off.
    """
    with _gc_lock:
        if _gc_state["pauses"] == 0:
            _gc_state["was_enabled"] = gc.isenabled()
            gc.disable()
        _gc_state["pauses"] += 1
        _gc_state["settle"] = _gc_state["settle"] or settle
    try:
        yield
    finally:
        with _gc_lock:
            _gc_state["pauses"] -= 1
            if _gc_state["pauses"] == 0:
                settle, _gc_state["settle"] = _gc_state["settle"], False
                if _gc_state["was_enabled"]:
                    if settle:
                        frozen_before = gc.get_freeze_count()
                        gc.freeze()
                        if not frozen_before:
                            gc.unfreeze()
                    gc.enable()
