"""A real, non-editable install finds the embedded resources from any directory.

Builds a wheel from a copy of the source tree (the checkout is never written), installs
it into a fresh venv and runs a snippet from an unrelated directory. Takes ~30 s; it runs
in CI on purpose, because a missing package-data rule only shows up this way.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

SOURCES = ("pyproject.toml", "README.md", "forma_gui", "resources")

SNIPPET = textwrap.dedent("""
    import sys, sysconfig
    from pathlib import Path
    import forma_gui
    from forma_gui._resources import default_tokenizer_path
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    path = default_tokenizer_path().resolve()
    assert Path(forma_gui.__file__).resolve().is_relative_to(site), forma_gui.__file__
    assert path.is_relative_to(site), path
    assert path.is_file() and (path.parent / "vocab.bpe").is_file(), path
    tok = forma_gui.load_tokenizer(path)
    assert tok.vocab_size == 50257, tok.vocab_size
    assert tok.encode("Hello world") == [15496, 995], tok.encode("Hello world")
    print("OK", path)
""")


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(900)
def test_wheel_ships_default_vocabulary(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for name in SOURCES:
        item = REPO / name
        if item.is_dir():
            shutil.copytree(item, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(item, src / name)
    built = _run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(tmp_path / "dist")], src)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("forma_gui-*.whl")

    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    installed = _run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = _run([str(python), "-c", SNIPPET], elsewhere)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.startswith("OK")
