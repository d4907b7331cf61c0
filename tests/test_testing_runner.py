"""Running golden cases: mocks by order and by `when`, mocked errors through retry and handlers,
reviews, no real waiting, expectations and the path diff (issue 7)."""
from __future__ import annotations

import time

import flowctl
from flowctl.testing.cases import load_cases
from flowctl.testing.runner import path_diff, run_case
from support.testingkit import OK_MOCKS, project


def run(tmp_path, text, name="c.yaml", **kw):
    root = project(tmp_path, name="p_" + name.split(".")[0], cases={name: text}, **kw)
    proj = flowctl.load_project(root)
    cases, diags = load_cases(proj)
    assert [d for d in diags if d.severity == "error"] == [], diags
    return run_case(proj, cases[0])


def test_a_passing_case_calls_no_real_tool(tmp_path):
    r = run(tmp_path, "input: {id: X-1}\n" + OK_MOCKS + """
expect:
  path: [lookup, pay, done]
  status: succeeded
  context: {amount: 10, payment: P-1}
""")
    assert r.passed, r.report()
    assert [c["tool"] for c in r.calls] == ["lookup", "pay"]
    from flowctl.engine.tools import resolve

    ledger = resolve("tk:LEDGER", str(tmp_path / "p_c" / "orchestration" / "tools"))
    assert ledger == []  # the real tools were never called


def test_a_failing_case_prints_a_readable_path_diff(tmp_path):
    r = run(tmp_path, """
input: {id: X-1}
mocks:
  lookup:
    output: {status: missing}
expect:
  path: [lookup, pay, done]
  status: succeeded
  context: {amount: 10}
""")
    assert r.status == "failed"
    text = r.report()
    assert text.splitlines()[:6] == [
        "path differs from step 2 (- expected, + actual):",
        "        1  lookup",
        "    -   2  pay",
        "    -   3  done",
        "    +   2  rejected",
        "  expected: lookup → pay → done",
    ]
    assert "  actual:   lookup → rejected" in text
    assert "why: at 'lookup' (step 1): took the transition to 'rejected':" in text
    assert "response.status == 'ok'  →  false" in text
    assert "(default)  →  true" in text
    assert "status: expected succeeded, got failed with Rejected at 'rejected'" in text
    assert "context.amount: missing (expected 10)" in text


def test_path_diff_of_a_run_that_stopped_early_and_one_that_went_further():
    assert path_diff(["a", "b"], ["a", "b"]) == ""
    longer = path_diff(["a"], ["a", "b"])
    assert "path differs from step 2" in longer and "    +   2  b" in longer
    shorter = path_diff(["a", "b", "c"], ["a"])
    assert "    -   2  b" in shorter and "    -   3  c" in shorter


def test_mocks_in_call_order_with_times(tmp_path):
    r = run(tmp_path, """
input: {id: X-1}
mocks:
  lookup:
    - error: ToolUnavailable
      times: 2
    - output: {status: ok, amount: 7}
  pay:
    output: {payment: P-1, amount: 7, key: k}
expect:
  path: [lookup, pay, done]
  status: succeeded
  context: {amount: 7}
""")
    assert r.passed, r.report()
    assert [(c["tool"], c["attempt"], c["entry"]) for c in r.calls] == [
        ("lookup", 1, "mocks.lookup[0]"), ("lookup", 2, "mocks.lookup[0]"), ("lookup", 3, "mocks.lookup[1]"),
        ("pay", 1, "mocks.pay")]


def test_mocks_chosen_by_when_on_the_tool_input(tmp_path):
    r = run(tmp_path, """
input: {id: X-2}
mocks:
  lookup:
    - when: "input.id == 'X-1'"
      output: {status: ok, amount: 1}
    - when: "input.id == 'X-2' && call.attempt == `1`"
      output: {status: ok, amount: 2}
  pay:
    - when: "input.amount == `2`"
      output: {payment: P-2, amount: 2, key: k}
expect:
  path: [lookup, pay, done]
  status: succeeded
  context: {amount: 2, payment: P-2}
""")
    assert r.passed, r.report()
    assert [c["entry"] for c in r.calls] == ["mocks.lookup[1]", "mocks.pay[0]"]


def test_a_tool_without_a_mock_or_with_its_mocks_used_up_is_a_case_error(tmp_path):
    r = run(tmp_path, """
input: {id: X-1}
mocks:
  lookup:
    output: {status: ok, amount: 1}
expect: {path: [lookup, pay, done], status: succeeded}
""")
    assert r.status == "error"
    assert "the run called pay@1.0.0 in state 'pay' but the case has no mock for 'pay'" in r.report()
    r = run(tmp_path, """
input: {id: X-1}
mocks:
  lookup:
    - {error: ToolUnavailable}
expect: {path: [lookup, pay, done], status: succeeded}
""", name="d.yaml")
    assert r.status == "error"
    assert "call 2 of lookup (state 'lookup', attempt 2" in r.report() and "used up" in r.report()
    assert r.path == ["lookup"]


def test_mocked_errors_by_type_name_go_through_retry_and_handlers(tmp_path):
    # a named tool error matched by the state's on_error
    r = run(tmp_path, """
input: {id: X-1}
mocks:
  lookup: {error: Lookup.NotFound, message: no X-1}
expect: {path: [lookup, rejected], status: failed, error: Rejected}
""")
    assert r.passed, r.report()
    caught = [e for e in r.events if e["type"] == "error_caught"]
    assert caught[0]["data"]["layer"] == "state" and caught[0]["data"]["error"]["type"] == "Lookup.NotFound"
    # a Python exception class: matched by its base class OSError in the flow's on_error
    r = run(tmp_path, """
input: {id: X-1}
mocks:
  lookup: {error: ConnectionResetError}
expect: {path: [lookup, failed], status: failed, error: ConnectionResetError}
""", name="d.yaml")
    assert r.passed, r.report()
    assert [e["data"]["handler"] for e in r.events if e["type"] == "error_caught"] == [0]
    # a flowctl error: retried by the state's retry, then caught by the catch-all
    r = run(tmp_path, """
input: {id: X-1}
mocks:
  lookup: {error: ToolUnavailable, message: down}
expect: {path: [lookup, failed], status: failed, error: ToolUnavailable, compensated: []}
""", name="e.yaml")
    assert r.passed, r.report()
    assert [c["attempt"] for c in r.calls] == [1, 2, 3]
    assert sum(e["type"] == "retry_scheduled" for e in r.events) == 2


def test_no_real_waiting_a_one_hour_retry_finishes_at_once(tmp_path):
    started = time.monotonic()
    r = run(tmp_path, """
input: {id: X-1}
mocks:
  lookup:
    - {error: ToolUnavailable, times: 2}
    - output: {status: ok, amount: 3}
  pay:
    output: {payment: P-1, amount: 3, key: k}
expect: {path: [lookup, pay, done], status: succeeded}
""")
    assert r.passed, r.report()
    assert time.monotonic() - started < 5
    assert r.fake_seconds >= 2 * 3600  # two one-hour retry delays passed on the fake clock


def test_reviews_decide_in_order_and_a_timeout_can_pass(tmp_path):
    unsure = """
input: {id: X-1}
mocks:
  lookup:
    output: {status: unsure, amount: 5}
  pay:
    output: {payment: P-1, amount: 5, key: k}
"""
    r = run(tmp_path, unsure + """
reviews:
  - {state: review_it, decision: approve, by: alice}
expect: {path: lookup → review_it → pay → done, status: succeeded}
""")
    assert r.passed, r.report()
    r = run(tmp_path, unsure + """
reviews:
  - {timeout: true}
expect: {path: [lookup, review_it, rejected], status: failed, error: Rejected}
""", name="t.yaml")
    assert r.passed, r.report()
    assert r.fake_seconds >= 3600
    r = run(tmp_path, unsure + "expect: {path: [lookup, review_it], status: succeeded}\n", name="u.yaml")
    assert r.status == "failed"
    assert "status: expected succeeded, got paused (paused for a review the case gives no decision for" in r.report()
    r = run(tmp_path, unsure + """
reviews:
  - {state: elsewhere, decision: approve}
  - {decision: approve}
expect: {path: [lookup, review_it, pay, done], status: succeeded}
""", name="v.yaml")
    assert r.status == "failed"
    assert "paused for review at 'review_it', not 'elsewhere'" in r.report()
    assert "1 review step left unused" in r.report()
    r = run(tmp_path, unsure + """
reviews:
  - {state: review_it, decision: rejected}
expect: {path: [lookup, review_it, rejected], status: failed}
""", name="w.yaml")
    assert r.status == "error"  # located at the review step that gave the decision: line 9, column 5
    assert "w.yaml:9:5: the run could not start or continue: decision 'rejected' is not one of" in r.report()


def test_output_context_error_and_compensated_expectations(tmp_path):
    r = run(tmp_path, """
input: {id: X-1}
mocks:
  lookup:
    output: {status: ok, amount: 10}
  pay:
    output: {payment: P-1, amount: 10, key: k}
    verified: false
expect:
  path: [lookup, pay, failed]
  status: failed
  error: BoundaryViolation
  compensated: [pay]
""")
    assert r.passed, r.report()
    r = run(tmp_path, "input: {id: X-1}\n" + OK_MOCKS + """
expect:
  path: [lookup, pay, done]
  status: succeeded
  error: Rejected
  context: {amount: 10.0, payment: {id: P-1}, stamp: "x"}
  compensated: [pay]
""", name="d.yaml")
    text = r.report()
    assert "error: expected Rejected, got no error" in text
    assert 'context.payment: expected an object, got "P-1"' in text
    assert 'context.stamp: expected "x", got "' in text
    assert "context.amount" not in text  # 10 == 10.0
    assert "compensated: expected ['pay'], got []" in text


def test_input_that_the_flow_refuses_is_a_case_error(tmp_path):
    r = run(tmp_path, "input: {nope: 1}\n" + OK_MOCKS + "expect: {path: [lookup], status: succeeded}\n")
    assert r.status == "error"
    assert "orchestration/tests/f/c.yaml:1:8: the run could not start" in r.report()
    assert "input_schema" in r.report()
