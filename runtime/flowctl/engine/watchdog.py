"""The deadline of a tool called in the main thread, kept by one watchdog thread.

Arming a deadline is two attribute writes (no system call), so a step does not pay for a timer
it almost never needs. The watchdog thread sleeps until the armed deadline; when a call is still
armed past its deadline it sends ``SIGALRM`` to the main thread once, whose handler
(:func:`flowctl.engine.tools._on_alarm`) checks :meth:`Watchdog.overdue` and interrupts the tool
where it stands, as a ``setitimer`` alarm did (Python code and interruptible system calls).

A deadline armed later than the time the thread sleeps towards does not wake it: it wakes at the
earlier time, finds the later deadline and sleeps again. With nothing armed it looks again every
:data:`IDLE` seconds, so only a deadline due sooner than that wakes it: a step's arm costs no
thread switch. After a ``fork`` the child starts its own thread when it first
arms a deadline.
"""
from __future__ import annotations

import os
import signal
import threading
import time

_NEVER = float("inf")
#: seconds the idle thread sleeps before it looks again (an arm due sooner wakes it)
IDLE = 1.0


class Watchdog:
    """``arm(seconds)`` before the call, ``disarm()`` after it (both from the main thread).
    ``fired``: a signal from the watchdog is on its way; ``overdue()``: the armed call is past its
    deadline (monotonic clock)."""

    def __init__(self, signum: int = signal.SIGALRM):
        self.signum = signum
        self.deadline: float | None = None
        self.generation = 0
        self.fired = False
        self._until = _NEVER  # when the thread wakes by itself next (never: only when woken)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._target = threading.main_thread().ident

    def arm(self, seconds: float) -> None:
        """The call starting now must return within ``seconds``."""
        if self._thread is None:
            self._start()
        deadline = time.monotonic() + seconds
        self.generation += 1
        self.deadline = deadline
        if deadline < self._until:
            self._wake.set()

    def disarm(self) -> None:
        self.deadline = None

    def overdue(self) -> bool:
        deadline = self.deadline
        return deadline is not None and time.monotonic() >= deadline

    def _start(self) -> None:
        self._target = threading.main_thread().ident
        self._thread = threading.Thread(target=self._watch, name="flowctl-watchdog", daemon=True)
        self._thread.start()

    def _forked(self) -> None:
        """In a forked child: the thread did not come along; the next ``arm`` starts one."""
        self._thread = None
        self._wake = threading.Event()
        self._until = _NEVER
        self.deadline = None
        self.fired = False

    def _watch(self) -> None:
        wake = self._wake
        while True:
            wake.clear()
            self._until = _NEVER
            generation = self.generation
            deadline = self.deadline
            if deadline is None:  # idle: look again in a while, so the next arm need not wake it
                self._until = time.monotonic() + IDLE
                wake.wait(IDLE)
                continue
            left = deadline - time.monotonic()
            if left > 0:
                self._until = deadline
                wake.wait(left)
                continue
            if generation != self.generation or self.deadline is None:
                continue  # that call returned meanwhile
            self.fired = True
            try:
                signal.pthread_kill(self._target, self.signum)
            except (OSError, ValueError):  # the main thread is gone: the process is ending
                return
            while self.generation == generation:  # one signal per call: wait for the next arm
                wake.wait()
                wake.clear()


WATCHDOG = Watchdog()
os.register_at_fork(after_in_child=WATCHDOG._forked)

__all__ = ["Watchdog", "WATCHDOG"]
