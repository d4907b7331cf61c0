"""Fencing: the store as a worker's runners see it (:class:`LeasedStore`)."""
from __future__ import annotations

from flowctl.errors import LeaseLost


class LeasedStore:
    """The store as a worker's runners see it. Reads pass through. Writes of a run this worker holds
    carry its fencing token; a run that a runner makes ``running`` without a claim (a child run it
    creates, a child or parent it continues in process) is leased first (:meth:`SqlStore.acquire`
    / ``create_run(lease=…)``), so every run a worker writes is leased, heartbeated and fenced."""

    def __init__(self, store, worker):
        self._store = store
        self._worker = worker

    def __getattr__(self, name):
        return getattr(self._store, name)

    def create_run(self, run, events, steps=(), **kw):
        w = self._worker
        if run.get("status") != "running":
            return self._store.create_run(run, events, steps, **kw)
        fence = self._store.create_run(dict(run, owner=w.id), events, steps, lease=w.lease)
        w.hold(run["id"], fence, parent=run.get("parent_id"))
        w.touched(run["id"])
        return fence

    def commit(self, run_id, expect_seq, run, events=(), steps=(), **_):
        w = self._worker
        fence = w.fence_of(run_id)
        stale = w.lost_fence(run_id)
        if stale is not None:
            # The heartbeat already found the lease gone. The write still goes to the database with
            # the old token, which refuses it (zero rows): the database, not this process, decides.
            fence = stale
        elif fence is None and run.get("status") == "running":
            fence, parent = self._store.acquire(run_id, expect_seq, w.id, w.lease)
            w.hold(run_id, fence, parent=parent)
        if fence is None:  # e.g. cancelling a paused child: no lease involved
            return self._store.commit(run_id, expect_seq, run, events, steps)
        try:  # the pause request the commit hands back (flowctl.engine.pause): the runner pauses on it
            pause = self._store.commit(run_id, expect_seq, run, events, steps, fence=fence, lease=w.lease)
        except LeaseLost as exc:
            w.stats["stale_commits_refused"] += 1
            w.log("stale_commit_refused", {"run": run_id, "fence": fence, "why": str(exc)})
            w.mark_lost(run_id, fence, "commit refused")
            raise
        if stale is not None:  # the token was still good after all (the heartbeat erred): hold it again
            w.hold(run_id, fence)
        w.touched(run_id)
        if run.get("status") not in (None, "running"):
            w.drop(run_id)  # parked or ended: the store released the lease with this commit
        return pause


__all__ = ["LeasedStore"]
