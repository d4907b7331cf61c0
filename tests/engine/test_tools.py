"""Calling a tool function (flowctl.engine.tools): its timeout cuts it off, and whatever it raises,
even a BaseException, fails the step, never the process; a function its module lacks is refused
before a run is created."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build, contract, task
from support.engineflows import HOSTILE, TOOLS, flow, linear


def test_tool_timeout_fires_within_the_timeout_plus_a_margin(tmp_path):
    import time

    root = build(tmp_path, {**contract("slow", "slow", extra="timeout: 300ms\n"), **task("a", "slow@1.0.0"),
                            **flow("a", linear("a"))}, TOOLS)
    h = Harness(root)
    started = time.monotonic()
    result = h.run()
    elapsed = time.monotonic() - started
    assert result.error["type"] == "ToolTimeout" and result.error["code"] == "TOOL_TIMEOUT"
    assert elapsed < 0.3 + 1.0, elapsed  # the tool sleeps 5 s; the timeout cuts it off

@pytest.mark.parametrize("fn, name", [("exits", "SystemExit"), ("weird", "Weird")])
def test_tools_raising_base_exceptions_fail_the_step_not_the_process(tmp_path, fn, name):
    root = build(tmp_path, {**contract("x", fn), **task("a", "x@1.0.0"), **flow("a", linear("a"))}, HOSTILE)
    result = Harness(root).run()
    assert result.status == "failed"
    assert result.error["type"] == name and result.error["code"] == "TOOL_CRASHED"


def test_a_contract_naming_a_function_its_module_lacks_is_refused_before_the_run_starts(tmp_path):
    from flowctl.errors import UsageError

    from flowctl.errors import ProjectError

    root = build(tmp_path, {**contract("x", "nowhere"), **task("a", "x@1.0.0"), **flow("a", linear("a"))}, TOOLS)
    h = Harness(root)  # the pre-run check reads the module's source (FC608)
    with pytest.raises(ProjectError, match="entrypoint tk:nowhere: module 'tk' defines no 'nowhere'"):
        h.run()
    assert h.store.list_runs(limit=0) == []
    h = Harness(root, check=False)  # unchecked, the import of the tool still refuses it by name
    with pytest.raises(UsageError, match="'tk' has no 'nowhere' \\(named by tk:nowhere\\)"):
        h.run()


def test_a_tool_cannot_change_its_call_and_the_call_survives_copy_and_pickle():
    import copy
    import dataclasses
    import pickle

    from flowctl.engine.tools import ToolCall

    call = ToolCall("run-1", 3, "charge", 2, "run-1:charge:1", 12.5, "pay@1.0.0")
    assert (call.run_id, call.step, call.state, call.attempt, call.idempotency_key, call.deadline, call.tool) == (
        "run-1", 3, "charge", 2, "run-1:charge:1", 12.5, "pay@1.0.0")
    for name in ("idempotency_key", "attempt", "other"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(call, name, "changed")
    with pytest.raises(dataclasses.FrozenInstanceError):
        del call.step
    assert call.idempotency_key == "run-1:charge:1"
    assert not hasattr(call, "__dict__")
    assert pickle.loads(pickle.dumps(call)) == call == copy.deepcopy(call)
    assert ToolCall("r", 1, "s", 1, "k", None).tool == ""
    assert "idempotency_key='run-1:charge:1'" in repr(call)
