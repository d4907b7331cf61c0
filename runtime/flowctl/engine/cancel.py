"""Cancelling a run: own it with one conditional commit, then undo and end it ``cancelled``."""
from __future__ import annotations

from flowctl.engine import saga
from flowctl.engine.adhoc import flow_of
from flowctl.engine.calls import inflight_to_saga, undo_inflight
from flowctl.engine.context import RunContext, live_owner, owner_hint, trusted_project
from flowctl.engine.result import RunResult
from flowctl.errors import Cancelled, FlowctlError, RunInUse, UsageError, run_error
from flowctl.store.sql import FINAL


def cancel(engine, row, *, compensate=True, by=None, holder: bool = False) -> RunResult:
    """Cancel the run of ``row`` (see Engine.cancel). A run a live worker holds is not touched here:
    the request is recorded and that worker cancels it at its next checkpoint (the result is then
    still ``running``, with ``cancel_requested`` set). ``holder``: the caller is that worker.

    The cancel first *owns* the run: one commit conditioned on the run's ``last_seq`` (and, on a
    leased run, its fence) records ``run_cancelled`` and ``cursor.cancelling`` before anything is
    undone. A resume, recover or other cancel that committed first wins and this one raises
    :class:`RunConflict` having compensated nothing; one that comes later finds the run owned. A
    cancel whose process dies after owning the run is finished by the next resume or recover."""
    if row["status"] in FINAL:
        raise UsageError(f"run {row['id']} already ended ({row['status']}); there is nothing to cancel")
    if (not holder and row["status"] == "running" and row.get("lease_until") is not None
            and engine.store.request_cancel(row["id"], {"by": by, "compensate": compensate})):
        return RunResult(row["id"], row["flow"], "running", None, None, list((row.get("cursor") or {}).get("path", [])),
                         steps=(row.get("cursor") or {}).get("step", 0), cancel_requested=True)
    if row["status"] == "running" and not holder:
        live = live_owner(row.get("owner"), engine.owner)
        if live:
            raise RunInUse(f"run {row['id']} is being executed by {live}",
                             hint=owner_hint(row["owner"], "stop that process first; the run stays resumable "
                                                       "and can then be cancelled"))
    project = trusted_project(engine, row)
    ctx = RunContext(engine, project, flow_of(project, row), row)
    ctx.emit("run_cancelled", by=by, compensate=compensate)
    # a cancel that an earlier (stopped) cancel began goes on as that one asked
    c = ctx.cursor
    c.cancelling = c.cancelling or {"by": by, "compensate": compensate}
    c.pending = None
    ctx.commit(status="running", owner=engine.owner, available_at=None)  # owns the run, or RunConflict
    finish_cancel(ctx)
    return ctx.result()


def finish_cancel(ctx) -> None:
    """Carry out the cancel recorded in ``cursor.cancelling`` of a run this process owns: undo an
    in-flight call that happened, cancel the unfinished children, compensate, end ``cancelled``."""
    engine, c = ctx.engine, ctx.cursor
    request = c.cancelling
    compensate, by = request.get("compensate", True), request.get("by")
    if compensate and c.inflight:
        undo_inflight(ctx)
    for child in engine.store.list_runs(parent_id=ctx.id, limit=0):
        if child["status"] not in FINAL:
            try:
                cancel(engine, child, compensate=compensate, by=by)
            except FlowctlError as exc:  # it ended or was taken meanwhile: it stands as it is, and the log says so
                ctx.emit("child_not_cancelled", c.state, run_id=child["id"], code=exc.code, message=str(exc))
    if compensate:
        if c.fanout is not None:  # mid-fan-out: the children that ended have not handed over their sagas yet
            _take_over_children(ctx, c.fanout)
        saga.compensate(ctx, reason="cancelled")
    c.done = True
    c.pending = None
    ctx.commit(status="cancelled", error=run_error(Cancelled, f"cancelled by {by or 'a user'}", c.state),
               available_at=None)


def _take_over_children(ctx, fan) -> None:
    """Put in the parent's saga the effects of the children of its current fan-out that ended
    (succeeded, or stopped by a failed sibling) before the cancel: a fan-out hands them over only
    when it concludes, and a cancel comes before that (breaker finding: they were never undone).
    A child's row must be what it sealed (:func:`~flowctl.engine.fanout.trusted_result`)."""
    from flowctl.engine.fanout import child_id, trusted_result

    c = ctx.cursor
    ids = {child_id(fan, i) for i in range(fan.get("count") or 0)}
    for row in ctx.engine.store.list_runs(parent_id=ctx.id, limit=0):
        if row["id"] in ids and row["status"] in ("succeeded", "cancelled"):
            trusted_result(ctx.engine, row)
            c.saga.extend((row.get("cursor") or {}).get("saga") or ())
    c.saga.sort(key=lambda e: e.get("at", 0))


def stopped_by_sibling(ctx) -> None:
    """A sibling branch failed: stop here without compensating (the parent takes over the saga).
    A call in flight when a process died is verified first, and its effect, if it happened, joins
    the saga the parent compensates (breaker finding: it was dropped, never undone)."""
    c = ctx.cursor
    if c.inflight:
        inflight_to_saga(ctx)
    c.done = True
    c.pending = None
    ctx.emit("run_cancelled", c.state, reason="sibling failed", compensate=False)
    ctx.commit(status="cancelled", error=run_error(Cancelled, "a sibling branch failed", c.state), available_at=None)


__all__ = ["cancel", "finish_cancel", "stopped_by_sibling"]
