"""One tool call (flowctl.engine.calls): input checked against the state's and the contract's
``input_schema``, its timeout (an expression too), output parsed as JSON, ``verify`` of a side
effect, a half-done call undone, and the recorded input safe from what the tool does to its copy."""
from __future__ import annotations

from support.enginekit import Harness, allow_all, build, contract, effect_contract, task
from support.engineflows import HOSTILE, SAGA, TOOLS, flow, linear, saga_states


def test_verify_failure_compensates_and_raises_boundary_violation(tmp_path):
    root = build(tmp_path, {**SAGA, **saga_states(1, last_extra=", verify: '`false`'"), **flow("p1", linear("p1"))}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.error["code"] == "BOUNDARY_VIOLATION"
    assert h.ledger() == [("pay", "1"), ("undo", "1")]
    assert "verify_failed" in h.types()

def test_compensate_on_failure_undoes_a_half_done_call(tmp_path):
    tools = TOOLS + """
def half(input, call):
    LEDGER.append(("half", 1))
    raise TimeoutError("connection dropped after the write")

def verify_half(input, output, call):
    return True

def undo_half(input, output, call):
    LEDGER.append(("undo_half", call.idempotency_key))
"""
    root = build(tmp_path, {
        **effect_contract("half", "half", extra="compensate_on_failure: true\n"), **allow_all("half"),
        **task("a", "half@1.0.0"), **flow("a", linear("a")),
    }, tools)
    h = Harness(root)
    assert h.run().status == "failed"
    assert [x[0] for x in h.ledger()] == ["half", "undo_half"]

def test_timeout_as_expression(tmp_path):
    root = build(tmp_path, {**contract("slow", "slow"), **task("a", "slow@1.0.0", extra="timeout: {expr: input.seconds}\n"),
                            **flow("a", linear("a"))}, TOOLS)
    result = Harness(root).run(input={"seconds": 0.1})
    assert result.error["code"] == "TOOL_TIMEOUT"

def test_input_schema_of_state_and_contract(tmp_path):
    root = build(tmp_path, {
        **contract("echo", "echo", extra="input_schema: {type: object, required: [id], properties: {id: {type: string}}}\n"),
        **task("a", "echo@1.0.0", extra="input: {id: input.id}\n"), **flow("a", linear("a")),
    }, TOOLS)
    result = Harness(root).run(input={"id": 7})
    assert result.error["code"] == "SCHEMA_MISMATCH" and "/id" in result.error["message"]

def test_a_tool_mutating_its_input_changes_nothing_recorded(tmp_path):
    root = build(tmp_path, {**contract("x", "mutate"), **task("a", "x@1.0.0", extra="input: {id: input.id}\n"),
                            **flow("a", linear("a"))}, HOSTILE)
    h = Harness(root)
    result = h.run(input={"id": "orig"})
    assert result.status == "succeeded"
    invoked = next(e for e in h.events if e["type"] == "tool_invoked")
    assert invoked["data"]["input"] == {"id": "orig"}
    from flowctl.store.audit import verify_chain

    assert verify_chain(h.store.events(result.run_id)) == []

def test_a_tool_returning_nan_is_a_schema_mismatch(tmp_path):
    root = build(tmp_path, {**contract("x", "nan"), **task("a", "x@1.0.0"), **flow("a", linear("a"))}, HOSTILE)
    assert Harness(root).run().error["code"] == "SCHEMA_MISMATCH"
