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
