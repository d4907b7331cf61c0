"""Rule health (gate/report.py and ``flowctl policy report``, issue 21 item 5): hit counts per rule
from recorded decisions, rates over the window, and rules that never triggered."""
from __future__ import annotations

import json

from click.testing import CliRunner

from support.enginekit import Harness, build, effect_contract, task
from test_store_query import TOOLS  # pay (its verify and undo) and ship

from flowctl.gate.report import rule_report

POLICY = """\
policy: cap
applies_to: [pay]
allow:
  - {field: input.amount, range: [0, 100]}
  - {field: input.amount, range: [0, 10], effect: warn}
  - {field: input.currency, in: [EUR]}
review_when: "input.amount > `90`"
"""


def _harness(tmp_path, store=None) -> Harness:
    files = {**effect_contract("pay", "pay"),
             **task("charge", "pay@^1", extra="input: {amount: input.amount, currency: input.currency}\n"),
             "policies/cap.yaml": POLICY,
             "transitions/f.yaml": "flow: f\nstart: charge\ntransitions:\n  - {from: charge, to: done}\n"}
    return Harness(build(tmp_path, files, TOOLS), store=store)


def _rules(found) -> dict:
    return {r["rule"]: r for r in found["rules"]}


def test_each_rule_counts_what_it_did_and_a_rule_that_never_fired_is_flagged(tmp_path):
    h = _harness(tmp_path)
    for amount, currency in ((5, "EUR"), (50, "EUR"), (500, "EUR"), (95, "EUR")):
        h.run(input={"amount": amount, "currency": currency})
    decided = [dict(e["data"], ts=e["ts"]) for e in h.events if e["type"] == "policy_decided"]
    rules = _rules(rule_report(h.project, decided))
    assert set(rules) == {"allow[0] range on input.amount", "allow[1] range on input.amount",
                          "allow[2] in on input.currency", "review_when"}
    hard, soft, currency, review = (rules[k] for k in ("allow[0] range on input.amount", "allow[1] range on input.amount",
                                                       "allow[2] in on input.currency", "review_when"))
    assert (hard["deny"], hard["allow"], hard["evaluated"], hard["deny_rate"]) == (1, 2, 4, 0.25)
    # 50 warned; 95 went to review, a decision that lists no warnings (the call has not gone on)
    assert (soft["warn"], soft["warn_rate"], soft["effect"]) == (1, 0.25, "warn")
    assert review["review"] == 1 and review["effect"] == "review"
    assert currency["never_triggered"] and not hard["never_triggered"] and currency["last_triggered"] is None
    assert hard["last_triggered"] == max(d["ts"] for d in decided if d["outcome"] == "deny")


def test_decisions_of_rules_no_longer_in_the_project_are_counted_apart(tmp_path):
    h = _harness(tmp_path)
    found = rule_report(h.project, [{"ts": 1.0, "outcome": "deny", "policy": "cap", "rule": "allow[9] gone"},
                                    {"ts": 2.0, "outcome": "deny", "policy": "", "rule": "default-deny"}])
    assert (found["decisions"], found["unknown"], found["no_policy"]) == (2, 1, 1)
    assert all(r["never_triggered"] for r in found["rules"])


def test_policy_report_reads_the_store_and_fails_on_never_only_when_asked(tmp_path):
    from flowctl.cli.main import main
    from flowctl.store.sql import open_store

    db = f"sqlite:///{tmp_path}/flowctl.db"
    store = open_store(db, create=True)
    h = _harness(tmp_path, store)
    h.clock._t = __import__("time").time() - 60  # decided a minute ago: inside the default window of 7 days
    h.run(input={"amount": 500, "currency": "EUR"})
    store.close()
    root = str(h.root)
    runner = CliRunner()
    done = runner.invoke(main, ["policy", "report", "--root", root, "--db", db, "--format", "json"])
    assert done.exit_code == 0, done.output
    rules = _rules(json.loads(done.output))
    assert rules["allow[0] range on input.amount"]["deny"] == 1 and rules["review_when"]["never_triggered"]
    strict = runner.invoke(main, ["policy", "report", "--root", root, "--db", db, "--fail-on-never"])
    assert strict.exit_code == 1 and "never triggered" in strict.output
    later = runner.invoke(main, ["policy", "report", "--root", root, "--db", db, "--since", "1s"])
    assert later.exit_code == 0 and "0 gate decisions" in later.output  # the decision is older than the window
    bad = runner.invoke(main, ["policy", "report", "--root", root, "--db", db, "--since", "yesterday-ish"])
    assert bad.exit_code == 2 and "--since" in bad.output and "Traceback" not in bad.output
