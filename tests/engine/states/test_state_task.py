"""``type: task`` (flowctl.engine.states.task): retries are layer 1: the first matching rule,
``max_attempts`` counting every call, backoff capped by ``max_delay``, full jitter, and a delay
longer than ``max_inline_wait`` parking the run."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build, contract, task
from support.engineflows import TOOLS, flow, linear


def test_max_attempts_three_is_exactly_three_calls_with_backoff(tmp_path):
    root = build(tmp_path, {
        **contract("flaky", "flaky"),
        **task("a", "flaky@1.0.0", extra="""
            retry:
              - errors: [ConnectionError]
                max_attempts: 3
                interval: 1s
                backoff: 3.0
                max_delay: 2s
            """),
        **flow("a", linear("a")),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed"
    assert h.ledger() == [("flaky", 1), ("flaky", 2), ("flaky", 3)]
    assert h.clock.slept == [1.0, 2.0]  # 1s, then 3s capped by max_delay 2s
    assert result.error["type"] == "GatewayError"

def test_retry_matches_base_class_and_succeeds(tmp_path):
    root = build(tmp_path, {
        **contract("flaky", "flaky"),
        **task("a", "flaky@^1", extra="""
            input: {succeed_on: "`2`"}
            retry: [{errors: [OSError], max_attempts: 5, interval: 10ms}]
            """),
        **flow("a", linear("a")),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "succeeded"
    assert h.ledger() == [("flaky", 1), ("flaky", 2)]

def test_full_jitter_stays_within_the_delay(tmp_path):
    root = build(tmp_path, {
        **contract("flaky", "flaky"),
        **task("a", "flaky@1.0.0", extra="retry: [{errors: [ConnectionError], max_attempts: 4, interval: 2s, jitter: full}]\n"),
        **flow("a", linear("a")),
    }, TOOLS)
    h = Harness(root)
    h.run()
    assert len(h.clock.slept) == 3
    assert all(0 <= s <= cap for s, cap in zip(h.clock.slept, [2, 4, 8]))

def test_long_retry_delay_parks_the_run_and_resume_continues_when_due(tmp_path):
    root = build(tmp_path, {
        **contract("flaky", "flaky"),
        **task("a", "flaky@1.0.0", extra="""
            input: {succeed_on: "`2`"}
            retry: [{errors: [ConnectionError], max_attempts: 2, interval: 1m}]
            """),
        **flow("a", linear("a")),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "waiting" and result.exit_code == 3
    assert result.available_at == pytest.approx(h.clock.time() + 60)
    assert h.engine.resume(result.run_id).status == "waiting"  # not due yet
    h.clock.advance(61)
    done = h.engine.resume(result.run_id)
    assert done.status == "succeeded"
    assert h.ledger() == [("flaky", 1), ("flaky", 2)]
