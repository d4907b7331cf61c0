"""The test helpers live in tests/support; the old module names still import the same objects, so
tests written before the move (on other branches) keep working until they are rewritten."""
from __future__ import annotations

import importlib

import pytest

import support


@pytest.mark.parametrize("name", ["enginekit", "flow_fixtures", "helpers", "pg", "testingkit"])
def test_the_old_module_name_gives_the_support_modules_objects(name):
    old = importlib.import_module(name)
    new = importlib.import_module(f"support.{name}")
    public = [k for k in vars(new) if not k.startswith("_") and getattr(vars(new)[k], "__module__", None) == new.__name__]
    assert public, f"support.{name} defines nothing public"
    for key in public:
        assert getattr(old, key) is getattr(new, key), key


def test_support_paths_point_at_the_repository():
    from support.helpers import REPO

    assert (REPO / "pyproject.toml").is_file() and (REPO / "tests" / "support" / "helpers.py").is_file()
    assert support.__file__.endswith("tests/support/__init__.py")
