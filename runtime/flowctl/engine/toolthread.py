"""A tool call with a timeout from a thread that is not the main thread: on a thread of its own.

Only the main thread can be interrupted by a signal (:mod:`flowctl.engine.watchdog`), so a run
driven by another thread (a worker's slot, a fan-out branch, the server's request threads) has its
tool called on a second thread while it waits at most ``timeout`` seconds for the answer
(:func:`call`). Each calling thread keeps one such **tool thread** and hands it every call: two
plain locks (one to start the call, one to finish it), so a call costs two thread wake-ups and no
queue, future or condition object.

A call that overruns its timeout is given up (unless it is to ``settle``, see :func:`call`): the
caller gets :class:`TimedOut` at its deadline;
the tool thread finishes the call on its own (its result is dropped) and then exits, and the
caller's next call gets a new tool thread. No call ever waits for another caller's tool: the
shared pool this replaces (32 threads) let tools that overran their timeouts fill it, after which
a call timed out **without having started** and then ran later, after its run had moved on — a side
effect nobody asked for any more.

A tool thread whose calling thread ends exits too (the caller's thread-local slot is released).
"""
from __future__ import annotations

import threading
import weakref

_local = threading.local()


class TimedOut(Exception):
    """The call did not return within its timeout (it may still be running on its tool thread)."""


class _Slot:
    """What a caller and its tool thread share: the call (``job``), its outcome, two locks that
    are held while there is nothing to do (``go``: no call to start; ``done``: no outcome to take)
    and ``mutex``, which decides between an outcome arriving and the caller giving up."""

    __slots__ = ("go", "done", "mutex", "job", "outcome", "abandoned")

    def __init__(self):
        self.go = threading.Lock()
        self.go.acquire()
        self.done = threading.Lock()
        self.done.acquire()
        self.mutex = threading.Lock()
        self.job = None
        self.outcome = None
        self.abandoned = False


def _serve(slot: _Slot) -> None:
    """The tool thread: run each call handed over in ``slot`` until told to stop or given up."""
    while True:
        slot.go.acquire()
        job = slot.job
        if job is None:  # the calling thread ended
            return
        fn, args = job
        try:
            outcome = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
            outcome = (False, exc)
        with slot.mutex:
            if slot.abandoned:  # the caller gave up at its deadline: nobody takes this outcome
                return
            slot.job, slot.outcome = None, outcome
            slot.done.release()


class _Owner:
    """The calling thread's handle on its tool thread (in :data:`_local`); when the calling thread
    ends its thread-local data goes, and the finalizer tells the tool thread to exit."""

    __slots__ = ("slot", "__weakref__")

    def __init__(self):
        self.slot = _Slot()
        threading.Thread(target=_serve, args=(self.slot,), name="flowctl-tool", daemon=True).start()
        weakref.finalize(self, _stop, self.slot)


def _stop(slot: _Slot) -> None:
    with slot.mutex:
        if not slot.abandoned and slot.job is None:
            slot.go.release()  # job None: exit


def _give_up(slot: _Slot) -> bool:
    """The caller stops waiting: True if the call is still running (given up: its outcome is
    dropped, and the caller gets a new tool thread next time), False if its outcome has arrived."""
    with slot.mutex:
        if slot.done.acquire(blocking=False):
            return False
        slot.abandoned = True
        _local.owner = None
        return True


def call(fn, args: tuple, timeout: float, settle: bool = False):
    """``fn(*args)`` on the calling thread's tool thread; its result, or what it raised (any
    ``BaseException``), re-raised here. Raises :class:`TimedOut` after ``timeout`` seconds.

    ``settle`` (a call that may act on the world: a side effect, a compensation): past its
    deadline the caller still waits for the call to end — its outcome is dropped and
    :class:`TimedOut` raised only then — so nothing after it (verify, a retry, compensation)
    runs while its effect may still land. A call that never returns holds its caller."""
    owner = getattr(_local, "owner", None)
    if owner is None:
        owner = _local.owner = _Owner()
    slot = owner.slot
    if not timeout < threading.TIMEOUT_MAX:  # longer (or NaN) is no limit; acquire() would raise
        timeout = threading.TIMEOUT_MAX
    slot.job = (fn, args)
    slot.go.release()
    try:
        finished = slot.done.acquire(timeout=timeout)
    except BaseException:  # a signal handler's exception while waiting (an outer tool's deadline, Ctrl-C)
        if not _give_up(slot):
            slot.outcome = None  # it had just arrived: dropped, and the tool thread is kept
        raise
    if not finished and settle:
        slot.done.acquire()  # overran: wait for its end (the tool thread is kept), then time out
        slot.outcome = None
        raise TimedOut()
    if not finished and _give_up(slot):
        raise TimedOut()
    ok, value = slot.outcome
    slot.outcome = None
    if ok:
        return value
    try:
        raise value
    finally:
        value = None  # no reference cycle through the traceback


__all__ = ["TimedOut", "call"]
