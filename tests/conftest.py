"""Shared fixtures: where the real test data lives, and Qt in offscreen mode."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

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
