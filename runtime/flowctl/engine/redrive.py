"""Redrive: a failed run continues from the step that failed, under the definition it is pinned to.

:func:`redrive` is the operator's "retry from the failed step" (the console's takeover action, issue
20): the run row stays the same run — same id, same audit chain, same pinned definition snapshot
(``digest``) — and its step loop starts again at the state whose error failed it, entered afresh
(a new step, ``attempt`` 1). Its context is the context it had when it failed, or the one the
operator gives (``context=``: "edit context, then continue"), recorded as a ``context_overridden``
event holding ``before`` and ``after``. A ``run_redriven`` event says who, why, from which state
and which error it had. What the failure compensated stays compensated: the saga stack it undid is
empty, so a later failure compensates only what the redriven part did.

Refused (:class:`~flowctl.errors.UsageError`, nothing recorded): a run that is not ``failed``; a
child run (its parent has handled the failure; redrive the parent); a run that ended at a ``fail``
state (it failed by design, not at a step); a run of a flow with sensitive fields (their values
are dropped from the row when the run ends, so its input can no longer be replayed); a context that
is not a JSON object; a run whose failure compensated side effects (it would continue as if they
had happened); an edited context that changes a key a policy reads (the gate must not judge a call
against values an operator typed). A redrive racing another command raises :class:`~flowctl.errors.RunConflict`
(one conditional commit owns the run, as a cancel does).
"""
from __future__ import annotations

import copy

from flowctl.engine.context import trusted_project
from flowctl.engine.loop import Runner
from flowctl.engine.result import RunResult
from flowctl.engine.sensitive import flow_fields
from flowctl.errors import UsageError
from flowctl.gate.policy import context_keys_read


def redrive(engine, run_id: str, *, by: str | None = None, reason: str | None = None,
            context: dict | None = None) -> RunResult:
    """Continue failed run ``run_id`` from its failed state (see the module); drive it until it
    ends, pauses or parks and return the :class:`RunResult`. ``by``: who (as ``--by``), ``reason``:
    why (free text, recorded), ``context``: the context to continue with (a JSON object), or None to
    keep the one it failed with. Raises :class:`UsageError` (refused, see the module),
    :class:`~flowctl.errors.RunNotFound`, :class:`~flowctl.errors.RunConflict`."""
    row = engine.store.get_run(run_id)
    if row["status"] != "failed":
        raise UsageError(f"run {row['id']} is {row['status']}; only a failed run can be redriven",
                         hint="a paused run is decided, a waiting one resumed, a running one cancelled")
    if row.get("parent_id"):
        raise UsageError(f"run {row['id']} is a child run of {row['parent_id']}; its parent handled the failure",
                         hint=f"redrive the parent: {row['parent_id']}")
    if context is not None and not isinstance(context, dict):
        raise UsageError("the context to continue with must be a JSON object")
    project = trusted_project(engine, row)
    flow = project.flows[row["flow"]]
    if flow_fields(project, flow):
        raise UsageError(f"run {row['id']} is of flow '{flow.id}', which has sensitive fields; their values were "
                         "dropped when it ended, so it cannot be continued", hint="start a new run")
    runner = Runner(engine, project, flow, row)
    c = runner.cursor
    error = row.get("error") or c.error or {}
    state_id = error.get("state") or c.state
    state = project.states.get(state_id)
    if state is None or state.type == "fail":
        raise UsageError(f"run {row['id']} ended at '{state_id}', a fail state of its flow: it failed by design, "
                         "not at a step", hint="start a new run with the input it needs")
    undone = _compensated(engine.store, row["id"])
    if undone:
        raise UsageError(f"run {row['id']}: its failure undid {len(undone)} side effect(s) ({', '.join(undone)}); "
                         "continuing would go on as if they had happened",
                         hint="start a new run (its saga starts from nothing), or fix what failed and run again")
    if context is not None:
        _refuse_gate_inputs(project, c.context, context, row["id"])
        runner.emit("context_overridden", state_id, by=by, reason=reason, before=copy.deepcopy(c.context),
                    after=context)
        c.context = copy.deepcopy(context)
    runner.emit("run_redriven", state_id, by=by, reason=reason, error=error, owner=engine.owner)
    c.state, c.entered, c.attempt, c.done = state_id, False, 1, False
    c.error = c.response = c.pending = c.after_compensation = c.inflight = c.state_info = None
    runner.commit(status="running", owner=engine.owner, error=None, output=None, available_at=None)
    return runner.drive()


__all__ = ["redrive"]


def _refuse_gate_inputs(project, before: dict, after: dict, run_id: str) -> None:
    """Refuse (``UsageError``) an edit of a context key a policy reads: the gate would otherwise judge
    a call against a value the operator typed, and a denial could be edited into an allow."""
    read = context_keys_read(project)
    changed = {k for k in set(before) | set(after) if k not in before or k not in after or before[k] != after[k]}
    touched = sorted(k for k in changed if k in read) if "*" not in read else sorted(changed)
    if touched:
        policies = sorted({p for k in touched for p in read.get(k, read.get("*", []))} | set(read.get("*", [])))
        raise UsageError(f"run {run_id}: the edit changes {', '.join(touched)}, which the policy gate reads "
                         f"({', '.join(policies)}); an operator's edit cannot decide what the gate allows",
                         hint="edit only what no policy reads, or change the policy by pull request and start a new run")


def _compensated(store, run_id: str) -> list:
    """The tools whose effects the run's last failure compensated (since its last redrive)."""
    from flowctl.store.events import iter_events

    undone: list = []
    for ev in iter_events(store, run_id):
        if ev["type"] == "run_redriven":
            undone = []
        elif ev["type"] == "compensation_started":
            undone.append(str((ev.get("data") or {}).get("tool")))
    return undone
