"""Tool deadlines in the main thread, kept by the watchdog thread (flowctl.engine.watchdog)."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from flowctl.engine import tools
from flowctl.engine.watchdog import WATCHDOG, Watchdog
from flowctl.errors import ToolTimeout


def _sleep(seconds):
    time.sleep(seconds)
    return {"slept": seconds}


def test_a_sleeping_tool_is_cut_off_at_its_deadline():
    started = time.monotonic()
    with pytest.raises(ToolTimeout):
        tools.call_with_timeout(_sleep, (5,), 0.05, "tool slow")
    assert time.monotonic() - started < 0.05 + 0.5


def test_a_shorter_deadline_after_a_longer_one_wakes_the_watchdog():
    assert tools.call_with_timeout(_sleep, (0,), 30, "tool quick") == {"slept": 0}  # it sleeps towards +30 s
    started = time.monotonic()
    with pytest.raises(ToolTimeout):
        tools.call_with_timeout(_sleep, (5,), 0.05, "tool slow")
    assert time.monotonic() - started < 0.05 + 0.5


def test_many_quick_calls_never_time_out_and_a_busy_tool_is_still_interrupted():
    for _ in range(2000):
        assert tools.call_with_timeout(_sleep, (0,), 0.02, "tool quick") == {"slept": 0}

    def busy(_):
        while True:
            pass

    with pytest.raises(ToolTimeout):
        tools.call_with_timeout(busy, (None,), 0.05, "tool busy")


def test_a_signal_for_a_call_that_returned_meanwhile_does_not_interrupt_the_next():
    def late_signal(_):
        WATCHDOG.fired = True  # the watchdog fired for the call before, whose signal arrives only now
        signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
        time.sleep(0.01)  # the handler runs here: this call is not overdue
        return {"ok": True}

    assert tools.call_with_timeout(late_signal, (None,), 10, "tool next") == {"ok": True}
    assert WATCHDOG.fired is False


def test_no_deadline_is_armed_between_calls():
    tools.call_with_timeout(_sleep, (0,), 1, "tool quick")
    assert WATCHDOG.deadline is None and not WATCHDOG.overdue()


def test_steady_arms_do_not_wake_the_watchdog_thread():
    """A step's arm costs no thread switch: only a deadline due before the thread's next look wakes it."""
    class Counting(threading.Event):
        sets = 0

        def set(self):
            self.sets += 1
            super().set()

    dog = Watchdog()
    dog._wake = Counting()
    dog.arm(30)
    dog.disarm()
    for _ in range(2000):  # until the thread has looked once and sleeps (it never sleeps past IDLE seconds)
        if dog._until != float("inf"):
            break
        time.sleep(0.001)
    before = dog._wake.sets
    for _ in range(1000):
        dog.arm(30)
        dog.disarm()
    assert dog._wake.sets == before
    dog.arm(0.0001)  # due before the thread's next look: woken
    assert dog._wake.sets == before + 1
    dog.disarm()
