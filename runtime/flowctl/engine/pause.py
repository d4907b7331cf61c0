"""Pausing a run at its next checkpoint, and continuing it (issue 20, takeover).

:func:`request` records who asks and why (``{by, reason, at}``) on the run row (the store's
``pause_requested``, schema 8), conditioned so that two requests at once keep the first. Nothing is interrupted: whichever process drives
the run — ``flowctl run``, a worker, the server — learns of the request from its next commit (every
store commit hands the column back from its own ``UPDATE … RETURNING``: no read per step), and the
step loop (:meth:`flowctl.engine.loop.Runner.drive`) pauses at the checkpoint that follows, before
the next state is entered: a tool call in progress finishes and is recorded first.

:func:`pause_here` parks the run ``paused`` with ``cursor.pending`` ``{kind: "pause", state, by,
reason, requested_at, under}`` (``under``: what was pending before, e.g. a wait whose time came;
it is put back on resume), records ``run_paused`` naming who and why, and clears the request in the
same commit. Such a run is left alone by ``recover``, workers and review timeouts (it has no due
time); :func:`continue_paused` (``flowctl resume RUN``) records ``run_resumed`` with who and goes on
from that checkpoint.

Fan-out (parallel, map, subflow): the request is the parent's alone. Its branches are child runs
with checkpoints of their own; they are not asked, run on to their end, and the parent pauses at
its first checkpoint after the fan-out state (a child can be paused by its own id).

A run that is not being driven when asked (waiting on a timer or its children, queued, paused
for review, or orphaned) keeps the request and pauses at the first checkpoint of whatever
continues it. A run that ends first never pauses (the request stays on its row, unused). A
cancel found at the same checkpoint wins over a pause.
"""
from __future__ import annotations

from flowctl.engine.adhoc import is_session
from flowctl.errors import UsageError
from flowctl.store.sql import FINAL

#: ``cursor.pending["kind"]`` of a run an operator paused (a review's is ``review``).
KIND = "pause"


def is_paused_by_operator(row: dict) -> bool:
    """Whether ``row`` (a run dict) is ``paused`` at an operator's request (not for a review)."""
    return row.get("status") == "paused" and ((row.get("cursor") or {}).get("pending") or {}).get("kind") == KIND


def request(engine, row: dict, *, by: str | None, reason: str) -> dict:
    """Ask the run of ``row`` to pause at its next checkpoint. ``reason``: required text, kept with
    ``by`` (who asks, e.g. ``key:ops``) and the time (epoch seconds, database clock).

    Returns ``{run_id, status, request, new}``: the request that stands (an earlier one when one
    was already pending: ``new`` False) and the run's status when asked. Raises
    :class:`UsageError` when the run has ended, is already paused by an operator or is a server
    session (no steps), or the reason is empty."""
    reason = (reason or "").strip()
    if not reason:
        raise UsageError("say why the run is paused", hint="pass --reason TEXT; it is recorded with who paused it")
    if row["status"] in FINAL:
        raise UsageError(f"run {row['id']} already ended ({row['status']}); there is nothing to pause")
    if is_session(row["flow"]):
        raise UsageError(f"run {row['id']} is a flowctl serve session; it has no steps to pause at",
                         hint=f"stop invoking its tools, or end it: flowctl cancel {row['id']}")
    if is_paused_by_operator(row):
        pending = row["cursor"]["pending"]
        raise UsageError(f"run {row['id']} is already paused (by {pending.get('by') or 'a user'}: {pending.get('reason')})",
                         hint=f"continue it with: flowctl resume {row['id']}")
    standing, new = engine.store.request_pause(row["id"], {"by": by, "reason": reason})
    if standing is None:  # it ended between the read and the write
        raise UsageError(f"run {row['id']} ended before the pause was recorded; there is nothing to pause")
    return {"run_id": row["id"], "status": row["status"], "request": standing, "new": new}


def pause_here(ctx, asked: dict) -> None:
    """Park the run of ``ctx`` (a runner at a checkpoint: its last step committed) ``paused`` as
    ``asked`` (``{by, reason, at}``), recording ``run_paused``; the request is cleared in the same
    commit. Raises :class:`RunConflict` / ``LeaseLost`` when another writer won (nothing written)."""
    c = ctx.cursor
    pending = {"kind": KIND, "state": c.state, "by": asked.get("by"), "reason": asked.get("reason"),
               "requested_at": asked.get("at")}
    if c.pending:  # e.g. a wait whose time came, paused as it resumed: it goes on as it was
        pending["under"] = c.pending
    c.pending = pending
    ctx.emit("run_paused", c.state, status="paused", pending=pending, available_at=None,
             by=pending["by"], reason=pending["reason"])
    ctx.commit(status="paused", available_at=None, pause_requested=None)


def continue_paused(runner, *, by: str | None) -> None:
    """Ready a run an operator paused to go on from its checkpoint (the caller commits it
    ``running``, which drops a request that came in while it was paused, and drives it):
    ``run_resumed`` names who resumed it and who had paused it."""
    pending = runner.cursor.pending or {}
    runner.cursor.pending = pending.get("under")
    runner.emit("run_resumed", pending.get("state"), reason="operator", by=by, paused_by=pending.get("by"))


__all__ = ["KIND", "request", "pause_here", "continue_paused", "is_paused_by_operator"]
