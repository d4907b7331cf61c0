"""One tool call (flowctl.engine.calls): input checked against the state's and the contract's
``input_schema``, its timeout (an expression too), output parsed as JSON, ``verify`` of a side
effect, a half-done call undone, and the recorded input safe from what the tool does to its copy."""
from __future__ import annotations

import pytest

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

def test_a_tool_returning_a_plain_message_is_told_what_a_tool_returns(tmp_path):
    """(new-user finding: a tool's 'sent' failed with only the JSON parser's 'Expecting value')"""
    root = build(tmp_path, {**contract("msg", "msg"), **task("a", "msg@1.0.0"), **flow("a", linear("a"))},
                 TOOLS + "\ndef msg(input, call):\n    return 'sent'\n")
    result = Harness(root).run()
    assert result.error["code"] == "SCHEMA_MISMATCH"
    assert "returned the text 'sent', which is not JSON" in result.error["message"]
    assert "a tool returns a dict, or JSON text" in result.error["message"]

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



PAY_BADLY = """
LEDGER = []
MODE = {"mode": "nan"}

def _deep(n):
    out = {}
    for _ in range(n):
        out = {"x": out}
    return out

def pay(input, call):
    LEDGER.append(("pay", call.idempotency_key))  # the payment is made; then what it returns cannot be kept
    return {"nan": {"x": float("nan")}, "text": "paid", "surrogate": {"x": "\\ud800"},
            "deep": _deep(5000), "deeper_than_kept": _deep(150)}[MODE["mode"]]

def verify_pay(input, output, call):
    return ("pay", call.idempotency_key) in LEDGER

def undo_pay(input, output, call):
    LEDGER.append(("undo", call.idempotency_key, output))
"""


@pytest.mark.parametrize("mode", ["nan", "text", "surrogate", "deep", "deeper_than_kept"])
def test_a_payment_whose_output_cannot_be_kept_is_still_undone(tmp_path, mode):
    """The tool acted and returned, but its output is not JSON: the step fails (SchemaMismatch),
    verify is asked as after a timeout, and the effect joins the saga, as one whose output broke
    the output_schema does (breaker finding: it was never undone)."""
    files = {**effect_contract("pay", "pay"), **allow_all("pay"), **task("p", "pay@1.0.0"), **FAILED_STATE,
             **flow("p", linear("p"), extra="on_error:\n  - {errors: ['*'], compensate: true, goto: failed}\n")}
    h = Harness(build(tmp_path, files, PAY_BADLY.replace('"nan"}', f'"{mode}"}}', 1)))
    result = h.run(input={})
    assert result.status == "failed" and result.error["code"] == "SCHEMA_MISMATCH", result.error
    (key,) = {e[1] for e in h.ledger()}
    assert h.ledger() == [("pay", key), ("undo", key, None)]
    recovered = [e["data"] for e in h.events if e["type"] == "step_recovered"]
    assert recovered == [{"tool": "pay@1.0.0", "idempotency_key": key, "after": "output not kept", "happened": True,
                          "action": "in the saga"}]

# ------------------------------------------------------------------ a side-effecting call that times out
PAY_SLOW = """
import time

LEDGER = []
STATE = {"slow": 1, "confirm": True}  # calls left that act, then overrun their deadline; what verify says

def pay(input, call):
    LEDGER.append(("pay", call.idempotency_key))
    if STATE["slow"] > 0:
        STATE["slow"] -= 1
        time.sleep(30)  # past the contract's timeout: the watchdog ends the wait, the payment is made
    return {"paid": True}

def verify_pay(input, output, call):
    return ("pay", call.idempotency_key) in LEDGER and STATE["confirm"]

def undo_pay(input, output, call):
    LEDGER.append(("undo", call.idempotency_key, output))

def boom(input, call):
    raise RuntimeError("later step fails")
"""


FAILED_STATE = {"states/failed.yaml": "id: failed\ntype: fail\nerror: {expr: error.code}\n"}


def _pay_project(tmp_path, *, contract_extra="", state_extra="", then=("x",)):
    body = "timeout: 0.2s\n" + contract_extra
    files = {**effect_contract("pay", "pay", extra=body), **contract("boom", "boom"), **allow_all("pay"),
             **task("p", "pay@1.0.0", extra=state_extra), **task("x", "boom@1.0.0"), **FAILED_STATE,
             **flow("p", linear("p", *then), extra="on_error:\n  - {errors: ['*'], compensate: true, goto: failed}\n")}
    return Harness(build(tmp_path, files, PAY_SLOW))


def test_a_timed_out_payment_that_verify_confirms_is_compensated_when_the_run_fails(tmp_path):
    h = _pay_project(tmp_path, then=())
    result = h.run(input={})
    assert result.status == "failed" and result.error["code"] == "TOOL_TIMEOUT"
    (key,) = {e[1] for e in h.ledger()}
    assert h.ledger() == [("pay", key), ("undo", key, None)]  # the effect it made is undone, not left behind
    recovered = [e["data"] for e in h.events if e["type"] == "step_recovered"]
    assert recovered == [{"tool": "pay@1.0.0", "idempotency_key": key, "after": "timeout", "happened": True,
                          "action": "in the saga"}]
    assert result.residue == []


def test_a_timed_out_payment_that_verify_denies_is_not_compensated(tmp_path):
    h = _pay_project(tmp_path, then=())
    from flowctl.engine.tools import resolve

    resolve("tk:STATE", str(h.root / "orchestration" / "tools"))["confirm"] = False
    result = h.run(input={})
    assert result.status == "failed"
    assert [e[0] for e in h.ledger()] == ["pay"]  # verify said it did not happen: nothing to undo
    assert [e["data"]["happened"] for e in h.events if e["type"] == "step_recovered"] == [False]


def test_a_retry_after_a_timeout_is_the_same_effect_and_is_undone_once(tmp_path):
    h = _pay_project(tmp_path, state_extra="retry:\n  - {errors: [ToolTimeout], max_attempts: 2, interval: 0s}\n")
    result = h.run(input={})
    assert result.status == "failed" and result.error["code"] != "TOOL_TIMEOUT"  # the later step failed
    (key,) = {e[1] for e in h.ledger()}
    assert h.ledger() == [("pay", key), ("pay", key), ("undo", key, {"paid": True})]  # one entry, the later one


PAY_LATE = """
import threading

LEDGER = []
ASKED = threading.Event()  # set by verify

def pay(input, call):
    ASKED.wait(1.0)  # past the 0.2 s timeout; released at once if verify were asked before this call ended
    LEDGER.append(("pay", call.idempotency_key))
    return {"paid": True}

def verify_pay(input, output, call):
    found = ("pay", call.idempotency_key) in LEDGER
    ASKED.set()
    return found

def undo_pay(input, output, call):
    LEDGER.append(("undo", call.idempotency_key))

def boom(input, call):
    raise RuntimeError("later step fails")
"""


def test_off_the_main_thread_a_timed_out_payment_is_verified_and_undone_only_after_it_ended(tmp_path):
    """(new-user finding: on a worker, a payment that overran its timeout landed after verify said
    it had not happened and after the run was compensated — an effect nobody recorded)"""
    import threading

    files = {**effect_contract("pay", "pay", extra="timeout: 0.2s\n"), **contract("boom", "boom"), **allow_all("pay"),
             **task("p", "pay@1.0.0"), **task("x", "boom@1.0.0"), **FAILED_STATE,
             **flow("p", linear("p", "x"), extra="on_error:\n  - {errors: ['*'], compensate: true, goto: failed}\n")}
    h = Harness(build(tmp_path, files, PAY_LATE))
    out = {}
    worker = threading.Thread(target=lambda: out.update(result=h.run(input={})))  # as a worker's slot drives it
    worker.start()
    worker.join(30)
    assert out["result"].status == "failed" and out["result"].error["code"] == "TOOL_TIMEOUT"
    (key,) = {e[1] for e in h.ledger()}
    assert h.ledger() == [("pay", key), ("undo", key)]  # the effect first, then its undo
    assert [e["data"]["happened"] for e in h.events if e["type"] == "step_recovered"] == [True]


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_a_lone_surrogate_in_a_tools_error_message_fails_the_run_normally(tmp_path, store_kind):
    """(breaker finding: the run row's UPDATE could not encode it, and the run could never end)"""
    from flowctl.store.audit import verify_run
    from support.enginekit import sqlite_store

    tools = 'def odd(input, call):\n    raise RuntimeError("x\\udc80y")\n'
    files = {**contract("odd", "odd"), **task("t", "odd@1.0.0"), **flow("t", linear("t"))}
    h = Harness(build(tmp_path, files, tools), store=sqlite_store(tmp_path) if store_kind == "sqlite" else None)
    failed = h.run(input={})
    assert failed.status == "failed" and failed.error["type"] == "RuntimeError"
    row = h.store.get_run(failed.run_id)
    assert row["status"] == "failed" and "udc80" in row["error"]["message"].encode("unicode_escape").decode()
    assert verify_run(row, h.store.events(failed.run_id)) == []
