"""The interpreter's semantics: handler layers and their order, retries, fallback, verify and
compensation, limits, scope rules, expressions, waits and definition pinning."""
from __future__ import annotations

import pytest

import flowctl
from support.enginekit import Harness, allow_all, build, contract, effect_contract, task
from flowctl.errors import ProjectError, UsageError

TOOLS = """
import time
import flowctl
LEDGER = []

class GatewayError(ConnectionError):
    pass

def ok(input, call):
    LEDGER.append(("ok", call.attempt, call.idempotency_key))
    return {"status": "success", "value": input.get("value", 1)}

def flaky(input, call):
    LEDGER.append(("flaky", call.attempt))
    if call.attempt < input.get("succeed_on", 99):
        raise GatewayError("gateway reset")
    return {"status": "success"}

def declined(input, call):
    LEDGER.append(("declined", call.attempt))
    raise flowctl.ToolError("Payments.CardDeclined", "card declined")

def slow(input, call):
    LEDGER.append(("slow", call.attempt))
    time.sleep(5)
    return {}

def cached(input, call):
    LEDGER.append(("cached", call.attempt))
    return {"status": "cached"}

def pay(input, call):
    LEDGER.append(("pay", input["id"]))
    return {"paid": input["id"], "ok": input.get("verify", True)}

def verify_pay(input, output, call):
    return bool(output and output.get("ok"))

def undo_pay(input, output, call):
    if input.get("undo_fails"):
        raise RuntimeError("gateway refused the refund")
    LEDGER.append(("undo", input["id"]))

def boom(input, call):
    LEDGER.append(("boom", call.attempt))
    raise KeyError("missing")

def big(input, call):
    return {"blob": "x" * (2 << 20)}

def echo(input, call):
    LEDGER.append(("echo", input))
    return dict(input)
"""


def flow(start, transitions, *, extra=""):
    body = f"flow: f\nversion: 1\nstart: {start}\ntransitions:\n{transitions}" + extra
    return {"transitions/f.yaml": body}


def linear(*states):
    lines = "".join(f"  - {{from: {a}, to: {b}}}\n" for a, b in zip(states, states[1:] + ("done",)))
    return lines


# ----------------------------------------------------------------------------- retry (layer 1)
def test_max_attempts_three_is_exactly_three_calls_with_backoff(tmp_path):
    root = build(tmp_path, {
        **contract("flaky", "flaky"),
        **task("a", "flaky@1.0.0", extra="""
            retry:
              - errors: [ConnectionError]
                max_attempts: 3
                interval: 1s
                backoff: 3.0
                max_delay: 2s
            """),
        **flow("a", linear("a")),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed"
    assert h.ledger() == [("flaky", 1), ("flaky", 2), ("flaky", 3)]
    assert h.clock.slept == [1.0, 2.0]  # 1s, then 3s capped by max_delay 2s
    assert result.error["type"] == "GatewayError"


def test_retry_matches_base_class_and_succeeds(tmp_path):
    root = build(tmp_path, {
        **contract("flaky", "flaky"),
        **task("a", "flaky@^1", extra="""
            input: {succeed_on: "`2`"}
            retry: [{errors: [OSError], max_attempts: 5, interval: 10ms}]
            """),
        **flow("a", linear("a")),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "succeeded"
    assert h.ledger() == [("flaky", 1), ("flaky", 2)]


def test_full_jitter_stays_within_the_delay(tmp_path):
    root = build(tmp_path, {
        **contract("flaky", "flaky"),
        **task("a", "flaky@1.0.0", extra="retry: [{errors: [ConnectionError], max_attempts: 4, interval: 2s, jitter: full}]\n"),
        **flow("a", linear("a")),
    }, TOOLS)
    h = Harness(root)
    h.run()
    assert len(h.clock.slept) == 3
    assert all(0 <= s <= cap for s, cap in zip(h.clock.slept, [2, 4, 8]))


def test_long_retry_delay_parks_the_run_and_resume_continues_when_due(tmp_path):
    root = build(tmp_path, {
        **contract("flaky", "flaky"),
        **task("a", "flaky@1.0.0", extra="""
            input: {succeed_on: "`2`"}
            retry: [{errors: [ConnectionError], max_attempts: 2, interval: 1m}]
            """),
        **flow("a", linear("a")),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "waiting" and result.exit_code == 3
    assert result.available_at == pytest.approx(h.clock.time() + 60)
    assert h.engine.resume(result.run_id).status == "waiting"  # not due yet
    h.clock.advance(61)
    done = h.engine.resume(result.run_id)
    assert done.status == "succeeded"
    assert h.ledger() == [("flaky", 1), ("flaky", 2)]


# ----------------------------------------------------------------------------- layers 2-4 and default
LAYERED = {
    **contract("declined", "declined"),
    **contract("cached", "cached"),
    "states/recover_state.yaml": "id: recover_state\ntype: pass\nset: {caught: error.type}\n",
    "states/failed.yaml": "id: failed\ntype: fail\nerror: {expr: error.code}\ncause: {expr: error.message}\n",
}


def test_state_on_error_wins_over_flow_on_error(tmp_path):
    root = build(tmp_path, {
        **LAYERED,
        **task("a", "declined@1.0.0", extra="on_error:\n  - {errors: [Payments.CardDeclined], goto: recover_state}\n"),
        **flow("a", "  - {from: a, to: done}\n  - {from: recover_state, to: done}\n",
               extra="on_error:\n  - {errors: ['*'], goto: failed}\n"),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "succeeded"
    assert result.path == ["a", "recover_state", "done"]
    assert result.output == {"caught": "Payments.CardDeclined"}  # error stays in scope for the next state


def test_flow_on_error_when_state_has_no_match_and_set_records_error(tmp_path):
    root = build(tmp_path, {
        **LAYERED,
        **task("a", "declined@1.0.0", extra="on_error:\n  - {errors: [ToolTimeout], goto: recover_state}\n"),
        **flow("a", "  - {from: a, to: done}\n  - {from: recover_state, to: done}\n",
               extra="on_error:\n  - errors: [ToolError]\n    set: {why: error.message}\n    goto: failed\n"),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed"
    assert result.path == ["a", "failed"]
    assert result.error == {"type": "Payments.CardDeclined", "code": "Payments.CardDeclined",
                            "message": "card declined", "state": "failed"}


def test_default_layer_fails_with_the_error_code(tmp_path):
    root = build(tmp_path, {**contract("boom", "boom"), **task("a", "boom@1.0.0"), **flow("a", linear("a"))}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed" and result.exit_code == 1
    assert result.error["type"] == "KeyError" and result.error["state"] == "a"
    caught = [e for e in h.events if e["type"] == "error_caught"]
    assert caught[-1]["data"]["layer"] == "default"


def test_handler_fail_action_names_the_code(tmp_path):
    root = build(tmp_path, {**contract("boom", "boom"),
                            **task("a", "boom@1.0.0", extra="on_error: [{errors: [LookupError], fail: Lookup.Broken}]\n"),
                            **flow("a", linear("a"))}, TOOLS)
    result = Harness(root).run()
    assert result.error["code"] == "Lookup.Broken"


def test_star_catches_anything_and_tool_error_group_excludes_timeouts(tmp_path):
    root = build(tmp_path, {
        **contract("slow", "slow", extra="timeout: 200ms\n"),
        **LAYERED,
        **task("a", "slow@1.0.0", extra="on_error:\n  - {errors: [ToolError], goto: failed}\n  - {errors: ['*'], goto: recover_state}\n"),
        **flow("a", "  - {from: a, to: done}\n  - {from: recover_state, to: done}\n"),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.path == ["a", "recover_state", "done"]
    assert result.output == {"caught": "ToolTimeout"}


def test_fallback_output_becomes_response(tmp_path):
    root = build(tmp_path, {
        **contract("slow", "slow", extra="timeout: 100ms\n"),
        **contract("cached", "cached"),
        **task("a", "slow@1.0.0", extra="on_error: [{errors: [ToolTimeout], fallback: cached@^1}]\n"),
        **flow("a", "  - {from: a, to: done, when: \"response.status == 'cached'\", set: {source: response.status}}\n"
                    "  - {from: a, to: failed}\n"),
        "states/failed.yaml": "id: failed\ntype: fail\nerror: Nope\n",
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "succeeded"
    assert result.output == {"source": "cached"}
    assert "fallback_used" in h.types()


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


# ----------------------------------------------------------------------------- verify, saga
SAGA = {
    **effect_contract("pay", "pay", extra="idempotency_key: \"join('-', ['pay', input.id])\"\n"),
    **contract("boom", "boom"),
    **allow_all("pay"),
    "states/failed.yaml": "id: failed\ntype: fail\nerror: Aborted\n",
}


def _saga_states(n, last_extra=""):
    files = {}
    for i in range(1, n + 1):
        files.update(task(f"p{i}", "pay@1.0.0", extra=f"input: {{id: \"'{i}'\"{last_extra if i == n else ''}}}\n"))
    return files


def test_compensation_runs_newest_first_with_the_original_keys(tmp_path):
    root = build(tmp_path, {
        **SAGA, **_saga_states(3), **task("x", "boom@1.0.0"),
        **flow("p1", linear("p1", "p2", "p3", "x"), extra="on_error:\n  - {errors: ['*'], compensate: true, goto: failed}\n"),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed" and result.error["code"] == "Aborted"
    assert h.ledger()[-3:] == [("undo", "3"), ("undo", "2"), ("undo", "1")]
    started = [e["data"]["idempotency_key"] for e in h.events if e["type"] == "compensation_started"]
    assert started == ["pay-3", "pay-2", "pay-1"]


def test_fail_state_alone_does_not_compensate(tmp_path):
    root = build(tmp_path, {**SAGA, **_saga_states(1), **flow("p1", "  - {from: p1, to: failed}\n")}, TOOLS)
    h = Harness(root)
    assert h.run().status == "failed"
    assert ("undo", "1") not in h.ledger()


def test_verify_failure_compensates_and_raises_boundary_violation(tmp_path):
    root = build(tmp_path, {**SAGA, **_saga_states(1, last_extra=", verify: '`false`'"), **flow("p1", linear("p1"))}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.error["code"] == "BOUNDARY_VIOLATION"
    assert h.ledger() == [("pay", "1"), ("undo", "1")]
    assert "verify_failed" in h.types()


def test_failing_compensation_is_residue_not_swallowed(tmp_path):
    root = build(tmp_path, {
        **SAGA, **_saga_states(2, last_extra=", undo_fails: '`true`'"), **task("x", "boom@1.0.0"),
        **flow("p1", linear("p1", "p2", "x")),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed"
    assert [r["state"] for r in result.residue] == ["p2"]
    assert "gateway refused" in result.residue[0]["error"]
    assert ("undo", "1") in h.ledger()  # the rest of the stack is still undone
    assert "compensation_failed" in h.types()


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


def test_side_effect_is_denied_without_a_policy(tmp_path):
    files = {k: v for k, v in SAGA.items() if not k.startswith("policies/")}
    root = build(tmp_path, {**files, **_saga_states(1), **flow("p1", linear("p1"))}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.error["code"] == "POLICY_DENIED"
    assert "default-deny" in result.error["message"] and "no policy applies" in result.error["message"]
    assert h.ledger() == []


# ----------------------------------------------------------------------------- limits
def test_max_steps_and_max_visits(tmp_path):
    loop = {**contract("ok", "ok"), **task("a", "ok@1.0.0")}
    root = build(tmp_path, {**loop, **flow("a", "  - {from: a, to: a, when: 'visits.a < `50`'}\n  - {from: a, to: done}\n",
                                            extra="limits: {max_steps: 5}\n")}, TOOLS, name="steps")
    result = Harness(root).run()
    assert result.error["code"] == "MAX_STEPS_EXCEEDED" and len(result.path) == 5
    root = build(tmp_path, {**loop, **flow("a", "  - {from: a, to: a, when: 'visits.a < `50`'}\n  - {from: a, to: done}\n",
                                            extra="limits: {max_visits: 3}\n")}, TOOLS, name="visits")
    result = Harness(root).run()
    assert result.error["code"] == "MAX_STEPS_EXCEEDED" and "max_visits" in result.error["message"]
    assert result.path == ["a", "a", "a"]


def test_run_timeout(tmp_path):
    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 5s\n",
                            **flow("w", "  - {from: w, to: w, when: 'visits.w < `10`'}\n  - {from: w, to: done}\n",
                                   extra="limits: {timeout: 12s}\n")}, TOOLS)
    result = Harness(root).run()
    assert result.error["code"] == "RUN_TIMEOUT"


def test_limits_skip_handlers_but_compensate(tmp_path):
    root = build(tmp_path, {**SAGA, **_saga_states(1),
                            **flow("p1", "  - {from: p1, to: p1}\n", extra="limits: {max_visits: 1}\non_error:\n  - {errors: ['*'], goto: failed}\n")},
                 TOOLS)
    h = Harness(root, check=False)
    result = h.run()
    assert result.error["code"] == "MAX_STEPS_EXCEEDED"
    assert ("undo", "1") in h.ledger()


# ----------------------------------------------------------------------------- scope, expressions
def test_set_reads_the_scope_before_the_transition_and_dotted_keys_nest(tmp_path):
    root = build(tmp_path, {
        "states/a.yaml": "id: a\ntype: pass\nset: {n: '`1`'}\n",
        **flow("a", "  - from: a\n    to: done\n    set: {n: 'add(context.n, `1`)', old: context.n, results.step1: context.n}\n"),
    }, TOOLS)
    result = Harness(root).run()
    assert result.output == {"n": 2, "old": 1, "results": {"step1": 1}}


def test_expression_error_goes_through_the_handler_layers(tmp_path):
    root = build(tmp_path, {
        "states/a.yaml": "id: a\ntype: choice\n",
        "states/caught.yaml": "id: caught\ntype: pass\nset: {msg: error.message}\n",
        **flow("a", "  - {from: a, to: done, when: \"input.n < '10'\"}\n  - {from: a, to: done}\n  - {from: caught, to: done}\n",
               extra="on_error:\n  - {errors: [ExpressionError], goto: caught}\n"),
    }, TOOLS)
    result = Harness(root).run(input={"n": 5})
    assert result.path == ["a", "caught", "done"]
    assert "input.n < '10'" in result.output["msg"] and "transitions/f.yaml:" in result.output["msg"]


def test_comparison_on_a_missing_field_is_recorded_as_null(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done, when: 'input.missing > `3`'}\n  - {from: a, to: done}\n")}, TOOLS)
    h = Harness(root)
    h.run()
    taken = next(e for e in h.events if e["type"] == "transition_taken")
    assert taken["data"]["conditions"][0] == {"when": "input.missing > `3`", "result": None}


def test_no_transition_matched(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done, when: 'input.go'}\n")}, TOOLS)
    result = Harness(root).run(input={"go": False})
    assert result.error["code"] == "NO_TRANSITION_MATCHED"


def test_params_output_and_run_scope(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done}\n",
                                   extra="params: {topic: dev, n: 1}\noutput: '{topic: params.topic, n: params.n, flow: run.flow, state: state.id}'\n")},
                 TOOLS)
    result = Harness(root).run(params={"topic": "prod"})
    assert result.output == {"topic": "prod", "n": 1, "flow": "f", "state": "done"}


def test_uuid_and_now_are_recorded_in_the_audit_log(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done, set: {id: 'uuid()', at: 'now()'}}\n")}, TOOLS)
    h = Harness(root)
    result = h.run()
    taken = next(e for e in h.events if e["type"] == "transition_taken")
    recorded = {r["kind"]: r["value"] for r in taken["data"]["recorded"]}
    assert recorded == {"uuid": result.output["id"], "now": result.output["at"]}
    assert result.output["at"].startswith("2026-01-01T00:00:00")  # the fake clock


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


def test_flow_input_schema_refuses_bad_input(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done}\n", extra="input_schema: {type: object, required: [order_id]}\n")}, TOOLS)
    with pytest.raises(UsageError, match="order_id"):
        Harness(root).run(input={})


def test_unknown_flow_and_flow_with_errors_are_refused(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n", **flow("a", "  - {from: a, to: nowhere}\n")}, TOOLS)
    h = Harness(root)
    with pytest.raises(UsageError, match="no flow 'g'"):
        h.run("g")
    with pytest.raises(ProjectError, match="unknown state 'nowhere'"):
        h.run("f")


# ----------------------------------------------------------------------------- waits, pinning
def test_short_wait_sleeps_inline_long_wait_parks(tmp_path):
    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 2s\n", **flow("w", linear("w"))}, TOOLS, name="short")
    h = Harness(root)
    assert h.run().status == "succeeded" and h.clock.slept == [2.0]
    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 1h\n", **flow("w", linear("w"))}, TOOLS, name="long")
    h = Harness(root)
    parked = h.run()
    assert parked.status == "waiting"
    h.clock.advance(3600)
    assert h.engine.recover()[0].status == "succeeded"


def test_wait_until_an_expression(tmp_path):
    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nuntil: \"date_add(input.at, '5s')\"\n", **flow("w", linear("w"))}, TOOLS)
    h = Harness(root)
    assert h.run(input={"at": "2026-01-01T00:00:00Z"}).status == "succeeded"
    assert h.clock.slept == [5.0]


def test_a_parked_run_keeps_the_definition_it_started_with(tmp_path):
    from support.enginekit import sqlite_store

    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
                            "states/old_end.yaml": "id: old_end\ntype: pass\nset: {version: \"'old'\"}\n",
                            **flow("w", "  - {from: w, to: old_end}\n  - {from: old_end, to: done}\n")}, TOOLS)
    store = sqlite_store(tmp_path)
    h = Harness(root, store=store)
    parked = h.run()
    (root / "orchestration/transitions/f.yaml").write_text(
        "flow: f\nversion: 2\nstart: w\ntransitions:\n  - {from: w, to: done}\n  - {from: old_end, to: done}\n")
    h2 = Harness(root, store=store)
    h2.clock = h.clock
    h2.engine.clock = h.clock
    h.clock.advance(3601)
    result = h2.engine.resume(parked.run_id)
    assert result.path == ["w", "old_end", "done"]
    assert result.output == {"version": "old"}
    assert flowctl.load_project(root).flows["f"].version == 2  # the file did change


def test_fail_state_with_compensate_true_undoes_side_effects(tmp_path):
    root = build(tmp_path, {**SAGA, **_saga_states(2),
                            "states/failed.yaml": "id: failed\ntype: fail\nerror: Aborted\ncompensate: true\n",
                            **flow("p1", "  - {from: p1, to: p2}\n  - {from: p2, to: failed}\n")}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.error["code"] == "Aborted"
    assert h.ledger()[-2:] == [("undo", "2"), ("undo", "1")]


def test_unknown_params_are_refused(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done}\n", extra="params: {sender: ops}\n")}, TOOLS)
    with pytest.raises(UsageError, match="has no param 'sendr'") as info:
        Harness(root).run(params={"sendr": "evil"})
    assert info.value.hint == "did you mean 'sender'?"


# ----------------------------------------------------------------------------- hostile tools
HOSTILE = """
import sys
LEDGER = []

class Weird(BaseException):
    pass

def exits(input, call):
    sys.exit(5)

def weird(input, call):
    raise Weird("not an Exception")

def mutate(input, call):
    input["id"] = "changed"
    input.setdefault("extra", []).append(1)
    return {"ok": True}

def nan(input, call):
    return {"value": float("nan")}
"""


@pytest.mark.parametrize("fn, name", [("exits", "SystemExit"), ("weird", "Weird")])
def test_tools_raising_base_exceptions_fail_the_step_not_the_process(tmp_path, fn, name):
    root = build(tmp_path, {**contract("x", fn), **task("a", "x@1.0.0"), **flow("a", linear("a"))}, HOSTILE)
    result = Harness(root).run()
    assert result.status == "failed"
    assert result.error["type"] == name and result.error["code"] == "TOOL_CRASHED"


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


def test_a_failing_handler_set_fails_the_run_instead_of_orphaning_it(tmp_path):
    root = build(tmp_path, {**contract("boom", "boom"),
                            **task("a", "boom@1.0.0", extra="on_error:\n  - {errors: ['*'], set: {x: \"from_json(error.message)\"}, goto: done}\n"),
                            **flow("a", linear("a"))}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed" and result.error["code"] == "EXPRESSION_ERROR"
    assert "handler_failed" in h.types()


def test_retries_of_a_side_effect_are_not_duplicates_for_the_gate(tmp_path):
    tools = TOOLS + """
def flaky_pay(input, call):
    LEDGER.append(("try", call.attempt))
    if call.attempt < 2:
        raise ConnectionError("reset")
    return {"ok": True}

def verify_flaky_pay(input, output, call):
    return True

def undo_flaky_pay(input, output, call):
    pass
"""
    root = build(tmp_path, {
        **effect_contract("fp", "flaky_pay"),
        "policies/p.yaml": "policy: p\napplies_to: [fp]\nallow: []\ndedupe: {window: 1h}\nrate: {max: 1, window: 1h}\n",
        **task("a", "fp@1.0.0", extra="retry: [{errors: [ConnectionError], max_attempts: 3, interval: 1s}]\n"),
        **flow("a", linear("a")),
    }, tools)
    h = Harness(root)
    assert h.run().status == "succeeded"
    assert h.ledger() == [("try", 1), ("try", 2)]


def test_a_flow_whose_state_or_child_flow_did_not_load_is_refused_before_it_runs(tmp_path):
    from flowctl.errors import ProjectError

    files = {**contract("echo", "echo"), **task("a", "echo@1.0.0"),
             "states/b.yaml": "id: b\ntype: task\ntool: echo@1.0.0\ninput: {x: `0`}\n",  # a backtick: YAML refuses it
             "states/fan.yaml": "id: fan\ntype: parallel\nbranches: [nowhere]\n",
             "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: b}\n  - {from: b, to: done}\n",
             "transitions/g.yaml": "flow: g\nstart: fan\ntransitions:\n  - {from: fan, to: done}\n"}
    h = Harness(build(tmp_path, files, "def echo(input, call):\n    return {}\n"))
    with pytest.raises(ProjectError, match=r"states/b\.yaml:4:\d+: cannot parse"):
        h.run("f")
    with pytest.raises(ProjectError, match="nowhere"):
        h.run("g")
