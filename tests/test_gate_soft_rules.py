"""Soft rules (issue 21, item 5): a policy check's ``effect`` — ``deny`` (hard, the default),
``warn`` (the call proceeds and the decision records why) or ``review`` (a human decides first)."""
from __future__ import annotations

import textwrap

from support.enginekit import Harness, build, effect_contract, task

TOOLS = """
LEDGER = []

def pay(input, call):
    LEDGER.append(("pay", input.get("amount")))
    return {"ok": True}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    LEDGER.append(("undo", input.get("amount")))
"""


def _project(tmp_path, allow: str) -> Harness:
    files = {**effect_contract("pay", "pay"), **task("charge", "pay@^1", extra="input: {amount: input.amount}\n"),
             "policies/cap.yaml": "policy: cap\napplies_to: [pay]\n" + textwrap.dedent(allow),
             "transitions/f.yaml": "flow: f\nstart: charge\ntransitions:\n  - {from: charge, to: done}\n"}
    return Harness(build(tmp_path, files, TOOLS))


def _decisions(h, run_id):
    return [e["data"] for e in h.events if e["type"] == "policy_decided" and e["run_id"] == run_id]


def test_a_soft_rule_lets_the_call_through_and_records_the_warning(tmp_path):
    h = _project(tmp_path, "allow:\n  - {field: input.amount, range: [0, 10], effect: warn}\n")
    done = h.run(input={"amount": 50})
    assert done.status == "succeeded" and h.ledger() == [("pay", 50)]
    decided = _decisions(h, done.run_id)[-1]
    assert decided["outcome"] == "allow" and "1 soft rule(s) warned" in decided["reason"]
    assert decided["warnings"] == [{"policy": "cap", "rule": "allow[0] range on input.amount",
                                    "reason": "input.amount is 50, outside [0, 10]"}]


def test_a_soft_rule_that_holds_records_no_warning_and_the_event_is_as_before(tmp_path):
    h = _project(tmp_path, "allow:\n  - {field: input.amount, range: [0, 10], effect: warn}\n")
    done = h.run(input={"amount": 5})
    assert done.status == "succeeded"
    assert "warnings" not in _decisions(h, done.run_id)[-1]


def test_a_hard_rule_beside_a_soft_one_still_denies(tmp_path):
    h = _project(tmp_path, "allow:\n  - {field: input.amount, range: [0, 10], effect: warn}\n"
                           "  - {field: input.amount, range: [0, 100]}\n")
    failed = h.run(input={"amount": 500})
    assert failed.status == "failed" and failed.error["type"] == "PolicyDenied" and h.ledger() == []
    assert _decisions(h, failed.run_id)[-1]["rule"] == "allow[1] range on input.amount"


def test_a_review_rule_pauses_before_the_call_and_an_approval_lets_only_that_call_through(tmp_path):
    h = _project(tmp_path, "allow:\n  - {field: input.amount, range: [0, 10], effect: review}\n")
    paused = h.run(input={"amount": 50})
    assert paused.status == "paused" and h.ledger() == []
    shown = paused.review["show"]
    assert shown["rule"] == "allow[0] range on input.amount" and shown["when"] is None
    done = h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve", by="ops")
    assert done.status == "succeeded" and h.ledger() == [("pay", 50)]
    assert "approved in review (cap: allow[0] range on input.amount)" in _decisions(h, done.run_id)[-1]["reason"]


def test_a_review_rule_rejected_denies_the_call(tmp_path):
    h = _project(tmp_path, "allow:\n  - {field: input.amount, range: [0, 10], effect: review}\n")
    paused = h.run(input={"amount": 50})
    done = h.engine.resume(paused.run_id, token=paused.review["token"], decision="reject", by="ops")
    assert done.status == "failed" and done.error["type"] == "PolicyDenied" and h.ledger() == []


def test_a_review_rule_that_holds_does_not_pause(tmp_path):
    h = _project(tmp_path, "allow:\n  - {field: input.amount, range: [0, 10], effect: review}\n")
    assert h.run(input={"amount": 3}).status == "succeeded" and h.ledger() == [("pay", 3)]


def test_an_unknown_effect_is_a_located_schema_error(tmp_path):
    from flowctl.definition.loader import load_project

    root = build(tmp_path, {**effect_contract("pay", "pay"),
                            "policies/cap.yaml": "policy: cap\napplies_to: [pay]\n"
                                                 "allow:\n  - {field: input.amount, range: [0, 10], effect: maybe}\n"},
                 TOOLS)
    found = [d for d in load_project(root).diagnostics if "cap.yaml" in str(d.file)]
    assert found and found[0].line == 4 and "maybe" in found[0].message


def test_the_diff_names_a_hard_rule_made_soft_as_a_risk():
    from flowctl.diff.fields import policy_risks

    before = {"policy": "cap", "applies_to": ["pay"], "allow": [{"field": "input.amount", "range": [0, 10]}]}
    for effect, words in (("warn", "only warns"), ("review", "asks a human")):
        after = {**before, "allow": [{"field": "input.amount", "range": [0, 10], "effect": effect}]}
        risks = policy_risks(before, after, "cap")
        assert [r.code for r in risks] == ["policy_loosened"] and words in risks[0].message
    hardened = policy_risks({**before, "allow": [{"field": "input.amount", "range": [0, 10], "effect": "warn"}]},
                            before, "cap")
    assert hardened == []


def test_validate_warns_of_a_policy_that_only_warns(tmp_path):
    from support.helpers import of, problems

    root = build(tmp_path, {**effect_contract("pay", "pay"),
                            "policies/cap.yaml": "policy: cap\napplies_to: [pay]\n"
                                                 "allow:\n  - {field: input.amount, range: [0, 10], effect: warn}\n"},
                 TOOLS)
    found = of(problems(root), "FC703")
    assert found and "only warns" in found[0].message and found[0].line == 4
    root2 = build(tmp_path / "two", {**effect_contract("pay", "pay"),
                                     "policies/cap.yaml": "policy: cap\napplies_to: [pay]\nallow:\n"
                                                          "  - {field: input.amount, range: [0, 10], effect: warn}\n"
                                                          "  - {field: input.amount, range: [0, 99]}\n"}, TOOLS)
    assert not of(problems(root2), "FC703")
