"""Who runs a fan-out's child runs (:mod:`flowctl.engine.fanout` asks the engine's launcher).

:class:`ThreadLauncher` (the default) drives them on threads of this process, at most
``max_concurrency`` at a time, stopping the siblings between steps when too many failed.
:class:`QueueLauncher` (a worker's, :class:`flowctl.workers.worker.Worker`) writes them as
``queued`` runs any worker may claim and parks the parent until one ends. A plan once queued stays
queued whoever continues the parent (``Engine.queue_launcher``). ``drive(ctx, state, fan,
children)`` (``children``: the plan's :class:`~flowctl.engine.fanout.Children`) returns None when
every child ended or paused, or ``PARKED``. Both hand children out in plan order
(:func:`~flowctl.engine.fanout.take_next`) and touch only the children in flight: the work per
child does not grow with the plan's size.
"""
from __future__ import annotations

import threading
import time

from flowctl.engine import lifecycle
from flowctl.engine.result import RunResult
from flowctl.engine.fanout import (RECORD_EVERY, RECORD_EVERY_S, child_parent, left_to_start, open_ids, record,
                                   refused_child, take_next, trusted_result)
from flowctl.errors import FlowctlError, RunConflict, RunInUse, UsageError
from flowctl.store.sql import FINAL


class ThreadLauncher:
    """Children as threads of this process (see the module docstring): at most
    ``max_concurrency`` threads, each taking the next child in plan order until none is left or
    too many failed; the children handed out before (``open``: paused, waiting, or cut off by a
    crash) are taken first. The parent commits every :data:`~flowctl.engine.fanout.RECORD_EVERY`
    ends (or :data:`~flowctl.engine.fanout.RECORD_EVERY_S` seconds), once more at the end."""

    queued = False

    def drive(self, ctx, state, fan, children):
        stop = threading.Event()
        lock = threading.Lock()
        again = [int(k) for k in sorted(fan["open"], key=int)]
        unsaved = [0, time.monotonic()]  # ends since the last commit, when it was

        def take():
            with lock:
                if stop.is_set():
                    return None
                if again:
                    return again.pop(0)
                index = take_next(fan)
                if index is not None:
                    fan["open"][str(index)] = children.run_id(index)
                    children.reserve(index)
                return index

        def loop():
            while (index := take()) is not None:
                result, keep = _run_child(ctx, state, fan, children, index, stop)
                with lock:
                    record(ctx, state, fan, index, result, keep=keep)
                    if result.status == "failed" and fan["ended"]["failed"] > fan["tolerated"]:
                        fan["failed"] = True
                        stop.set()
                    unsaved[0] += 1
                    if unsaved[0] >= RECORD_EVERY or time.monotonic() - unsaved[1] >= RECORD_EVERY_S:
                        ctx.commit()
                        unsaved[:] = [0, time.monotonic()]

        width = min(fan["max_concurrency"], len(again) + left_to_start(fan))
        if width <= 1:
            loop()
        else:
            from concurrent.futures import ThreadPoolExecutor  # here: not on every command's import path

            with ThreadPoolExecutor(max_workers=width, thread_name_prefix=f"flowctl-{state.id}") as pool:
                for future in [pool.submit(loop) for _ in range(width)]:
                    future.result()
        if unsaved[0]:
            ctx.commit()
        return None


class QueueLauncher:
    """Children as queued runs for any worker (see the module docstring): record the children that
    ended, queue the next ones up to ``max_concurrency`` open, park the parent while any is open."""

    queued = True

    def drive(self, ctx, state, fan, children):
        engine = ctx.engine
        unqueued = []  # handed out, but this parent died before queueing them
        for key in sorted(fan["open"], key=int):
            row = _find(engine, fan["open"][key])
            if row is None:
                unqueued.append(int(key))
            elif row["status"] in FINAL:
                record(ctx, state, fan, int(key), trusted_result(engine, row))
        _check_failed(fan)
        for index in unqueued:
            self._queue(ctx, state, fan, children, index)
        while not fan.get("failed") and len(fan["open"]) < fan["max_concurrency"]:
            index = take_next(fan)
            if index is None:
                break
            fan["open"][str(index)] = children.run_id(index)
            children.reserve(index)
            # queued already if this parent died between queueing it and its next checkpoint
            row = None if children.fresh(index) else _find(engine, children.run_id(index))
            if row is None:
                self._queue(ctx, state, fan, children, index)
            elif row["status"] in FINAL:  # and it may have ended since: its wake-up went to a parent still running
                record(ctx, state, fan, index, trusted_result(engine, row))
                _check_failed(fan)
        if fan["open"]:
            return ctx.park("waiting", {"kind": "children", "state": state.id, "children": open_ids(fan)}, None,
                            keep_due=True)
        return None

    @staticmethod
    def _queue(ctx, state, fan, children, index) -> None:
        """Write child ``index`` (in ``open``) as a queued run; refused, or too many failed first, it
        ends at once (its outcome kept in the plan)."""
        run_id = children.run_id(index)
        flow, child_input = children.plan(index)
        if fan.get("failed"):
            record(ctx, state, fan, index, RunResult(run_id, flow, "cancelled"), keep=True)
            return
        try:
            lifecycle.create(ctx.engine, ctx.project, ctx.project.flows[flow], child_input, {}, run_id,
                             parent=child_parent(ctx, state, fan, index),
                             queued=lifecycle.Queued(ctx.row.get("queue") or "default", int(ctx.row.get("priority") or 0)))
        except UsageError as exc:  # e.g. the child flow's input_schema refuses the built input
            record(ctx, state, fan, index, refused_child(flow, run_id, exc), keep=True)
            _check_failed(fan)


def _check_failed(fan) -> None:
    if fan["ended"]["failed"] > fan["tolerated"]:
        fan["failed"] = True


def _find(engine, run_id):
    """The row of run ``run_id``, or None if there is none."""
    try:
        return engine.store.get_run(run_id, exact=True)
    except FlowctlError:
        return None


def _run_child(ctx, state, fan, children, index, stop) -> tuple:
    """``(RunResult, keep)`` of child ``index`` once it ends or pauses: started, resumed, or read
    back; ``keep``: refused, its outcome has no row of its own."""
    engine, project = ctx.engine, ctx.project
    run_id = children.run_id(index)
    row = None if children.fresh(index) else _find(engine, run_id)
    flow = row["flow"] if row is not None else None
    if row is None and fan.get("failed"):  # handed out before too many failed, never started
        return RunResult(run_id, children.plan(index)[0], "cancelled"), True
    try:
        if row is None:
            flow, child_input = children.plan(index)
            return lifecycle.start(engine, project, project.flows[flow], child_input, {}, run_id,
                                   parent=child_parent(ctx, state, fan, index), stop=stop), False
        if row["status"] in FINAL or row["status"] == "paused":  # ended, or waits for its reviewer
            return trusted_result(engine, row), False
        return lifecycle.resume(engine, row, stop=stop, continue_parent=False), False
    except (RunInUse, RunConflict):  # another process drives it (a resume, a recover, a worker): still open
        # (breaker finding: it was counted failed, and the parent compensated while the child ran on)
        return RunResult(run_id, flow or children.plan(index)[0], "running"), False
    except UsageError as exc:  # e.g. the child flow's input_schema refuses the built input
        return refused_child(flow or children.plan(index)[0], run_id, exc), True


__all__ = ["ThreadLauncher", "QueueLauncher"]
