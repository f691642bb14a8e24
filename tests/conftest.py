"""Shared fixtures: where the real test data lives, and Qt in offscreen mode."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
from hypothesis import settings

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _keep_freed_memory() -> None:
    """glibc only, for this test process: every thread allocates from one heap, and what is
    freed stays in it (no mmap'd blocks, no trimming).

    The VMs these tests run on hand memory the guest frees back to their host a few seconds
    later (virtio_balloon's free page reporting), and the next first touch of such a page
    costs ~15 µs instead of ~0.5 (measured here: 200 MB touched at 14.8 µs a page, again at
    once 0.66, after 3 s idle 10.1, after 6 s 15.6). A 10 MB paste makes 10-40 MB strings,
    clipboard bytes and token columns, each in one C call that holds the GIL; with cold pages
    each such call took 60-260 ms (perf: clear_page_erms under QMimeData::data,
    PyUnicode_Join, array growth), and tests/app/test_responsiveness measured the host's
    page faults rather than the app (5 of 5 full tests/app runs over its 100 ms bound on
    12-01, 46 ms with memory kept warm). A desktop has no such driver; the app is unchanged.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc: nothing to do
        return
    m_trim_threshold, m_mmap_max, m_arena_max = -1, -4, -8  # malloc.h
    mallopt(m_arena_max, 1)
    mallopt(m_mmap_max, 0)
    mallopt(m_trim_threshold, 2**31 - 1)


_keep_freed_memory()

REPO = Path(__file__).resolve().parent.parent
MAX_EXAMPLES = int(os.environ.get("MAX_EXAMPLES", "100"))

# Tests never write into the working directory: no example database in .hypothesis/.
settings.register_profile("forma", database=None)
settings.load_profile("forma")


def _data_root() -> Path:
    env = os.environ.get("FORMA_TEST_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


def data_file(*parts: str) -> Path:
    """Path of a file in the real test data; fail under CI, skip elsewhere, when missing."""
    path = _data_root().joinpath(*parts)
    if not path.exists():
        msg = f"test data missing: {path} (set FORMA_TEST_DATA)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return data_file()
