"""One module per state type, each registered in the handler table (the import-circle, line-limit
and no-CLI checks of the whole package are in tests/test_imports.py)."""
from __future__ import annotations


def test_each_state_type_has_its_own_module_and_table_entry():
    from flowctl.definition.model import STATE_FIELDS, STATE_MODELS
    from flowctl.engine.states import HANDLERS

    assert set(HANDLERS) == set(STATE_FIELDS) == set(STATE_MODELS)
    modules = {fn.__module__.rsplit(".", 1)[1] for fn in HANDLERS.values()}
    assert modules == {"task", "choice", "pass_", "review", "wait", "parallel", "map", "subflow", "terminal"}
