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


def test_a_call_whose_wait_is_interrupted_leaves_no_late_result_for_the_next_call():
    """A tool on the main thread that calls a tool with a timeout waits on a tool thread; its own
    deadline (a signal) interrupts that wait. The given-up inner call's late result must not
    answer the next call (it did, and the call after that raised 'release unlocked lock')."""
    release, ended = threading.Event(), threading.Event()

    def inner():
        release.wait(30)
        ended.set()
        return "stale"

    def outer(fn):
        return call_with_timeout(fn, (), 30.0, "inner")

    with pytest.raises(Exception):  # noqa: B017 - the outer deadline, whatever it is reported as
        call_with_timeout(outer, (inner,), 0.05, "outer")  # inner blocks: the outer deadline comes first
    release.set()
    assert ended.wait(10)  # the given-up inner call has finished on its tool thread
    assert [call_with_timeout(outer, (lambda n=n: n,), 30.0, "outer") for n in ("fresh", "again")] == \
        ["fresh", "again"]


@pytest.mark.parametrize("timeout", [1e10, float("inf")])
def test_a_timeout_longer_than_a_lock_can_wait_is_no_limit_off_the_main_thread(timeout):
    """(a lock's acquire() raises OverflowError beyond threading.TIMEOUT_MAX: the call ran anyway,
    its caller got the OverflowError and its next call the previous call's result)"""
    effects = []

    def calls():
        return [call_with_timeout(lambda n=n: effects.append(n) or n, (), timeout, "tool") for n in (1, 2)]

    assert _in_thread(calls) == {"value": [1, 2]} and effects == [1, 2]


def test_an_outer_tool_s_deadline_met_in_a_nested_call_is_the_outer_tool_s_timeout():
    """(it was reported as ToolCrashed 'inner raised _Deadline', which no ToolTimeout retry or
    handler matches)"""
    release = threading.Event()

    def outer():
        return call_with_timeout(release.wait, (30,), 30.0, "inner")

    try:
        with pytest.raises(ToolTimeout, match="outer did not return within"):
            call_with_timeout(outer, (), 0.05, "outer")
    finally:
        release.set()


def test_a_call_to_settle_times_out_only_once_it_has_ended_and_its_tool_thread_is_kept():
    """A side effect or a compensation (``settle``): past its deadline the caller waits for the call
    to end, so nothing after it (verify, compensation) runs while its effect may still land."""
    never, ended = threading.Event(), []

    def effect():
        never.wait(0.3)  # overruns the 0.01 s timeout, then acts
        ended.append("acted")
        return "late"

    def both():
        try:
            call_with_timeout(effect, (), 0.01, "effect", settle=True)
        except ToolTimeout:
            seen = list(ended)  # what had happened when the timeout reached the caller
        return seen, call_with_timeout(lambda: "next", (), 30.0, "next")
    assert _in_thread(both) == {"value": (["acted"], "next")}  # its late result answers nothing
