"""A run's life outside the step loop (flowctl.engine.lifecycle): what a start refuses, and resume
of runs in each status."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build
from support.engineflows import TOOLS, flow
from flowctl.errors import UsageError


def test_flow_input_schema_refuses_bad_input(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done}\n", extra="input_schema: {type: object, required: [order_id]}\n")}, TOOLS)
    with pytest.raises(UsageError, match="order_id"):
        Harness(root).run(input={})

def test_unknown_params_are_refused(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done}\n", extra="params: {sender: ops}\n")}, TOOLS)
    with pytest.raises(UsageError, match="has no param 'sendr'") as info:
        Harness(root).run(params={"sendr": "evil"})
    assert info.value.hint == "did you mean 'sender'?"
