"""One module per state type, each registered in the handler table, and one test file per engine
module (the import-circle, line-limit and no-CLI checks of the whole package are in
tests/test_imports.py)."""
from __future__ import annotations

import ast
from pathlib import Path

import flowctl.engine

ENGINE = Path(flowctl.engine.__file__).resolve().parent
TESTS = Path(__file__).resolve().parent  # tests/engine

#: engine modules without a test file of their own, and why
NO_TEST_FILE = {
    "__init__": "the package's re-exports",
    "states/__init__": "the HANDLERS table, checked below",
    "runner": "a re-export shim: the machinery's old import path (lifecycle, cancel, loop, result)",
}


def test_each_state_type_has_its_own_module_and_table_entry():
    from flowctl.definition.model import STATE_FIELDS, STATE_MODELS
    from flowctl.engine.states import HANDLERS

    assert set(HANDLERS) == set(STATE_FIELDS) == set(STATE_MODELS)
    modules = {fn.__module__.rsplit(".", 1)[1] for fn in HANDLERS.values()}
    assert modules == {"task", "choice", "pass_", "review", "wait", "parallel", "map", "subflow", "terminal", "llm", "agent"}


def _modules() -> list:
    """``engine/X.py`` -> ``"X"``, ``engine/states/X.py`` -> ``"states/X"``."""
    found = [p.stem for p in ENGINE.glob("*.py")] + [f"states/{p.stem}" for p in (ENGINE / "states").glob("*.py")]
    return sorted(found)


def expected_test_file(module: str) -> Path:
    """``tests/engine/test_X.py``; a state type's: ``tests/engine/states/test_state_X.py`` (``pass_``:
    ``test_state_pass.py``), unique basenames for pytest's default import mode."""
    if module.startswith("states/"):
        return TESTS / "states" / f"test_state_{module.split('/', 1)[1].rstrip('_')}.py"
    return TESTS / f"test_{module}.py"



def test_every_engine_module_has_its_test_file():
    missing = [f"{m}.py -> {expected_test_file(m).relative_to(TESTS.parent)}" for m in _modules()
               if m not in NO_TEST_FILE and not expected_test_file(m).is_file()]
    assert missing == [], "engine modules without their test file: " + ", ".join(missing)


def test_the_exceptions_are_real_modules_and_the_shim_defines_nothing():
    assert set(NO_TEST_FILE) <= set(_modules()), set(NO_TEST_FILE) - set(_modules())
    tree = ast.parse((ENGINE / "runner.py").read_text())
    defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    assert defined == [], f"runner.py defines {defined}: it is no longer a pure re-export and needs tests/engine/test_runner.py"


def test_test_file_basenames_are_unique_under_tests():
    names = [p.name for p in TESTS.parent.rglob("test_*.py")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []
