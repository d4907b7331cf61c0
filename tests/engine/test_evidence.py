"""Evidence of every boundary crossing (issue 13, item 5): output and verify verdict of each side
effect, and the contract's ``snapshot`` of the state it changes, before and after."""
from __future__ import annotations

import subprocess

from support.enginekit import Harness, allow_all, build, effect_contract, sqlite_store, task
from support.helpers import FLOWCTL_EXE

TOOLS = """
LEDGER = []
BALANCE = {"acct": 100}
VERDICT = [True]

def pay(input, call):
    BALANCE["acct"] -= input["amount"]
    LEDGER.append(("pay", input["amount"]))
    return {"paid": input["amount"], "card_number": "4111111111111111"}

def verify_pay(input, output, call):
    return VERDICT[0]

def undo_pay(input, output, call):
    BALANCE["acct"] += input["amount"]
    LEDGER.append(("undo", input["amount"]))

def balance(input, call):
    return {"acct": BALANCE["acct"], "card_number": "4111111111111111"}

def broken_snapshot(input, call):
    raise RuntimeError("ledger unreachable")
"""


def _flow(snapshot="tk:balance"):
    extra = "sensitive: [card_number]\n" + (f"snapshot: {snapshot}\n" if snapshot else "")
    return {**effect_contract("pay", "pay", extra=extra), **allow_all("pay"),
            **task("charge", "pay@1.0.0", extra="input: {amount: input.amount}\n"),
            "transitions/f.yaml": "flow: f\nstart: charge\ntransitions:\n  - {from: charge, to: done}\n"}


def _events(h, run_id, *types):
    return [e for e in h.store.events(run_id) if not types or e["type"] in types]


def test_boundary_evidence_a_failed_verify_keeps_the_output_and_the_verdict(tmp_path):
    h = Harness(build(tmp_path, _flow(snapshot=None), TOOLS), store=sqlite_store(tmp_path))
    from flowctl.engine.tools import resolve

    resolve("tk:VERDICT", str(h.root / "orchestration" / "tools"))[0] = False
    result = h.run(input={"amount": 30})
    assert result.status == "failed" and result.error["code"] == "BOUNDARY_VIOLATION"
    failed = [e for e in _events(h, result.run_id, "verify_failed") if "output" in e["data"]]
    assert len(failed) == 1
    assert failed[0]["data"]["verified"] is False
    assert failed[0]["data"]["output"] == {"paid": 30, "card_number": "***redacted***"}
    step = [s for s in h.store.steps(result.run_id) if s["status"] == "failed"]
    assert [s["output"]["paid"] for s in step] == [30]  # the step record keeps it too


def test_boundary_evidence_a_passing_verify_leaves_an_event(tmp_path):
    h = Harness(build(tmp_path, _flow(snapshot=None), TOOLS), store=sqlite_store(tmp_path))
    result = h.run(input={"amount": 5})
    assert result.status == "succeeded"
    types = [e["type"] for e in _events(h, result.run_id)]
    assert types.index("tool_invoked") < types.index("verify_passed") < types.index("tool_succeeded")
    assert _events(h, result.run_id, "verify_passed")[0]["data"] == {"tool": "pay@1.0.0", "verified": True}


def test_boundary_evidence_snapshots_before_and_after_each_effect(tmp_path):
    h = Harness(build(tmp_path, _flow(), TOOLS), store=sqlite_store(tmp_path))
    result = h.run(input={"amount": 30})
    assert result.status == "succeeded"
    types = [e["type"] for e in _events(h, result.run_id)]
    snaps = _events(h, result.run_id, "effect_snapshot")
    assert [(s["data"]["phase"], s["data"]["snapshot"]["acct"]) for s in snaps] == [("before", 100), ("after", 70)]
    assert all(s["data"]["snapshot"]["card_number"] == "***redacted***" for s in snaps)
    assert types.index("effect_snapshot") < types.index("tool_invoked")  # taken before the effect ...
    assert types.index("verify_passed") < len(types) - 1 - types[::-1].index("effect_snapshot")  # ... and after verify
    log = subprocess.run([FLOWCTL_EXE, "audit", "log", result.run_id, "--db", f"sqlite:///{tmp_path}/flowctl.db"],
                         cwd=h.root, capture_output=True, text=True, timeout=60)
    lines = [line for line in log.stdout.splitlines() if "effect_snapshot" in line]
    assert len(lines) == 2 and '"phase": "before"' in lines[0] and '"phase": "after"' in lines[1]
    assert "4111" not in log.stdout


def test_boundary_evidence_a_snapshot_that_fails_is_recorded_and_the_call_goes_on(tmp_path):
    h = Harness(build(tmp_path, _flow("tk:broken_snapshot"), TOOLS), store=sqlite_store(tmp_path))
    result = h.run(input={"amount": 1})
    assert result.status == "succeeded"
    snaps = _events(h, result.run_id, "effect_snapshot")
    assert [(s["data"]["phase"], s["data"]["error"]) for s in snaps] == [("before", "RuntimeError"), ("after", "RuntimeError")]
    assert "ledger unreachable" in snaps[0]["data"]["message"]


def test_boundary_evidence_a_failed_verify_is_snapshotted_before_compensation(tmp_path):
    h = Harness(build(tmp_path, _flow(), TOOLS), store=sqlite_store(tmp_path))
    from flowctl.engine.tools import resolve

    resolve("tk:VERDICT", str(h.root / "orchestration" / "tools"))[0] = False
    result = h.run(input={"amount": 40})
    assert result.status == "failed"
    snaps = _events(h, result.run_id, "effect_snapshot")
    assert [(s["data"]["phase"], s["data"]["snapshot"]["acct"]) for s in snaps] == [("before", 100), ("after", 60)]
    types = [e["type"] for e in _events(h, result.run_id)]
    assert len(types) - 1 - types[::-1].index("effect_snapshot") < types.index("compensation_started")


def test_a_snapshot_that_cannot_be_imported_is_fc603(make_project):
    from support.helpers import problems

    root = build(make_project({}).parent, _flow("tk:no_such_function"), TOOLS, name="imp")
    found = [d for d in problems(root, import_check=True) if d.code == "FC603"]
    assert len(found) == 1 and found[0].message.startswith("snapshot tk:no_such_function")
