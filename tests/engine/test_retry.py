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
        with_retries(SimpleNamespace(cursor=SimpleNamespace(attempt=1)), S, lambda: (_ for _ in ()).throw(
            ToolUnavailable("down")))
