"""The `>>>` examples in the core and formats docstrings are run, so they stay true."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import forma_gui.core
import forma_gui.formats

MODULES = [f"{package.__name__}.{info.name}" for package in (forma_gui.core, forma_gui.formats)
           for info in pkgutil.iter_modules(package.__path__)]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0
