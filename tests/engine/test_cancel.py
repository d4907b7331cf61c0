"""Cancelling a run (flowctl.engine.cancel): it ends ``cancelled``, its completed side effects
undone newest first unless told not to; a run that already ended cannot be cancelled."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build
from support.engineflows import SAGA, TOOLS, flow, linear, saga_states
from flowctl.errors import UsageError

WAITING = {**SAGA, **saga_states(2), "states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
           **flow("p1", linear("p1", "p2", "w"))}


def test_cancel_of_a_waiting_run_undoes_its_side_effects_newest_first(tmp_path):
    h = Harness(build(tmp_path, WAITING, TOOLS))
    parked = h.run()
    assert parked.status == "waiting"
    result = h.engine.cancel(parked.run_id, by="ann")
    assert result.status == "cancelled" and result.exit_code == 1
    assert result.error == {"type": "Cancelled", "code": "CANCELLED", "message": "cancelled by ann", "state": "w"}
    assert h.ledger() == [("pay", "1"), ("pay", "2"), ("undo", "2"), ("undo", "1")]
    assert h.store.get_run(parked.run_id)["status"] == "cancelled"
    assert "run_cancelled" in h.types(parked.run_id)


def test_cancel_without_compensation_undoes_nothing(tmp_path):
    h = Harness(build(tmp_path, WAITING, TOOLS))
    parked = h.run()
    result = h.engine.cancel(parked.run_id, compensate=False)
    assert result.status == "cancelled" and result.error["message"] == "cancelled by a user"
    assert [x for x in h.ledger() if x[0] == "undo"] == []


def test_a_run_that_ended_cannot_be_cancelled_and_is_left_as_it_was(tmp_path):
    h = Harness(build(tmp_path, WAITING, TOOLS))
    parked = h.run()
    h.engine.cancel(parked.run_id)
    before = h.store.get_run(parked.run_id)
    with pytest.raises(UsageError, match="already ended \\(cancelled\\); there is nothing to cancel"):
        h.engine.cancel(parked.run_id)
    assert h.store.get_run(parked.run_id)["last_seq"] == before["last_seq"]  # nothing recorded
    assert [x for x in h.ledger() if x[0] == "undo"] == [("undo", "2"), ("undo", "1")]  # undone once


DIES_MID_CALL = """
LEDGER = []
HOOKS = {"die": True}

def pay(input, call):
    LEDGER.append(("pay", call.idempotency_key))
    if HOOKS.pop("die", None):
        raise KeyboardInterrupt  # the process dies here, the payment made: the call stays in flight

def verify_pay(input, output, call):
    return {"paid": True} if ("pay", call.idempotency_key) in LEDGER else False

def undo_pay(input, output, call):
    LEDGER.append(("undo", call.idempotency_key))
"""


def test_a_run_stopped_by_a_failed_sibling_keeps_its_in_flight_effect_in_its_saga(tmp_path):
    """A child whose process died mid-call is continued after a sibling failed: it stops without
    compensating (its parent compensates its saga), but the call in flight is verified first and
    its effect joins that saga (breaker finding: it was dropped, and never undone)."""
    import threading

    from flowctl.engine import lifecycle
    from support.enginekit import allow_all, effect_contract, task

    files = {**effect_contract("pay", "pay"), **allow_all("pay"), **task("p", "pay@1.0.0"), **flow("p", linear("p"))}
    h = Harness(build(tmp_path, files, DIES_MID_CALL))
    with pytest.raises(KeyboardInterrupt):
        h.run(input={})
    (row,) = h.store.list_runs(status="running")
    key = row["cursor"]["inflight"]["idempotency_key"]
    sibling_failed = threading.Event()
    sibling_failed.set()
    assert lifecycle.resume(h.engine, row, stop=sibling_failed).status == "cancelled"
    after = h.store.get_run(row["id"])
    assert [(e["tool"], e["idempotency_key"], e["output"]) for e in after["cursor"]["saga"]] == [
        ("pay@1.0.0", key, {"paid": True})]
    assert h.ledger() == [("pay", key)]  # kept for the parent to undo, not undone here
    recovered = [e["data"] for e in h.store.events(row["id"]) if e["type"] == "step_recovered"]
    assert recovered == [{"tool": "pay@1.0.0", "idempotency_key": key, "after": "crash", "happened": True,
                          "action": "in the saga"}]
