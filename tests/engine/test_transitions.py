"""Taking a transition (flowctl.engine.transitions): first match in file order, JMESPath truthiness."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build
from support.engineflows import TOOLS, flow

FLOW = """flow: f
start: a
transitions:
  - {{from: a, to: first, when: "{when}"}}
  - {{from: a, to: second, when: 'input.go'}}
  - {{from: a, to: done}}
  - {{from: first, to: done}}
  - {{from: second, to: done}}
"""


def _project(tmp_path, when):
    return build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n", "states/first.yaml": "id: first\ntype: pass\n",
                            "states/second.yaml": "id: second\ntype: pass\n", "transitions/f.yaml": FLOW.format(when=when)})


@pytest.mark.parametrize("value, taken", [
    ("`0`", "first"), ("'no'", "first"), ("`[0]`", "first"),            # true in JMESPath (0 too)
    ("`false`", "second"), ("`null`", "second"), ("''", "second"), ("`[]`", "second"), ("`{}`", "second"),
])
def test_the_first_transition_whose_when_is_truthy_is_taken(tmp_path, value, taken):
    h = Harness(_project(tmp_path, value))
    result = h.run(input={"go": True})
    assert result.path == ["a", taken, "done"]
    event = next(e for e in h.events if e["type"] == "transition_taken")
    assert event["data"]["to"] == taken
    assert [c["when"] for c in event["data"]["conditions"]] == [value, "input.go"][:1 if taken == "first" else 2]


def test_a_transition_without_when_is_taken_when_none_before_it_holds(tmp_path):
    result = Harness(_project(tmp_path, "`false`")).run(input={"go": False})
    assert result.path == ["a", "done"]


def test_set_reads_the_scope_before_the_transition_and_dotted_keys_nest(tmp_path):
    root = build(tmp_path, {
        "states/a.yaml": "id: a\ntype: pass\nset: {n: '`1`'}\n",
        **flow("a", "  - from: a\n    to: done\n    set: {n: 'add(context.n, `1`)', old: context.n, results.step1: context.n}\n"),
    }, TOOLS)
    result = Harness(root).run()
    assert result.output == {"n": 2, "old": 1, "results": {"step1": 1}}

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

def test_uuid_and_now_are_recorded_in_the_audit_log(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done, set: {id: 'uuid()', at: 'now()'}}\n")}, TOOLS)
    h = Harness(root)
    result = h.run()
    taken = next(e for e in h.events if e["type"] == "transition_taken")
    recorded = {r["kind"]: r["value"] for r in taken["data"]["recorded"]}
    assert recorded == {"uuid": result.output["id"], "now": result.output["at"]}
    assert result.output["at"].startswith("2026-01-01T00:00:00")  # the fake clock


def test_a_failing_set_expression_names_its_own_key_and_the_transition(tmp_path):
    # the error names the line of the key that failed (not the first key of the set) and the transition
    # it belongs to; a fail state re-raising the caught error keeps the state the error was raised in
    root = build(tmp_path, {
        "states/a.yaml": "id: a\ntype: pass\n",
        "states/failed.yaml": "id: failed\ntype: fail\nerror: {expr: error.type}\ncause: {expr: error.message}\n",
        **flow("a", "  - from: a\n    to: done\n    set:\n      ok: input.email\n      m: abs(input.email)\n",
               extra="on_error:\n  - {errors: ['*'], goto: failed}\n"),
    }, TOOLS)
    result = Harness(root).run(input={"email": "ada@example.com"})
    assert result.status == "failed"
    assert result.error["type"] == "ExpressionError" and result.error["code"] == "EXPRESSION_ERROR"
    assert result.error["state"] == "a"
    assert "transitions/f.yaml:9:10" in result.error["message"]
    assert "'m' in the transition a → done" in result.error["message"]
