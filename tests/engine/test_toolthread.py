"""flowctl.engine.toolthread: a tool called with a timeout from a thread that is not the main one
runs on that thread's own tool thread — never queued behind tools other threads let overrun, never
started after its caller gave up, and a given-up call's late result never answers the next call."""
from __future__ import annotations

import threading

import pytest

from flowctl.engine.tools import call_with_timeout
from flowctl.errors import ToolTimeout


def _in_thread(fn):
    """``fn()`` on a new thread (not the main one); what it returned or raised."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert not t.is_alive()
    return out


def test_tools_that_overran_their_timeouts_do_not_delay_or_defer_another_call():
    """(the shared 32-thread pool this replaced: once 32 tools overran, a call timed out without
    having started and its side effect ran later, after its run had moved on)"""
    release, effects = threading.Event(), []
    try:
        stuck = [_in_thread(lambda: call_with_timeout(release.wait, (), 0.01, "stuck")) for _ in range(40)]
        assert all(isinstance(s.get("error"), ToolTimeout) for s in stuck)
        done = _in_thread(lambda: call_with_timeout(lambda: effects.append("sent") or "ok", (), 30.0, "effect"))
        assert done == {"value": "ok"} and effects == ["sent"]  # ran during its call, not after
    finally:
        release.set()


def test_a_given_up_call_s_late_result_never_answers_the_next_call():
    first_may_end, first_ended = threading.Event(), threading.Event()

    def first():
        first_may_end.wait()
        first_ended.set()
        return "stale"

    def calls():
        with pytest.raises(ToolTimeout, match="first did not return within"):
            call_with_timeout(first, (), 0.01, "first")
        first_may_end.set()
        first_ended.wait(10)  # the given-up call has finished on its old tool thread
        return [call_with_timeout(lambda: n, (), 30.0, "next") for n in ("fresh", "again")]

    assert _in_thread(calls) == {"value": ["fresh", "again"]}


def test_what_a_tool_raises_is_raised_to_its_caller_and_the_tool_thread_is_kept():
    names = []

    def tool():
        names.append(threading.current_thread().name)
        raise KeyError("missing")

    def calls():
        for _ in range(2):
            with pytest.raises(KeyError, match="missing"):
                call_with_timeout(tool, (), 30.0, "tool")
        return names

    got = _in_thread(calls)["value"]
    assert got[0] == got[1] == "flowctl-tool"  # a thread of its own, and the same for both calls


def test_a_tool_thread_ends_when_its_calling_thread_ends():
    seen = {}

    def calls():
        call_with_timeout(lambda: seen.setdefault("thread", threading.current_thread()), (), 30.0, "tool")

    _in_thread(calls)
    seen["thread"].join(10)
    assert not seen["thread"].is_alive()
