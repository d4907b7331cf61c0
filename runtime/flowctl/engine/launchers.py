"""Who runs a fan-out's child runs (:mod:`flowctl.engine.fanout` asks the engine's launcher).

:class:`ThreadLauncher` (the default) drives them on threads of this process, at most
``max_concurrency`` at a time, stopping the siblings between steps when too many failed.
:class:`QueueLauncher` (a worker's, :class:`flowctl.workers.worker.Worker`) writes them as
``queued`` runs any worker may claim and parks the parent until one ends. A plan once queued stays
queued whoever continues the parent (``Engine.queue_launcher``). ``drive(ctx, state, fan)``
returns None when every child ended, or ``PARKED``.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from flowctl.engine import lifecycle
from flowctl.engine.fanout import child_parent, record, refused_child, trusted_result
from flowctl.errors import FlowctlError, UsageError
from flowctl.store.sql import FINAL


class ThreadLauncher:
    """Children as threads of this process (see the module docstring)."""

    queued = False

    def drive(self, ctx, state, fan):
        todo = [ch for ch in fan["children"] if ch["status"] not in FINAL]
        stop = threading.Event()
        lock = threading.Lock()
        failures = [sum(ch["status"] == "failed" for ch in fan["children"])]

        def one(ch):
            if stop.is_set():
                return
            result = _run_child(ctx, state, fan, ch, stop)
            with lock:
                record(ctx, state, fan, ch, result)
                if result.status == "failed":
                    failures[0] += 1
                    if failures[0] > fan["tolerated"]:
                        fan["failed"] = True
                        stop.set()
                ctx.commit()

        if fan["max_concurrency"] == 1 or len(todo) == 1:
            for ch in todo:
                one(ch)
        else:
            with ThreadPoolExecutor(max_workers=min(fan["max_concurrency"], len(todo)),
                                    thread_name_prefix=f"flowctl-{state.id}") as pool:
                for future in [pool.submit(one, ch) for ch in todo]:
                    future.result()
        _never_started(fan)
        return None


class QueueLauncher:
    """Children as queued runs for any worker (see the module docstring): record the children that
    ended, queue the next ones up to ``max_concurrency`` open, park the parent while any is open."""

    queued = True

    def drive(self, ctx, state, fan):
        engine, project = ctx.engine, ctx.project
        children = fan["children"]
        failures = sum(ch["status"] == "failed" for ch in children)
        open_ids = []
        for ch in children:
            if ch["status"] in FINAL or not ch.get("queued"):
                continue
            row = engine.store.get_run(ch["run_id"], exact=True)
            if row["status"] in FINAL:
                record(ctx, state, fan, ch, trusted_result(engine, row))
                failures += ch["status"] == "failed"
            else:
                open_ids.append(ch["run_id"])
        if failures > fan["tolerated"]:
            fan["failed"] = True
        for ch in children:
            if fan.get("failed") or len(open_ids) >= fan["max_concurrency"]:
                break
            if ch["status"] is not None or ch.get("queued"):
                continue
            try:  # queued already if this parent died between queueing it and its next checkpoint
                row = engine.store.get_run(ch["run_id"], exact=True)
            except FlowctlError:
                try:
                    lifecycle.create(engine, project, project.flows[ch["flow"]], ch["input"], {}, ch["run_id"],
                                     parent=child_parent(ctx, state, fan, ch),
                                     queued=lifecycle.Queued(ctx.row.get("queue") or "default",
                                                             int(ctx.row.get("priority") or 0)))
                except UsageError as exc:  # e.g. the child flow's input_schema refuses the built input
                    record(ctx, state, fan, ch, refused_child(ch, exc))
                    failures += 1
                    fan["failed"] = fan.get("failed") or failures > fan["tolerated"]
                    continue
            else:
                if row["status"] in FINAL:  # and it may have ended since: its wake-up went to a parent still running
                    ch["queued"] = True
                    record(ctx, state, fan, ch, trusted_result(engine, row))
                    failures += ch["status"] == "failed"
                    fan["failed"] = fan.get("failed") or failures > fan["tolerated"]
                    continue
            ch["queued"] = True
            open_ids.append(ch["run_id"])
        if open_ids:
            return ctx.park("waiting", {"kind": "children", "state": state.id, "children": open_ids}, None,
                            keep_due=True)
        _never_started(fan)
        return None


def _never_started(fan) -> None:
    for ch in fan["children"]:  # never started or queued because too many siblings failed
        if ch["status"] is None:
            ch["status"] = "cancelled"


def _run_child(ctx, state, fan, ch, stop):
    engine, project = ctx.engine, ctx.project
    try:
        row = engine.store.get_run(ch["run_id"], exact=True)
    except FlowctlError:
        row = None
    try:
        if row is None:
            return lifecycle.start(engine, project, project.flows[ch["flow"]], ch["input"], {}, ch["run_id"],
                                   parent=child_parent(ctx, state, fan, ch), stop=stop)
        if row["status"] in FINAL or row["status"] == "paused":  # ended, or waits for its reviewer
            return trusted_result(engine, row)
        return lifecycle.resume(engine, row, stop=stop, continue_parent=False)
    except UsageError as exc:  # e.g. the child flow's input_schema refuses the built input
        return refused_child(ch, exc)


__all__ = ["ThreadLauncher", "QueueLauncher"]
