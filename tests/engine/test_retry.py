"""``flowctl.engine.retry``: the first matching rule decides, ``max_attempts`` counts every call,
the backoff grows and is capped, and a long delay parks the run — the same for a task's tool call
and a model call."""
from __future__ import annotations

import pytest

from flowctl.engine.retry import retry_rule, with_retries
from flowctl.errors import ToolThrottled, ToolUnavailable
from support.enginekit import Harness, build, contract, task

TOOLS = """
CALLS = []
FAILS = {"n": 0}

def flaky(input, call):
    CALLS.append(call.attempt)
    if FAILS["n"]:
        FAILS["n"] -= 1
        from flowctl import ToolUnavailable
        raise ToolUnavailable("down")
    return {"ok": True}
"""


def _harness(tmp_path, rule, fails, wait=10.0):
    files = {**contract("flaky", "flaky"), **task("t", "flaky@^1", extra=f"retry:\n  - {rule}\n"),
             "transitions/f.yaml": "flow: f\nstart: t\ntransitions:\n  - {from: t, to: done}\n"}
    h = Harness(build(tmp_path, files, TOOLS), max_inline_wait=wait)
    from flowctl.engine.tools import resolve

    resolve("tk:FAILS", str(h.root / "orchestration" / "tools"))["n"] = fails
    return h, resolve("tk:CALLS", str(h.root / "orchestration" / "tools"))


def test_max_attempts_counts_every_call_and_the_backoff_is_capped(tmp_path):
    h, calls = _harness(tmp_path, "{errors: [ToolUnavailable], max_attempts: 4, interval: 1s, backoff: 3.0, max_delay: 5s}", 3)
    done = h.run()
    assert done.status == "succeeded" and calls == [1, 2, 3, 4]
    delays = [e["data"]["delay_s"] for e in h.events if e["type"] == "retry_scheduled"]
    assert delays == [1.0, 3.0, 5.0]  # 1, 3, then 9 capped at 5


def test_past_max_attempts_the_error_goes_to_the_handler_layers(tmp_path):
    h, calls = _harness(tmp_path, "{errors: [ToolUnavailable], max_attempts: 2, interval: 1s}", 5)
    failed = h.run()
    assert failed.status == "failed" and failed.error["type"] == "ToolUnavailable" and calls == [1, 2]


def test_a_delay_over_max_inline_wait_parks_the_run_waiting(tmp_path):
    h, calls = _harness(tmp_path, "{errors: [ToolUnavailable], max_attempts: 3, interval: 1h}", 1, wait=10.0)
    parked = h.run()
    assert parked.status == "waiting" and calls == [1]


def test_the_first_matching_rule_decides():
    class S:
        retry = ()

    from types import SimpleNamespace

    throttled = SimpleNamespace(errors=("ToolThrottled",))
    anything = SimpleNamespace(errors=("*",))
    S.retry = (throttled, anything)
    assert retry_rule(S, ToolThrottled("slow")) is throttled
    assert retry_rule(S, ToolUnavailable("down")) is anything
    S.retry = (throttled,)
    assert retry_rule(S, ToolUnavailable("down")) is None
    with pytest.raises(ToolUnavailable):
        with_retries(SimpleNamespace(cursor=SimpleNamespace(attempt=1, pending=None)), S, lambda: (_ for _ in ()).throw(
            ToolUnavailable("down")))


class Killed(BaseException):
    """The process stopping where the test says (as SIGKILL or Ctrl-C would): nothing after it runs."""


def _killed_while_sleeping(h, monkeypatch, at_sleep: int = 1):
    """Make the ``at_sleep``-th sleep of ``h``'s clock stop the process (it advances the clock by
    what it slept so far first: the process died in the middle of the wait)."""
    real, seen = h.clock.sleep, []

    def sleep(seconds):
        seen.append(seconds)
        if len(seen) == at_sleep:
            h.clock.advance(seconds / 2)
            raise Killed()
        real(seconds)
    monkeypatch.setattr(h.clock, "sleep", sleep)
    return seen


def _resumed(h, run_id, monkeypatch, owner="gone-host:1:1"):
    """The run resumed by another process (its first one declared gone), on the same store and clock."""
    import flowctl

    monkeypatch.setenv("FLOWCTL_GONE_OWNERS", owner)
    other = flowctl.Engine(h.project, h.store, clock=h.clock, max_inline_wait=10.0, listener=h.events.append)
    return other.resume(run_id)


def test_a_process_stopped_during_an_inline_retry_delay_loses_no_attempt(tmp_path, monkeypatch):
    """Found by a new user: the failed attempt was only committed after the delay, so a kill during
    it made the resumed run start again at attempt 1 — a fourth call of max_attempts 3, and a call
    that happened missing from the log."""
    import flowctl
    from flowctl.store.sql import open_store

    (tmp_path / "db").mkdir()
    h, calls = _harness(tmp_path, "{errors: [ToolUnavailable], max_attempts: 3, interval: 4s}", 5)
    h.store = open_store(f"sqlite:///{tmp_path}/db/flowctl.db")
    h.engine = flowctl.Engine(h.project, h.store, clock=h.clock, max_inline_wait=10.0, listener=h.events.append,
                              owner="gone-host:1:1")
    slept = _killed_while_sleeping(h, monkeypatch)
    with pytest.raises(Killed):
        h.run(run_id="r-kill")
    assert calls == [1] and slept == [4.0]
    stored = [e["type"] for e in h.store.events("r-kill")]
    assert stored[-2:] == ["tool_failed", "retry_scheduled"]  # committed before the wait
    monkeypatch.setattr(h.clock, "sleep", lambda s: (slept.append(s), h.clock.advance(s)))
    done = _resumed(h, "r-kill", monkeypatch)
    assert calls == [1, 2, 3]  # exactly max_attempts calls in all
    assert done.status == "failed" and done.error["type"] == "ToolUnavailable"
    assert slept[1] == 2.0  # the rest of the first delay (4 s, half slept before the kill), then the second
    invoked = [e["attempt"] for e in h.store.events("r-kill") if e["type"] == "tool_invoked"]
    assert invoked == [1, 2, 3]
    from flowctl.store.audit import verify_run

    assert verify_run(h.store.get_run("r-kill"), h.store.events("r-kill")) == []


def test_a_resumed_retry_whose_rest_is_longer_than_this_process_waits_parks(tmp_path, monkeypatch):
    import flowctl
    from flowctl.store.sql import open_store

    (tmp_path / "db").mkdir()
    h, calls = _harness(tmp_path, "{errors: [ToolUnavailable], max_attempts: 3, interval: 8s}", 1)
    h.store = open_store(f"sqlite:///{tmp_path}/db/flowctl.db")
    h.engine = flowctl.Engine(h.project, h.store, clock=h.clock, max_inline_wait=10.0, owner="gone-host:1:1")
    _killed_while_sleeping(h, monkeypatch)
    with pytest.raises(Killed):
        h.run(run_id="r-park")
    monkeypatch.setenv("FLOWCTL_GONE_OWNERS", "gone-host:1:1")
    worker_like = flowctl.Engine(h.project, h.store, clock=h.clock, max_inline_wait=1.0)
    parked = worker_like.resume("r-park")
    assert parked.status == "waiting" and calls == [1]
    assert h.store.get_run("r-park")["available_at"] == pytest.approx(h.clock.time() + 4.0)


def _pause_on_the_first_failure(h) -> list:
    """Ask a pause as the first attempt's failure is recorded (before its commit); the requests made."""
    asked = []

    def listener(ev):
        h.events.append(ev)
        if ev["type"] == "tool_failed" and not asked:
            asked.append(h.engine.pause(ev["run_id"], reason="look at the gateway", by="ann"))
    h.engine.listener = listener
    return asked


def test_a_pause_asked_during_a_failed_attempt_pauses_before_the_delay_and_resume_makes_the_next_attempt(tmp_path):
    """(breaker finding: a pause asked while an attempt failed took effect only after every
    remaining attempt and delay had run)"""
    h, calls = _harness(tmp_path, "{errors: [ToolUnavailable], max_attempts: 3, interval: 4s}", 1)
    _pause_on_the_first_failure(h)
    paused = h.run()
    assert paused.status == "paused" and calls == [1]  # no second attempt, no delay slept
    pending = h.store.get_run(paused.run_id)["cursor"]["pending"]
    assert pending["kind"] == "pause" and pending["under"]["kind"] == "retry" and pending["under"]["attempt"] == 2
    h.clock.advance(10)
    done = h.engine.resume(paused.run_id, by="bob")
    assert done.status == "succeeded" and calls == [1, 2]  # the next attempt, not the first again
    invoked = [e["attempt"] for e in h.store.events(paused.run_id) if e["type"] == "tool_invoked"]
    assert invoked == [1, 2]


def test_a_workers_halt_seen_after_a_failed_attempt_stops_the_run_there_before_a_pause(tmp_path):
    """(breaker finding: a pause and a cancel asked during one failed attempt on a worker recorded
    run_paused, then run_cancelled; the cancel wins at that checkpoint)"""
    h, calls = _harness(tmp_path, "{errors: [ToolUnavailable], max_attempts: 3, interval: 4s}", 1)
    asked = _pause_on_the_first_failure(h)
    h.engine.halt = lambda run_id: "cancel" if asked else None  # a worker's heartbeat saw a cancel request too
    stopped = h.run()
    assert stopped.status == "running" and calls == [1]  # stopped at the checkpoint: the worker cancels it now
    types = [e["type"] for e in h.store.events(stopped.run_id)]
    assert "run_paused" not in types and types[-1] == "retry_scheduled"
