"""Modules split by concept (issue 16) keep every public name importable from the old module, as
the same object the new module defines, so callers and other branches need no change."""
from __future__ import annotations

import importlib

import pytest

#: old module -> {public name it had before the split: the module that defines it now}
MOVED = {
    "flowctl.check.checks": {
        "flow_graph": "flowctl.check.topology", "check_graph": "flowctl.check.topology",
        "child_flows": "flowctl.check.topology", "check_children": "flowctl.check.topology",
        "import_check": "flowctl.check.callables", "resolve_callable_problem": "flowctl.check.callables",
        **{n: "flowctl.check.checks" for n in (
            "RUN_SCOPE", "SCOPES", "iter_expressions", "check_references", "check_unused", "check_order",
            "check_expressions", "check_timing", "check_contracts", "check_sensitive", "policy_regex_problems",
            "check_policies", "check_values", "check_tool_inputs", "check_fail_states", "CHECKS", "validate")},
    },
    "flowctl.check.dataflow": {n: "flowctl.check.dataflow" for n in ("FlowData", "dataflow", "RAISE", "check_dataflow")},
    "flowctl.testing.coverage": {
        **{n: "flowctl.testing.coverage_items" for n in ("TRANSITIONS", "HANDLERS", "EDGES", "GATED", "Item",
                                                          "FlowCoverage")},
        **{n: "flowctl.testing.coverage" for n in ("items_of", "exercised", "compute", "table")},
        **{n: "flowctl.testing.suggest" for n in ("Suggestion", "suggest", "facts", "sample")},
    },
    "flowctl.testing.replay": {
        **{n: "flowctl.testing.recording" for n in ("ReplayStop", "Recording", "recording", "load_recording",
                                                     "load_children", "RecordedTools")},
        **{n: "flowctl.testing.replay" for n in ("ReplayResult", "replay", "diff_section", "render_section",
                                                  "add_to_diff")},
    },
    "flowctl.cli.commands._common": {"one_line_path": "flowctl.testing.paths"},
    "flowctl.testing.cases": {"one_line_path": "flowctl.testing.paths"},
    "flowctl.cli.commands.trace": {"child_tree": "flowctl.cli.commands._common"},
    "flowctl.graph.flowgraph": {"child_flows": "flowctl.check.topology"},
    "flowctl.expr.scope": {"truthy": "flowctl.expr.compile"},
}


@pytest.mark.parametrize("old, name, home", [(o, n, h) for o, names in MOVED.items() for n, h in names.items()])
def test_a_public_name_stays_importable_from_its_old_module(old, name, home):
    value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(home), name)
    if callable(value) and hasattr(value, "__module__") and not isinstance(value, type(importlib)):
        assert value.__module__ == home  # defined once, where it lives now
