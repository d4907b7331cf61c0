"""Child runs of parallel, map and subflow states: the plan, its outcome, and who runs it.

How the children run is the engine's launcher's business (:mod:`flowctl.engine.launchers`):
this module never starts a run itself, so it imports neither the run lifecycle nor the worker.

A ``parallel``, ``map`` or ``subflow`` state plans its children first — ``[{index, flow, input,
run_id}]`` — and commits the plan in the parent's checkpoint (``cursor.fanout``), so a crash
mid-fan-out resumes the same children: those that finished are read back from the store, those
that did not are resumed, none is started twice. Children are real runs (their own ids, events,
checkpoints and definition pin: the parent's), with ``parent_id`` set.

Children run on threads, at most ``max_concurrency`` at a time (default: all branches of a
``parallel``, 1 for ``map``). Each child handles its own errors with its own layers. When more
children fail than ``tolerated_failures`` allows (``{count: N}`` or ``{percent: P}``; default 0),
the running siblings are stopped between steps, and :class:`~flowctl.errors.BranchFailed` (naming
the first failed child's error) goes through the parent's layers. The completed side effects of
children that did not fail join the parent's saga, ordered by completion time, so a later
compensation undoes them newest first. A child cancelled from outside counts as a failed branch
(:func:`failed_branches`): a parent never succeeds on a cancelled child. A child that pauses (review) or waits parks the parent
(``waiting`` on its children); the parent continues when the child ends.

**In a worker** (``flowctl worker``: its engine's launcher is a
:class:`~flowctl.engine.launchers.QueueLauncher`) children are not threads: they
are written as ``queued`` runs, at most ``max_concurrency`` unfinished at a time, in the parent's
queue and priority, and any worker claims them. The parent parks ``waiting`` on its children;
each child that ends makes the parent due in the same transaction as its final commit,
and whichever worker claims the parent records the finished children, queues the next ones, and
parks again or goes on. When more children fail than tolerated, no further child is queued; those
already queued or running finish (there is no cancel request to stop them), their completed side
effects join the parent's saga, and :class:`~flowctl.errors.BranchFailed` is raised when they have.
A fan-out that began in a worker stays queued (``plan["queued"]``) whoever continues the parent:
``flowctl resume``/``recover`` re-check and queue children as a worker would, never run them on
threads beside the workers, and a child that ends outside a worker makes its parent due too.

``response`` is the list of child outputs in branch or item order (a tolerated failed or cancelled
item is ``{"error": {...}}``); for ``subflow`` it is the child's output. A map with a ``batch`` runs one
child per batch with input ``{"items": [item inputs]}`` and flattens the outputs.
"""
from __future__ import annotations

from flowctl.engine.context import PARKED, refuse_forged
from flowctl.engine.result import RunResult, new_run_id, result_from_row
from flowctl.errors import BranchFailed, FlowctlError, MaxStepsExceeded, RecordTampered, UsageError
from flowctl.store.audit import verify_run
from flowctl.store.sql import FINAL

DEFAULT_MAX_DEPTH = 10


def run_children(ctx, state, planner):
    """Run the children of ``state`` (planned by ``planner(ctx, state) -> (plans, concurrency,
    batched)``, ``plans`` a list of ``(flow id, input)``); return the response, or ``PARKED`` while
    a child waits or pauses. Raises :class:`BranchFailed` when more failed than tolerated."""
    c = ctx.cursor
    visit = c.visits.get(state.id, 1)
    fan = c.fanout
    if not fan or fan.get("state") != state.id or fan.get("visit") != visit:
        fan = plan(ctx, state, visit, planner)
        c.fanout = fan
        shown = [{"index": ch["index"], "flow": ch["flow"], "run_id": ch["run_id"]} for ch in fan["children"][:50]]
        ctx.emit("fanout_started", state.id, c.attempt, kind=state.type, count=len(fan["children"]),
                 children=shown, max_concurrency=fan["max_concurrency"])
        ctx.commit()
    if _drive(ctx, state, fan) is PARKED:
        return PARKED
    children = fan["children"]
    if any(ch["status"] in ("paused", "waiting") for ch in children) and not fan.get("failed"):
        waiting = [ch["run_id"] for ch in children if ch["status"] in ("paused", "waiting")]
        return ctx.park("waiting", {"kind": "children", "state": state.id, "children": waiting}, None)
    failed = failed_branches(fan)
    for ch in children:  # the parent takes over the completed side effects of its children
        if ch["status"] in ("succeeded", "cancelled") and ch.get("saga"):
            c.saga.extend(ch.pop("saga"))
    c.saga.sort(key=lambda e: e.get("at", 0))
    ctx.emit("fanout_finished", state.id, c.attempt, succeeded=sum(ch["status"] == "succeeded" for ch in children),
             failed=len(failed), cancelled=sum(ch["status"] == "cancelled" for ch in children))
    c.fanout = None
    if len(failed) > fan["tolerated"] or fan.get("failed"):
        first = failed[0] if failed else next(ch for ch in children if ch["status"] != "succeeded")
        err = first.get("error") or {}
        how = "failed" if all(ch["status"] == "failed" for ch in failed) else "failed or were cancelled"
        raise BranchFailed(f"{len(failed)} of {len(children)} child runs of '{state.id}' {how}; child "
                           f"{first['run_id']} ({first['flow']}#{first['index']}): {err.get('type')}: {err.get('message')}")
    outputs = [ch["output"] if ch["status"] == "succeeded" else {"error": ch.get("error")} for ch in children]
    if state.type == "subflow":
        return outputs[0]
    if fan.get("batched"):
        flat = []
        for out in outputs:
            flat.extend(out if isinstance(out, list) else [out])
        return flat
    return outputs


def failed_branches(fan) -> list:
    """The children of the plan ``fan`` that count as failed branches (``[child dict]``, plan
    order): each ``failed`` one, and each ``cancelled`` one unless too many had failed already.

    A child cancelled from outside (``flowctl cancel CHILD``) did not deliver its branch: it counts
    against ``tolerated_failures`` like a failed one (a tolerated one's response entry is
    ``{"error": {...CANCELLED}}``), so its parent never succeeds on it. Children cancelled
    *because* too many siblings failed (stopped between steps, or never started) are not counted
    again: the plan is then marked ``failed`` and the parent fails anyway. The launchers stop or
    stop queueing siblings only on failed children; with a cancelled one the others run to their
    end first and the parent then fails :class:`~flowctl.errors.BranchFailed` as it would for a
    failed child."""
    counted = ("failed",) if fan.get("failed") else ("failed", "cancelled")
    return [ch for ch in fan["children"] if ch["status"] in counted]


def plan(ctx, state, visit, planner) -> dict:
    """The fan-out plan kept in ``cursor.fanout``: ``{state, visit, children: [{index, flow, input,
    run_id, status, output, error}], max_concurrency, tolerated, depth, batched}``."""
    depth = ctx.cursor.depth + 1
    limit = state.max_depth or ctx.flow.limits.max_depth or DEFAULT_MAX_DEPTH
    if depth > limit:
        raise MaxStepsExceeded(f"'{state.id}' would nest child runs {depth} deep (max_depth {limit})")
    plans, concurrency, batched = planner(ctx, state)
    tolerated_spec = state.tolerated_failures or {}
    if "percent" in tolerated_spec:
        tolerated = int(len(plans) * tolerated_spec["percent"] / 100)
    else:
        tolerated = tolerated_spec.get("count", 0)
    children = [{"index": i, "flow": flow, "input": child_input, "run_id": new_run_id(ctx.clock),
                 "status": None, "output": None, "error": None} for i, (flow, child_input) in enumerate(plans)]
    return {"state": state.id, "visit": visit, "children": children, "max_concurrency": max(1, concurrency),
            "tolerated": tolerated, "depth": depth, "batched": batched}


def _drive(ctx, state, fan):
    """Hand the unfinished children to the launcher: a plan queued for workers stays queued."""
    if all(ch["status"] in FINAL for ch in fan["children"]):
        return None
    launcher = ctx.engine.queue_launcher if fan.get("queued") else ctx.engine.launcher
    if launcher.queued:
        fan["queued"] = True
    return launcher.drive(ctx, state, fan)


def child_parent(ctx, state, fan, ch) -> dict:
    """The ``parent`` of child ``ch`` as a run start takes it: ``{id, state, index, depth, secrets}``."""
    return {"id": ctx.id, "state": state.id, "index": ch["index"], "depth": fan["depth"],
            "secrets": ctx.secrets and ctx.secrets.kept()}


def refused_child(ch, exc: UsageError) -> RunResult:
    """The outcome of a child its flow refused to start (e.g. its input_schema refuses the built input)."""
    return RunResult(ch["run_id"], ch["flow"], "failed",
                     error={"type": UsageError.__name__, "code": exc.code, "message": str(exc), "state": None})


def record(ctx, state, fan, ch, result) -> None:
    """A child ended: keep its outcome (and completed side effects) in the plan; say so in the log."""
    ch["status"], ch["output"], ch["error"] = result.status, result.output, result.error
    if result.status in ("paused", "waiting"):  # its review token, for the parent's result only
        ctx.child_results[ch["run_id"]] = result
    row = None
    if result.status in ("succeeded", "cancelled"):
        row = ctx.store.get_run(ch["run_id"])
        ch["saga"] = list((row.get("cursor") or {}).get("saga") or [])
    if ctx.secrets is not None:  # what the child knew to be secret, the parent now redacts too
        try:
            row = row or ctx.store.get_run(ch["run_id"], exact=True)
        except FlowctlError:
            row = {}  # never created (its input was refused)
        ctx.secrets.absorb((row.get("cursor") or {}).get("secrets"))
    ctx.emit("child_finished", state.id, None, run_id=ch["run_id"], index=ch["index"], flow=ch["flow"],
             status=result.status, error=result.error)


def trusted_result(engine, row) -> RunResult:
    """A finished child's outcome, once its row is what its last commit sealed: a parent never
    takes a forged output (or status, or error) of a child as its response (RECORD_TAMPERED)."""
    refuse_forged(engine, row)
    if "seal" in row and not row.get("seal"):  # no seal: only a row that ended before seals existed
        problems = verify_run(row, engine.store.events(row["id"]))  # so its own log must say it ended so
        if problems:
            raise RecordTampered(f"run {row['id']}: an unsealed finished child whose log disagrees: {problems[0]}; "
                                 "its parent does not take its outcome",
                                 hint=f"flowctl audit verify {row['id']} says what differs; restore the store from a backup")
    return result_from_row(row)


__all__ = ["run_children", "failed_branches", "plan", "record", "trusted_result", "child_parent", "refused_child", "DEFAULT_MAX_DEPTH"]
