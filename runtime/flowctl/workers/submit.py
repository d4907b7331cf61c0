"""Submitting runs for workers: ``flowctl submit`` and :func:`enqueue`.

A submitted run is written ``queued`` (its definition snapshot saved, its input checked, its
first events sealed, exactly as ``flowctl run`` would start it) and no process drives it until a
worker claims it (:mod:`flowctl.workers.worker`).
"""
from __future__ import annotations

from flowctl.engine.lifecycle import Queued, create
from flowctl.errors import UsageError
from flowctl.store.protocol import QueueStore


def enqueue(engine, flow_id: str, run_input=None, *, params: dict | None = None, queue: str = "default",
            priority: int = 0, delay: float | None = None, run_id: str | None = None) -> str:
    """Submit a run of ``flow_id`` for workers and return its id. The input and params are checked
    and the definition snapshot saved exactly as :meth:`Engine.run` does; ``delay`` seconds
    postpone it. Raises :class:`UsageError` (unknown flow, bad input), :class:`StoreError`."""
    if not isinstance(engine.store, QueueStore):
        raise UsageError("workers need a shared store: --db postgresql://… or sqlite:///path.db, not memory")
    if not queue or len(queue) > 100:
        raise UsageError("--queue must be 1 to 100 characters")
    flow = engine._flow(flow_id)
    engine._check_flow(flow)
    runner = create(engine, engine.project, flow, {} if run_input is None else run_input, params or {}, run_id,
                    queued=Queued(queue, int(priority), delay))
    return runner.id


__all__ = ["enqueue"]
