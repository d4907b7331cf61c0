"""Redrive (flowctl.engine.redrive): a failed run continues from the step that failed, under its
pinned definition, recorded with who and why; an edited context is recorded before/after."""
from __future__ import annotations

import pytest

from flowctl.engine.redrive import redrive
from flowctl.engine.tools import resolve
from flowctl.errors import UsageError
from flowctl.store.audit import verify_run
from flowctl.store.sql import open_store
from support.enginekit import Harness, allow_all, build, contract, effect_contract, sqlite_store, task
from support.pg import pg_url  # noqa: F401 - the fixture

TOOLS = """
LEDGER = []
BROKEN = [True]

def pay(input, call):
    LEDGER.append(("pay", input["id"]))
    return {"paid": input["id"]}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    LEDGER.append(("undo", input["id"]))

def ship(input, call):
    LEDGER.append(("ship", input["to"]))
    if BROKEN[0]:
        raise ConnectionError("carrier down")
    return {"shipped": input["to"]}
"""

FILES = {
    **effect_contract("pay", "pay"),
    **contract("ship", "ship"),
    **allow_all("pay"),
    **task("p", "pay@1.0.0", extra="input: {id: input.id}\n"),
    **task("s", "ship@1.0.0", extra="input: {to: context.to}\n"),
    "states/setto.yaml": "id: setto\ntype: pass\nset: {to: input.to}\n",
    "states/stop.yaml": "id: stop\ntype: fail\nerror: Stopped\n",
    # a failure keeps what was done (no compensation): a redrive continues a run whose effects stand
    "transitions/f.yaml": ("flow: f\nversion: 1\nstart: setto\ntransitions:\n"
                           "  - {from: setto, to: p}\n  - {from: p, to: s}\n  - {from: s, to: done}\n"
                           "on_error:\n  - {errors: [\"*\"], compensate: false}\n"),
    "transitions/h.yaml": ("flow: h\nversion: 1\nstart: setto\ntransitions:\n"
                           "  - {from: setto, to: p}\n  - {from: p, to: s}\n  - {from: s, to: done}\n"),
    "transitions/g.yaml": "flow: g\nversion: 1\nstart: stop\ntransitions: []\n",
}


def harness(tmp_path, store=None):
    return Harness(build(tmp_path, FILES, TOOLS), store=store)


def fix(h):
    resolve("tk:BROKEN", str(h.root / "orchestration" / "tools"))[0] = False


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_failed_run_continues_from_the_failed_step_after_its_tool_is_fixed(tmp_path, backend, request):
    store = sqlite_store(tmp_path) if backend == "sqlite" else open_store(request.getfixturevalue("pg_url"))
    h = harness(tmp_path, store)
    failed = h.run("f", {"id": "1", "to": "Oslo"})
    assert failed.status == "failed" and failed.error["state"] == "s"
    assert h.ledger() == [("pay", "1"), ("ship", "Oslo")]  # the flow's handler kept the payment
    fix(h)
    result = redrive(h.engine, failed.run_id, by="key:ann", reason="carrier back up")
    assert result.status == "succeeded" and result.output == {"to": "Oslo"}
    assert h.ledger()[2:] == [("ship", "Oslo")]  # from the failed step: setto and p are not run again
    row = h.store.get_run(failed.run_id)
    assert row["status"] == "succeeded" and row["error"] is None
    redriven = [e for e in h.store.events(failed.run_id) if e["type"] == "run_redriven"]
    assert len(redriven) == 1
    assert redriven[0]["data"]["by"] == "key:ann" and redriven[0]["data"]["reason"] == "carrier back up"
    assert redriven[0]["state"] == "s" and redriven[0]["data"]["error"]["state"] == "s"
    assert verify_run(row, h.store.events(failed.run_id)) == []  # one run, one unbroken chain
    store.close()


def test_an_edited_context_is_used_and_recorded_before_and_after(tmp_path):
    h = harness(tmp_path)
    failed = h.run("f", {"id": "1", "to": "Atlantis"})
    fix(h)
    result = redrive(h.engine, failed.run_id, by="ann", reason="typo", context={"to": "Athens"})
    assert result.status == "succeeded" and result.output == {"to": "Athens"}
    assert h.ledger()[-1] == ("ship", "Athens")
    ev = [e for e in h.store.events(failed.run_id) if e["type"] == "context_overridden"]
    assert [(e["data"]["before"], e["data"]["after"], e["data"]["by"]) for e in ev] == [
        ({"to": "Atlantis"}, {"to": "Athens"}, "ann")]


def test_a_redrive_that_fails_again_fails_the_run_again_with_the_new_error(tmp_path):
    h = harness(tmp_path)
    failed = h.run("f", {"id": "1", "to": "Oslo"})
    again = redrive(h.engine, failed.run_id)
    assert again.status == "failed" and again.error["state"] == "s"
    assert h.ledger() == [("pay", "1"), ("ship", "Oslo"), ("ship", "Oslo")]  # the payment is not made twice


def test_a_run_whose_failure_compensated_its_effects_is_not_redriven(tmp_path):
    # (break-it finding: the redrive "succeeded" after the payment it rested on had been refunded)
    h = harness(tmp_path)
    failed = h.run("h", {"id": "1", "to": "Oslo"})
    assert h.ledger() == [("pay", "1"), ("ship", "Oslo"), ("undo", "1")]  # the default handler compensated
    fix(h)
    with pytest.raises(UsageError, match=r"undid 1 side effect\(s\) \(pay@1.0.0\)"):
        redrive(h.engine, failed.run_id, by="ann")
    assert h.store.get_run(failed.run_id)["status"] == "failed"
    assert "run_redriven" not in [e["type"] for e in h.store.events(failed.run_id)]


def test_an_edit_of_a_context_key_a_policy_reads_is_refused(tmp_path):
    # (break-it finding: editing context.limit turned the gate's denial into an executed charge)
    files = {**FILES, "policies/allow_all.yaml": "policy: allow_all\napplies_to: [pay]\nallow:\n"
                                                 "  - {field: input.id, in: {expr: context.allowed}}\n",
             "states/setto.yaml": "id: setto\ntype: pass\nset: {to: input.to, allowed: \"['2']\"}\n"}
    h = Harness(build(tmp_path, files, TOOLS))
    failed = h.run("f", {"id": "1", "to": "Oslo"})
    assert failed.error["type"] == "PolicyDenied" and h.ledger() == []
    with pytest.raises(UsageError, match="allowed, which the policy gate reads \\(allow_all\\)"):
        redrive(h.engine, failed.run_id, context={"to": "Oslo", "allowed": ["1"]}, by="ann")
    assert h.ledger() == [] and h.store.get_run(failed.run_id)["status"] == "failed"


@pytest.mark.parametrize("case", ["succeeded", "fail_state", "bad_context"])
def test_what_cannot_be_redriven_is_refused_and_nothing_is_recorded(tmp_path, case):
    h = harness(tmp_path)
    fix(h)
    if case == "succeeded":
        run = h.run("f", {"id": "1", "to": "Oslo"})
        match, kw = "only a failed run can be redriven", {}
    elif case == "fail_state":
        run = h.run("g", {})
        match, kw = "a fail state of its flow", {}
    else:
        resolve("tk:BROKEN", str(h.root / "orchestration" / "tools"))[0] = True
        run = h.run("f", {"id": "1", "to": "Oslo"})
        match, kw = "must be a JSON object", {"context": ["not", "an", "object"]}
    before = h.store.get_run(run.run_id)["last_seq"]
    with pytest.raises(UsageError, match=match):
        redrive(h.engine, run.run_id, **kw)
    assert h.store.get_run(run.run_id)["last_seq"] == before


def test_a_redrive_that_read_the_run_before_another_won_is_refused_and_calls_nothing(tmp_path, monkeypatch):
    from flowctl.errors import RunConflict

    h = harness(tmp_path, sqlite_store(tmp_path))
    failed = h.run("f", {"id": "1", "to": "Oslo"})
    stale = h.store.get_run(failed.run_id)  # the second redrive read the row here ...
    fix(h)
    assert redrive(h.engine, failed.run_id, by="ann").status == "succeeded"  # ... then the first one won
    calls = len(h.ledger())
    monkeypatch.setattr(h.store, "get_run", lambda run_id: dict(stale))
    with pytest.raises(RunConflict):
        redrive(h.engine, failed.run_id, by="bob")
    assert len(h.ledger()) == calls  # nothing called again
    monkeypatch.undo()
    assert [e["data"]["by"] for e in h.store.events(failed.run_id) if e["type"] == "run_redriven"] == ["ann"]
