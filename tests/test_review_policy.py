"""Review states (one-time tokens, timeouts) and the default-deny policy gate."""
from __future__ import annotations

import os
import subprocess
import textwrap

import pytest

from support.enginekit import Harness, allow_all, build, contract, effect_contract, sqlite_store, task
from flowctl.errors import DecisionInvalid, UsageError
from support.helpers import FLOWCTL_EXE

TOOLS = """
LEDGER = []

def pay(input, call):
    LEDGER.append(("pay", input.get("id")))
    return {"ok": True}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    LEDGER.append(("undo", input.get("id")))

def mail(input, call):
    LEDGER.append(("mail", input.get("to")))
    return {"sent": True}

def verify_mail(input, output, call):
    return True

def undo_mail(input, output, call):
    LEDGER.append(("recall", input.get("to")))

def notify(input, call):
    LEDGER.append(("notify", input["run_id"], input["token"], tuple(input["decisions"])))
    return {}
"""

REVIEW_FLOW = {
    **effect_contract("pay", "pay"), **allow_all("pay"), **contract("notify", "notify"),
    **task("charge", "pay@1.0.0", extra="input: {id: \"'1'\"}\n"),
    "states/approve_refund.yaml": textwrap.dedent("""\
        id: approve_refund
        type: review
        show: {amount: input.amount}
        decisions: [approve, reject]
        notify: notify@^1
        timeout: 2h
        on_timeout: {goto: timed_out}
        """),
    "states/timed_out.yaml": "id: timed_out\ntype: fail\nerror: ReviewTimeout\n",
    "states/rejected.yaml": "id: rejected\ntype: fail\nerror: Rejected\ncause: {expr: review.data.note}\n",
    "transitions/f.yaml": textwrap.dedent("""\
        flow: f
        start: charge
        transitions:
          - {from: charge, to: approve_refund}
          - {from: approve_refund, to: done, when: "review.decision == 'approve'", set: {by: review.by}}
          - {from: approve_refund, to: rejected}
        """),
}


def test_pause_and_resume_with_the_right_token_runs_nothing_twice(tmp_path):
    h = Harness(build(tmp_path, REVIEW_FLOW, TOOLS), store=sqlite_store(tmp_path))
    paused = h.run(input={"amount": 42})
    assert paused.status == "paused" and paused.exit_code == 3
    assert paused.review["show"] == {"amount": 42} and paused.review["decisions"] == ["approve", "reject"]
    token = paused.review["token"]
    assert len(token) >= 22  # >= 128 bits, url-safe
    row = h.store.get_run(paused.run_id)
    assert token not in str(row) and token not in str(h.store.events(paused.run_id))  # only its hash is stored
    assert h.ledger() == [("pay", "1"), ("notify", paused.run_id, token, ("approve", "reject"))]
    done = h.engine.resume(paused.run_id, token=token, decision="approve", by="alice")
    assert done.status == "succeeded" and done.output == {"by": "alice"}
    assert [x for x in h.ledger() if x[0] == "pay"] == [("pay", "1")]  # the side effect before the review ran once
    decided = [e for e in h.store.events(paused.run_id) if e["type"] == "review_decided"]
    assert decided[0]["data"]["decision"] == "approve" and decided[0]["data"]["by"] == "alice"


def test_wrong_reused_and_unknown_decisions_are_refused_and_recorded(tmp_path):
    h = Harness(build(tmp_path, REVIEW_FLOW, TOOLS), store=sqlite_store(tmp_path))
    paused = h.run(input={"amount": 1})
    with pytest.raises(UsageError, match="wrong token") as refused:
        h.engine.resume(paused.run_id, token="guess", decision="approve")
    assert f"flowctl reviews --reissue {paused.run_id}" in refused.value.hint  # the way out of a lost token
    with pytest.raises(DecisionInvalid, match="not one of approve, reject"):  # a UsageError: exit 2
        h.engine.resume(paused.run_id, token=paused.review["token"], decision="maybe")
    done = h.engine.resume(paused.run_id, token=paused.review["token"], decision="reject", data={"note": "fraud"})
    assert done.status == "failed" and done.error == {"type": "Rejected", "code": "Rejected", "message": "fraud",
                                                      "state": "rejected"}
    with pytest.raises(UsageError, match="already ended"):
        h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    refused = [e["data"]["reason"] for e in h.store.events(paused.run_id) if e["type"] == "review_refused"]
    assert refused == ["wrong token"]


def test_expired_review_is_refused_and_times_out_after_a_restart(tmp_path):
    root = build(tmp_path, REVIEW_FLOW, TOOLS)
    store = sqlite_store(tmp_path)
    first = Harness(root, store=store)
    paused = first.run(input={"amount": 1})
    # the process is gone; a new one (new engine, same store) comes back after the deadline
    later = Harness(root, store=store)
    later.clock.advance(first.clock.time() - later.clock.time() + 2 * 3600 + 1)
    with pytest.raises(UsageError, match="expired"):
        later.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    (result,) = later.engine.recover()
    assert result.status == "failed" and result.path[-1] == "timed_out"
    assert "review_timed_out" in [e["type"] for e in store.events(paused.run_id)]


def test_cancel_of_a_paused_review_compensates(tmp_path):
    h = Harness(build(tmp_path, REVIEW_FLOW, TOOLS))
    paused = h.run(input={"amount": 1})
    assert h.engine.cancel(paused.run_id).status == "cancelled"
    assert h.ledger()[-1] == ("undo", "1")


# ----------------------------------------------------------------------------- the gate
def _gate_project(tmp_path, policy: str, name="p"):
    return build(tmp_path, {
        **effect_contract("mail", "mail"),
        **task("send", "mail@1.0.0", extra="input: {to: input.to, domain: input.domain, mb: input.mb, n: input.n}\n"),
        "policies/outbound.yaml": "policy: outbound\napplies_to: [mail]\n" + textwrap.dedent(policy),
        "transitions/f.yaml": "flow: f\nstart: send\ntransitions:\n  - {from: send, to: done}\n",
    }, TOOLS, name=name)


@pytest.mark.parametrize("check, allowed, denied", [
    ("{field: input.domain, equals: corp.example}", {"domain": "corp.example"}, {"domain": "evil.example"}),
    ("{field: input.domain, in: [corp.example, shop.example]}", {"domain": "shop.example"}, {"domain": "x.example"}),
    ("{field: input.mb, range: [0, 10]}", {"mb": 10}, {"mb": 10.5}),
    ("{field: input.mb, range: [null, 10]}", {"mb": -3}, {"mb": "5"}),
    ("{field: input.to, regex: '[a-z.]+@corp\\.example'}", {"to": "ann@corp.example"}, {"to": "ann@corp.example.evil"}),
])
def test_each_operator_allows_and_denies(tmp_path, check, allowed, denied):
    h = Harness(_gate_project(tmp_path, f"allow:\n  - {check}\n"))
    assert h.run(input=allowed).status == "succeeded"
    result = h.run(input=denied)
    assert result.error["code"] == "POLICY_DENIED"
    decision = [e for e in h.events if e["type"] == "policy_decided"][-1]["data"]
    assert decision["outcome"] == "deny" and decision["policy"] == "outbound" and decision["rule"].startswith("allow[0]")
    assert len([x for x in h.ledger() if x[0] == "mail"]) == 1


def test_dedupe_inside_and_outside_the_window(tmp_path):
    from flowctl.gate.policy import Gate

    h = Harness(_gate_project(tmp_path, "allow: []\ndedupe: {window: 30s}\n"))
    contract_ = h.project.resolve_tool("mail@1.0.0")
    gate = Gate(h.project, h.store, h.clock)
    assert gate.decide(contract_, {"to": "a"}, run_id="r1", flow="f").outcome == "allow"
    again = gate.decide(contract_, {"to": "a"}, run_id="r1", flow="f")
    assert again.outcome == "deny" and again.rule == "dedupe"
    assert gate.decide(contract_, {"to": "b"}, run_id="r1", flow="f").outcome == "allow"  # other input
    assert gate.decide(contract_, {"to": "a"}, run_id="r2", flow="f").outcome == "allow"  # other run
    h.clock.advance(31)
    assert gate.decide(contract_, {"to": "a"}, run_id="r1", flow="f").outcome == "allow"


def test_review_when_pauses_before_the_tool(tmp_path):
    h = Harness(_gate_project(tmp_path, "allow: []\nreview_when: 'input.n > `10`'\n"))
    assert h.run(input={"n": 2}).status == "succeeded"
    paused = h.run(input={"n": 12, "to": "many"})
    assert paused.status == "paused"
    assert ("mail", "many") not in h.ledger()  # not invoked before the decision
    done = h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    assert done.status == "succeeded" and ("mail", "many") in h.ledger()
    paused = h.run(input={"n": 12, "to": "nope"})
    rejected = h.engine.resume(paused.run_id, token=paused.review["token"], decision="reject", by="bob")
    assert rejected.error["code"] == "POLICY_DENIED" and ("mail", "nope") not in h.ledger()


def test_trace_names_who_decided_a_gate_review(tmp_path):
    from flowctl.store.history import steps_of

    h = Harness(_gate_project(tmp_path, "allow: []\nreview_when: 'input.n > `10`'\n"))
    paused = h.run(input={"n": 12, "to": "many"})
    h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve", by="alice")
    (step,) = [s for s in steps_of(h.store.events(paused.run_id)) if s["tool"]]
    assert step["policy"].startswith("review, approve by alice → allow (") and step["outcome"] == "ok"
    paused = h.run(input={"n": 12, "to": "nope"})
    h.engine.resume(paused.run_id, token=paused.review["token"], decision="reject", by="bob")
    (step,) = [s for s in steps_of(h.store.events(paused.run_id)) if s["state"] == paused.review["state"]]
    assert step["policy"].startswith("review, reject by bob → ") and step["outcome"] == "failed", step


def test_rate_limit_holds_across_two_processes(tmp_path):
    root = _gate_project(tmp_path, "allow: []\nrate: {max: 1, window: 1m, per: flow}\n")
    env = dict(os.environ)
    env.pop("FLOWCTL_DEBUG", None)
    db = f"sqlite:///{tmp_path}/shared.db"
    runs = [subprocess.run([FLOWCTL_EXE, "run", "f", "--db", db, "-q", "--input", f'{{"to": "p{i}"}}'], cwd=root,
                           capture_output=True, text=True, env=env, timeout=120) for i in range(2)]
    assert runs[0].returncode == 0, runs[0].stdout + runs[0].stderr
    assert runs[1].returncode == 1 and "rate" in runs[1].stdout and "POLICY_DENIED" in runs[1].stdout


def test_policy_check_counts_read_only_tools_as_allowed(tmp_path):
    from flowctl.gate.policy import Gate

    h = Harness(build(tmp_path, {**contract("look", "pay"), **task("a", "look@1.0.0"),
                                 "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: done}\n"}, TOOLS))
    decision = Gate(h.project, h.store, h.clock).decide(h.project.resolve_tool("look@1.0.0"), {})
    assert (decision.outcome, decision.rule) == ("allow", "read-only")


def test_a_lost_token_is_replaced_by_reissue(tmp_path):
    h = Harness(build(tmp_path, REVIEW_FLOW, TOOLS), store=sqlite_store(tmp_path))
    paused = h.run(input={"amount": 1})
    new = h.engine.reissue_token(paused.run_id, by="ops")
    assert new != paused.review["token"]
    # the old token is told apart from a wrong one (new-user finding: it said "wrong token")
    with pytest.raises(UsageError, match="was replaced by a newer one") as replaced:
        h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    assert "newest token" in replaced.value.hint
    with pytest.raises(UsageError, match="wrong token"):
        h.engine.resume(paused.run_id, token="guess", decision="approve")
    assert h.engine.resume(paused.run_id, token=new, decision="approve").status == "succeeded"
    assert "review_token_reissued" in [e["type"] for e in h.store.events(paused.run_id)]


def test_json_equality_true_is_not_one(tmp_path):
    h = Harness(_gate_project(tmp_path, "allow:\n  - {field: input.n, equals: true}\n  - {field: input.mb, in: [0, 1]}\n"))
    assert h.run(input={"n": True, "mb": 1}).status == "succeeded"
    assert h.run(input={"n": 1, "mb": 1}).error["code"] == "POLICY_DENIED"
    assert h.run(input={"n": True, "mb": False}).error["code"] == "POLICY_DENIED"


def test_review_timeout_as_an_expression(tmp_path):
    files = dict(REVIEW_FLOW)
    files["states/approve_refund.yaml"] = files["states/approve_refund.yaml"].replace("timeout: 2h", "timeout: {expr: input.seconds}")
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    paused = h.run(input={"amount": 1, "seconds": 60})
    assert paused.review["deadline"] == pytest.approx(h.clock.time() + 60)
    h.clock.advance(61)
    (result,) = h.engine.recover()
    assert result.path[-1] == "timed_out"


def test_remind_after_notifies_again_with_a_new_token(tmp_path):
    files = dict(REVIEW_FLOW)
    files["states/approve_refund.yaml"] = files["states/approve_refund.yaml"].replace("timeout: 2h", "timeout: 2h\nremind_after: 30m")
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    paused = h.run(input={"amount": 1})
    h.clock.advance(31 * 60)
    assert h.engine.fire_due_reviews() == []  # not timed out yet; reminded instead
    notes = [x for x in h.ledger() if x[0] == "notify"]
    assert len(notes) == 2 and notes[1][2] != paused.review["token"]
    assert h.engine.resume(paused.run_id, token=notes[1][2], decision="approve").status == "succeeded"
    h.clock.advance(3 * 3600)
    assert h.engine.fire_due_reviews() == []  # nothing left to fire
