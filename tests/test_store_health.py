"""The defence rates of flowctl.store.health: each counted from the runs' events, flagged over its
threshold, None when nothing was there to count."""
from __future__ import annotations

import pytest

from flowctl.engine.redrive import redrive
from flowctl.errors import UsageError
from flowctl.store.health import THRESHOLDS, health
from support.enginekit import Harness, allow_all, build, contract, effect_contract, sqlite_store, task

TOOLS = """
LEDGER = []

def pay(input, call):
    return {"paid": True}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    if input.get("undo_fails"):
        raise RuntimeError("refund refused")

def ship(input, call):
    if input.get("fail"):
        raise ConnectionError("carrier down")
    return {}
"""

FILES = {
    **effect_contract("pay", "pay"),
    **contract("ship", "ship"),
    **allow_all("pay"),
    **task("p", "pay@1.0.0", extra="input: {undo_fails: input.undo_fails}\n"),
    **task("s", "ship@1.0.0", extra="input: {fail: input.fail}\n"),
    **contract("strict", "ship", extra="input_schema: {type: object, required: [to]}\n"),
    **task("denied", "strict@1.0.0"),  # called without `to`: its input schema blocks the call
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [ok]\ntimeout: 1h\non_timeout: {goto: done}\n",
    "transitions/f.yaml": ("flow: f\nversion: 1\nstart: p\ntransitions:\n"
                           "  - {from: p, to: s}\n  - {from: s, to: done}\n"),
    "transitions/k.yaml": "flow: k\nversion: 1\nstart: s\ntransitions:\n  - {from: s, to: done}\n",
    "transitions/g.yaml": "flow: g\nversion: 1\nstart: ask\ntransitions:\n  - {from: ask, to: done}\n",
    "transitions/d.yaml": "flow: d\nversion: 1\nstart: denied\ntransitions:\n  - {from: denied, to: done}\n",
}


@pytest.fixture
def h(tmp_path):
    return Harness(build(tmp_path, FILES, TOOLS), store=sqlite_store(tmp_path))


def test_each_rate_counts_what_it_names_and_is_flagged_over_its_threshold(h):
    h.run("f", {"undo_fails": False, "fail": False})           # fine
    h.run("f", {"undo_fails": True, "fail": True})             # fails, its undo fails: residue
    failed = h.run("k", {"fail": True})                         # fails before any side effect
    redrive(h.engine, failed.run_id, by="ann", context={})      # a takeover (fails again: ship still fails)
    report = health(h.store)
    d = report["defence"]
    assert report["runs"] == 3 and report["by_status"] == {"succeeded": 1, "failed": 2}
    assert (d["rollback_failure_rate"]["part"], d["rollback_failure_rate"]["whole"]) == (1, 1)
    assert d["rollback_failure_rate"]["rate"] == 1.0 and d["rollback_failure_rate"]["over"] is True
    assert (d["human_takeover_rate"]["part"], d["human_takeover_rate"]["whole"]) == (1, 3)
    assert d["pause_timeout_rate"]["rate"] is None and d["pause_timeout_rate"]["over"] is False  # no reviews
    assert d["validation_block_rate"]["part"] == 0
    assert report["tools"]["ship@1.0.0"]["failures"] == 3


def test_thresholds_can_be_changed_and_an_unknown_rate_is_refused(h):
    h.run("f", {"undo_fails": True, "fail": True})
    relaxed = health(h.store, thresholds={"rollback_failure_rate": 1.0})["defence"]["rollback_failure_rate"]
    assert relaxed["rate"] == 1.0 and relaxed["threshold"] == 1.0 and relaxed["over"] is False
    assert health(h.store)["defence"]["rollback_failure_rate"]["threshold"] == THRESHOLDS["rollback_failure_rate"]
    with pytest.raises(UsageError, match="unknown rate 'speed'"):
        health(h.store, thresholds={"speed": 0.5})


def test_the_window_counts_only_runs_created_since_its_start(h):
    h.run("f", {"undo_fails": True, "fail": True})
    h.clock.advance(3600)
    h.run("f", {"undo_fails": False, "fail": False})
    recent = health(h.store, since=h.clock.time() - 60)
    assert recent["runs"] == 1 and recent["defence"]["rollback_failure_rate"]["whole"] == 0


def test_a_call_its_schema_blocks_is_a_validation_block_and_an_unanswered_review_a_pause_timeout(h):
    h.run("d", {})
    h.run("f", {"undo_fails": False, "fail": False})
    paused = h.run("g", {})
    h.clock.advance(7200)
    h.engine.resume(paused.run_id)
    d = health(h.store)["defence"]
    assert (d["validation_block_rate"]["part"], d["validation_block_rate"]["whole"]) == (1, 3)
    assert d["validation_block_rate"]["over"] is True  # 33% > 20%
    assert (d["pause_timeout_rate"]["part"], d["pause_timeout_rate"]["whole"]) == (1, 1)
