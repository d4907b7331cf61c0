"""Compensation (flowctl.engine.saga): completed side effects undone newest first with their
original idempotency keys; an undo that raises is residue, and the rest of the stack is still undone;
an undo is retried by its contract's ``compensate_retry``."""
from __future__ import annotations

from support.enginekit import Harness, allow_all, build, contract, effect_contract, task
from support.engineflows import SAGA, TOOLS, flow, linear, saga_states


def test_compensation_runs_newest_first_with_the_original_keys(tmp_path):
    root = build(tmp_path, {
        **SAGA, **saga_states(3), **task("x", "boom@1.0.0"),
        **flow("p1", linear("p1", "p2", "p3", "x"), extra="on_error:\n  - {errors: ['*'], compensate: true, goto: failed}\n"),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed" and result.error["code"] == "Aborted"
    assert h.ledger()[-3:] == [("undo", "3"), ("undo", "2"), ("undo", "1")]
    started = [e["data"]["idempotency_key"] for e in h.events if e["type"] == "compensation_started"]
    assert started == ["pay-3", "pay-2", "pay-1"]

def test_failing_compensation_is_residue_not_swallowed(tmp_path):
    root = build(tmp_path, {
        **SAGA, **saga_states(2, last_extra=", undo_fails: '`true`'"), **task("x", "boom@1.0.0"),
        **flow("p1", linear("p1", "p2", "x")),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed"
    assert [r["state"] for r in result.residue] == ["p2"]
    assert "gateway refused" in result.residue[0]["error"]
    assert ("undo", "1") in h.ledger()  # the rest of the stack is still undone
    assert "compensation_failed" in h.types()


def test_a_compensation_is_retried_by_its_compensate_retry_policy(tmp_path):
    tools = TOOLS + """
FAILS = [1]

def twice(input, call):
    LEDGER.append(("twice", call.idempotency_key))
    return {}

def verify_twice(input, output, call):
    return True

def undo_twice(input, output, call):
    LEDGER.append(("undo_twice", call.idempotency_key))
    if FAILS:
        FAILS.pop()
        raise ConnectionError("refund gateway reset")
"""
    root = build(tmp_path, {
        **effect_contract("twice", "twice", extra="idempotency_key: \"'k-1'\"\ncompensate_retry: {max_attempts: 2, interval: 3s}\n"),
        **allow_all("twice"), **contract("boom", "boom"),
        **task("a", "twice@1.0.0"), **task("x", "boom@1.0.0"), **flow("a", linear("a", "x")),
    }, tools)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed" and result.residue == []
    assert h.ledger() == [("twice", "k-1"), ("boom", 1), ("undo_twice", "k-1"), ("undo_twice", "k-1")]
    assert h.clock.slept == [3.0]
    assert h.types().count("compensation_retry") == 1 and "compensation_succeeded" in h.types()
