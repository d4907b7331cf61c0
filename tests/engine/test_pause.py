"""Pausing a run at its next checkpoint (flowctl.engine.pause): the request is handed back by the
store's own commit, the run stops ``paused`` before the next state (a tool call in progress
finishes and is recorded first), ``resume`` continues it from there; who and why are recorded.
The races are injected: the request is made from the event listener or from inside a tool."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, allow_all, build, effect_contract, sqlite_store, task
from support.engineflows import TOOLS as ENGINE_TOOLS, flow, linear
from flowctl.errors import UsageError

TOOLS = ENGINE_TOOLS + """
HOOK = []  # called with each pay call before it pays: the test's way in, mid-call
_paid = pay

def pay(input, call):
    for fn in HOOK:
        fn(call)
    return _paid(input, call)
"""

STATES = {**effect_contract("pay", "pay"), **allow_all("pay"),
          **{k: v for i in (1, 2, 3) for k, v in task(f"p{i}", "pay@1.0.0", extra=f"input: {{id: \"'{i}'\"}}\n").items()}}
LINEAR = {**STATES, **flow("p1", linear("p1", "p2", "p3"))}
WAITING = {**STATES, "states/w.yaml": "id: w\ntype: wait\nduration: 1h\n", **flow("p1", linear("p1", "w", "p2"))}


@pytest.fixture(params=["memory", "sqlite"])
def harness(request, tmp_path):
    def make(files):
        root = build(tmp_path, files, TOOLS)
        return Harness(root, store=sqlite_store(tmp_path) if request.param == "sqlite" else None)
    return make


def _hook(h):
    from flowctl.engine.tools import resolve

    return resolve("tk:HOOK", str(h.root / "orchestration" / "tools"))


def _on(h, event_type, state, fn):
    """Call ``fn(event)`` once when ``event_type`` of ``state`` is recorded (before its commit)."""
    listener, fired = h.engine.listener, []

    def hooked(ev):
        listener(ev)
        if ev["type"] == event_type and ev.get("state") == state and not fired:
            fired.append(ev)
            fn(ev)
    h.engine.listener = hooked


def _event(h, run_id, type_):
    return [e for e in h.store.events(run_id) if e["type"] == type_]


def test_a_pause_asked_between_two_steps_stops_the_run_before_the_next_state_and_resume_goes_on(harness):
    h = harness(LINEAR)
    _on(h, "tool_succeeded", "p1", lambda ev: h.engine.pause(ev["run_id"], reason="check the ledger", by="ann"))
    paused = h.run()
    assert paused.status == "paused" and paused.exit_code == 3
    assert paused.paused_by == {"state": "p2", "by": "ann", "reason": "check the ledger"} and paused.review is None
    assert h.ledger() == [("pay", "1")]  # p2 was not entered
    row = h.store.get_run(paused.run_id)
    assert row["status"] == "paused" and row.get("pause_requested") is None  # the pause commit cleared it
    assert row["cursor"]["pending"]["kind"] == "pause" and row["cursor"]["pending"]["state"] == "p2"
    [event] = _event(h, paused.run_id, "run_paused")
    assert (event["data"]["by"], event["data"]["reason"]) == ("ann", "check the ledger")
    assert "state_entered" not in [e["type"] for e in h.store.events(paused.run_id) if e.get("state") == "p2"]
    assert h.engine.recover() == []  # recover leaves an operator's pause alone
    done = h.engine.resume(paused.run_id, by="bob")
    assert done.status == "succeeded" and done.path == ["p1", "p2", "p3", "done"]
    assert h.ledger() == [("pay", "1"), ("pay", "2"), ("pay", "3")]  # nothing called twice
    [resumed] = [e for e in _event(h, paused.run_id, "run_resumed") if e["data"].get("reason") == "operator"]
    assert (resumed["data"]["by"], resumed["data"]["paused_by"]) == ("bob", "ann")


def test_a_pause_asked_during_a_tool_call_lets_the_call_finish_and_be_recorded_first(harness):
    h = harness(LINEAR)
    asked = []

    def during(call):
        if call.state == "p2" and not asked:
            asked.append(h.engine.pause(call.run_id, reason="mid-call", by="ann"))
    _hook(h).append(during)
    paused = h.run()
    assert asked[0]["new"] is True and asked[0]["status"] == "running"
    assert paused.status == "paused" and h.ledger() == [("pay", "1"), ("pay", "2")]
    steps = {s["state"]: s["status"] for s in h.store.steps(paused.run_id)}
    assert steps.get("p2") == "succeeded" and "p3" not in steps  # p2's call finished and was recorded
    assert [e["state"] for e in _event(h, paused.run_id, "tool_succeeded")] == ["p1", "p2"]
    assert h.engine.resume(paused.run_id).status == "succeeded"
    assert h.ledger()[-1] == ("pay", "3") and len(h.ledger()) == 3


def test_two_pause_requests_keep_the_first_who_and_why(harness):
    h = harness(LINEAR)
    answers = []

    def twice(ev):
        answers.append(h.engine.pause(ev["run_id"], reason="first", by="ann"))
        answers.append(h.engine.pause(ev["run_id"], reason="second", by="bob"))
    _on(h, "tool_succeeded", "p1", twice)
    paused = h.run()
    assert [a["new"] for a in answers] == [True, False]
    assert answers[1]["request"]["by"] == "ann" and answers[1]["request"]["reason"] == "first"
    [event] = _event(h, paused.run_id, "run_paused")
    assert event["data"]["by"] == "ann"
    with pytest.raises(UsageError, match="is already paused \\(by ann: first\\)") as info:
        h.engine.pause(paused.run_id, reason="third", by="cy")
    assert info.value.hint == f"continue it with: flowctl resume {paused.run_id}"


def test_pause_then_cancel_cancels_and_compensates(harness):
    h = harness(LINEAR)
    _on(h, "tool_succeeded", "p2", lambda ev: h.engine.pause(ev["run_id"], reason="hold", by="ann"))
    paused = h.run()
    result = h.engine.cancel(paused.run_id, by="bob")
    assert result.status == "cancelled"
    assert h.ledger() == [("pay", "1"), ("pay", "2"), ("undo", "2"), ("undo", "1")]
    with pytest.raises(UsageError, match="already ended \\(cancelled\\); there is nothing to pause"):
        h.engine.pause(paused.run_id, reason="late", by="ann")


def test_a_waiting_run_keeps_the_request_and_pauses_at_the_first_checkpoint_of_its_resume(harness):
    h = harness(WAITING)
    parked = h.run()
    assert parked.status == "waiting"
    asked = h.engine.pause(parked.run_id, reason="before it goes on", by="ann")
    assert asked["status"] == "waiting" and asked["new"]
    h.clock.advance(3600)
    again = h.engine.resume(parked.run_id)
    assert again.status == "paused" and h.ledger() == [("pay", "1")]  # p2 not called
    assert h.engine.resume(parked.run_id, by="bob").status == "succeeded"
    assert h.ledger() == [("pay", "1"), ("pay", "2")]


def test_a_cancel_of_a_run_with_a_pending_pause_request_wins(harness):
    h = harness(WAITING)
    parked = h.run()
    h.engine.pause(parked.run_id, reason="hold", by="ann")
    assert h.engine.cancel(parked.run_id, by="bob").status == "cancelled"
    assert _event(h, parked.run_id, "run_paused")[-1]["data"]["status"] == "waiting"  # the wait's park only


def test_what_cannot_be_paused_or_resumed_is_a_usage_error_and_changes_nothing(harness):
    h = harness(LINEAR)
    done = h.run()
    before = h.store.get_run(done.run_id)
    with pytest.raises(UsageError, match=f"run {done.run_id} already ended \\(succeeded\\)"):
        h.engine.pause(done.run_id, reason="too late", by="ann")
    with pytest.raises(UsageError, match="say why the run is paused"):
        h.engine.pause(done.run_id, reason="  ", by="ann")
    after = h.store.get_run(done.run_id)
    assert (after["last_seq"], after.get("pause_requested")) == (before["last_seq"], None)
    h2 = h
    _on(h2, "tool_succeeded", "p1", lambda ev: h2.engine.pause(ev["run_id"], reason="hold", by="ann"))
    paused = h2.run()
    with pytest.raises(UsageError, match="paused by an operator, not for review; the token cannot be used"):
        h2.engine.resume(paused.run_id, token="t", decision="approve")
