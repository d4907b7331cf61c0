"""The step loop and its error layers (flowctl.engine.loop): the state's ``on_error``, then the
flow's, then the default (compensate and fail); handler actions (goto, fallback, fail, set); limits
(``max_steps``, ``max_visits``, ``timeout``) skip the handlers but still compensate; a long run's
checkpoint keeps the recent path."""
from __future__ import annotations

from support.enginekit import Harness, build, contract, task
from support.engineflows import LAYERED, SAGA, TOOLS, flow, linear, saga_states


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
                            "message": "card declined", "state": "a"}  # re-raised: blamed where it was raised

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
    root = build(tmp_path, {**SAGA, **saga_states(1),
                            **flow("p1", "  - {from: p1, to: p1}\n", extra="limits: {max_visits: 1}\non_error:\n  - {errors: ['*'], goto: failed}\n")},
                 TOOLS)
    h = Harness(root, check=False)
    result = h.run()
    assert result.error["code"] == "MAX_STEPS_EXCEEDED"
    assert ("undo", "1") in h.ledger()

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

def test_a_failing_handler_set_fails_the_run_instead_of_orphaning_it(tmp_path):
    root = build(tmp_path, {**contract("boom", "boom"),
                            **task("a", "boom@1.0.0", extra="on_error:\n  - {errors: ['*'], set: {x: \"from_json(error.message)\"}, goto: done}\n"),
                            **flow("a", linear("a"))}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed" and result.error["code"] == "EXPRESSION_ERROR"
    assert "handler_failed" in h.types()


def test_a_long_run_keeps_the_recent_path_and_counts_every_step(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: pass\n",
                            **flow("a", "  - {from: a, to: a, when: 'visits.a < `40`'}\n  - {from: a, to: done}\n")}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "succeeded"
    assert result.steps == 41 and len(result.path) == 32 and result.path[-1] == "done"
    assert h.types().count("state_entered") == 41  # the audit log keeps every one
