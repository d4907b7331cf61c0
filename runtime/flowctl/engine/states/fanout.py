"""Parallel branches, map over items and sub-flows, run as durable child runs.

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
compensation undoes them newest first. A child that pauses (review) or waits parks the parent
(``waiting`` on its children); the parent continues when the child ends.

**In a worker** (``flowctl worker``; ``Engine.distribute_children``) children are not threads: they
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

``response`` is the list of child outputs in branch or item order (a tolerated failed item is
``{"error": {...}}``); for ``subflow`` it is the child's output. A map with a ``batch`` runs one
child per batch with input ``{"items": [item inputs]}`` and flattens the outputs.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from flowctl.engine.engine import new_run_id
from flowctl.errors import BranchFailed, FlowctlError, MaxStepsExceeded, UsageError
from flowctl.expr.expressions import compile_expr
from flowctl.expr.scope import build
from flowctl.store.sql import FINAL

DEFAULT_MAX_ITEMS = 10_000
DEFAULT_MAX_DEPTH = 10


def run_children(runner, state):
    c = runner.cursor
    visit = c["visits"].get(state.id, 1)
    fan = c.get("fanout")
    if not fan or fan.get("state") != state.id or fan.get("visit") != visit:
        fan = _plan(runner, state, visit)
        c["fanout"] = fan
        shown = [{"index": ch["index"], "flow": ch["flow"], "run_id": ch["run_id"]} for ch in fan["children"][:50]]
        runner.emit("fanout_started", state.id, c["attempt"], kind=state.type, count=len(fan["children"]),
                    children=shown, max_concurrency=fan["max_concurrency"])
        runner.commit()
    _drive(runner, state, fan)
    children = fan["children"]
    if any(ch["status"] in ("paused", "waiting") for ch in children) and not fan.get("failed"):
        waiting = [ch["run_id"] for ch in children if ch["status"] in ("paused", "waiting")]
        runner.park("waiting", {"kind": "children", "state": state.id, "children": waiting}, None)
    failed = [ch for ch in children if ch["status"] == "failed"]
    for ch in children:  # the parent takes over the completed side effects of its children
        if ch["status"] in ("succeeded", "cancelled") and ch.get("saga"):
            c["saga"].extend(ch.pop("saga"))
    c["saga"].sort(key=lambda e: e.get("at", 0))
    runner.emit("fanout_finished", state.id, c["attempt"], succeeded=sum(ch["status"] == "succeeded" for ch in children),
                failed=len(failed), cancelled=sum(ch["status"] == "cancelled" for ch in children))
    c["fanout"] = None
    if len(failed) > fan["tolerated"] or fan.get("failed"):
        first = failed[0] if failed else next(ch for ch in children if ch["status"] != "succeeded")
        err = first.get("error") or {}
        raise BranchFailed(f"{len(failed)} of {len(children)} child runs of '{state.id}' failed; child "
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


def _plan(runner, state, visit) -> dict:
    depth = runner.cursor.get("depth", 0) + 1
    limit = state.get("max_depth") or runner.flow.limits.max_depth or DEFAULT_MAX_DEPTH
    if depth > limit:
        raise MaxStepsExceeded(f"'{state.id}' would nest child runs {depth} deep (max_depth {limit})")
    scope = runner.scope()
    where = state.where("input")
    if state.type == "parallel":
        one_input = build(state.input, scope, where) if state.input is not None else dict(scope["input"] or {})
        plans = [(flow, one_input) for flow in state.get("branches")]
        concurrency = state.get("max_concurrency") or len(plans)
        batched = False
    elif state.type == "subflow":
        plans = [(state.get("flow"), build(state.input, scope, where) if state.input is not None else {})]
        concurrency, batched = 1, False
    else:
        items = compile_expr(state.get("items"), state.where("items")).evaluate(scope)
        if not isinstance(items, list):
            from flowctl.errors import ExpressionError

            raise ExpressionError(f"items of '{state.id}' gave {type(items).__name__}, not a list")
        cap = state.get("max_items") or DEFAULT_MAX_ITEMS
        if len(items) > cap:
            raise MaxStepsExceeded(f"map '{state.id}' has {len(items)} items; max_items is {cap} (raise it on the state)")
        mapping = state.get("item_input")
        inputs = [build(mapping, dict(scope, item=item, index=i), state.where("item_input")) if mapping is not None
                  else item for i, item in enumerate(items)]
        batch = (state.get("batch") or {}).get("max_items")
        if batch:
            plans = [(state.get("flow"), {"items": inputs[i:i + batch]}) for i in range(0, len(inputs), batch)]
        else:
            plans = [(state.get("flow"), item_input) for item_input in inputs]
        concurrency = state.get("max_concurrency") or 1
        batched = bool(batch)
    tolerated_spec = state.get("tolerated_failures") or {}
    if "percent" in tolerated_spec:
        tolerated = int(len(plans) * tolerated_spec["percent"] / 100)
    else:
        tolerated = tolerated_spec.get("count", 0)
    children = [{"index": i, "flow": flow, "input": child_input, "run_id": new_run_id(runner.clock),
                 "status": None, "output": None, "error": None} for i, (flow, child_input) in enumerate(plans)]
    return {"state": state.id, "visit": visit, "children": children, "max_concurrency": max(1, concurrency),
            "tolerated": tolerated, "depth": depth, "batched": batched}


def _drive(runner, state, fan) -> None:
    todo = [ch for ch in fan["children"] if ch["status"] not in FINAL]
    if not todo:
        return
    if fan.get("queued") or runner.engine.distribute_children:  # once queued for workers, always
        fan["queued"] = True
        _drive_queued(runner, state, fan)
        return
    stop = threading.Event()
    lock = threading.Lock()
    failures = [sum(ch["status"] == "failed" for ch in fan["children"])]
    engine = runner.engine

    def one(ch):
        if stop.is_set():
            return
        result = _run_child(engine, runner, state, fan, ch, stop)
        with lock:
            _record(runner, state, fan, ch, result)
            if result.status == "failed":
                failures[0] += 1
                if failures[0] > fan["tolerated"]:
                    fan["failed"] = True
                    stop.set()
            runner.commit()

    if fan["max_concurrency"] == 1 or len(todo) == 1:
        for ch in todo:
            one(ch)
    else:
        with ThreadPoolExecutor(max_workers=min(fan["max_concurrency"], len(todo)),
                                thread_name_prefix=f"flowctl-{state.id}") as pool:
            for future in [pool.submit(one, ch) for ch in todo]:
                future.result()
    for ch in fan["children"]:  # children never started because a sibling failed
        if ch["status"] is None:
            ch["status"] = "cancelled"


def waiting_children(runner, pending) -> list:
    """The unfinished children a parent waits on (``pending``: its ``{kind: children, children:
    [ids]}``), as :attr:`RunResult.children`: from what this process drove (a review token it
    issued is only there, never stored), else from the store (no token: ``flowctl reviews
    --reissue CHILD`` makes one)."""
    known = getattr(runner, "child_results", {})
    out = []
    for run_id in pending.get("children") or ():
        r = known.get(run_id)
        if r is not None and r.status == "paused" and not (r.review or {}).get("token"):
            r = None  # resumed here without a decision: the store says what it waits for
        if r is None:
            try:
                row = runner.engine.store.get_run(run_id, exact=True)
            except FlowctlError:
                continue
            wait = (row.get("cursor") or {}).get("pending") or {}
            review = None
            if row["status"] == "paused" and wait.get("kind") == "review":
                review = {k: wait.get(k) for k in ("state", "decisions", "show", "deadline")}
                review["token"] = None
            r = {"run_id": row["id"], "flow": row["flow"], "status": row["status"], "review": review,
                 "available_at": row.get("available_at"),
                 "children": waiting_children(runner, wait) if wait.get("kind") == "children" else []}
        else:
            r = {"run_id": r.run_id, "flow": r.flow, "status": r.status, "review": r.review,
                 "available_at": r.available_at, "children": r.children}
        if r["status"] not in FINAL:
            out.append(r)
    return out


def _record(runner, state, fan, ch, result) -> None:
    """A child ended: keep its outcome (and completed side effects) in the plan; say so in the log."""
    ch["status"], ch["output"], ch["error"] = result.status, result.output, result.error
    if result.status in ("paused", "waiting"):  # its review token, for the parent's result only
        runner.__dict__.setdefault("child_results", {})[ch["run_id"]] = result
    row = None
    if result.status in ("succeeded", "cancelled"):
        row = runner.engine.store.get_run(ch["run_id"])
        ch["saga"] = list((row.get("cursor") or {}).get("saga") or [])
    if runner.secrets is not None:  # what the child knew to be secret, the parent now redacts too
        try:
            row = row or runner.engine.store.get_run(ch["run_id"], exact=True)
        except FlowctlError:
            row = {}  # never created (its input was refused)
        runner.secrets.absorb((row.get("cursor") or {}).get("secrets"))
    runner.emit("child_finished", state.id, None, run_id=ch["run_id"], index=ch["index"], flow=ch["flow"],
                status=result.status, error=result.error)


def _trusted_result(runner_mod, engine, row):
    """A finished child's outcome, once its row is what its last commit sealed: a parent never
    takes a forged output (or status, or error) of a child as its response (RECORD_TAMPERED)."""
    runner_mod._refuse_forged(engine, row)
    return runner_mod.result_from_row(row)


def _drive_queued(runner, state, fan) -> None:
    """Worker mode (see the module docstring): record the children that ended, queue the next ones
    up to ``max_concurrency`` open, and park the parent until a child ends, or return when all did."""
    from flowctl.engine import runner as runner_mod
    from flowctl.workers.worker import enqueue_child

    engine, project = runner.engine, runner.project
    children = fan["children"]
    failures = sum(ch["status"] == "failed" for ch in children)
    open_ids = []
    for ch in children:
        if ch["status"] in FINAL or not ch.get("queued"):
            continue
        row = engine.store.get_run(ch["run_id"], exact=True)
        if row["status"] in FINAL:
            _record(runner, state, fan, ch, _trusted_result(runner_mod, engine, row))
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
            parent = {"id": runner.id, "state": state.id, "index": ch["index"], "depth": fan["depth"],
                      "secrets": runner.secrets and runner.secrets.kept()}
            try:
                enqueue_child(engine, project, project.flows[ch["flow"]], ch["input"], ch["run_id"], parent,
                              queue=runner.row.get("queue"), priority=runner.row.get("priority"))
            except UsageError as exc:  # e.g. the child flow's input_schema refuses the built input
                from flowctl.engine.engine import RunResult

                _record(runner, state, fan, ch, RunResult(ch["run_id"], ch["flow"], "failed", error={
                    "type": "UsageError", "code": exc.code, "message": str(exc), "state": None}))
                failures += 1
                fan["failed"] = fan.get("failed") or failures > fan["tolerated"]
                continue
        else:
            if row["status"] in FINAL:  # and it may have ended since: its wake-up went to a parent still running
                ch["queued"] = True
                _record(runner, state, fan, ch, _trusted_result(runner_mod, engine, row))
                failures += ch["status"] == "failed"
                fan["failed"] = fan.get("failed") or failures > fan["tolerated"]
                continue
        ch["queued"] = True
        open_ids.append(ch["run_id"])
    if open_ids:
        runner.park("waiting", {"kind": "children", "state": state.id, "children": open_ids}, None, keep_due=True)
    for ch in children:  # never queued because too many siblings failed
        if ch["status"] is None:
            ch["status"] = "cancelled"


def _run_child(engine, runner, state, fan, ch, stop):
    from flowctl.engine import runner as runner_mod

    project = runner.project
    try:
        row = engine.store.get_run(ch["run_id"], exact=True)
    except FlowctlError:
        row = None
    try:
        if row is None:
            flow = project.flows[ch["flow"]]
            parent = {"id": runner.id, "state": state.id, "index": ch["index"], "depth": fan["depth"],
                      "secrets": runner.secrets and runner.secrets.kept()}
            return runner_mod.start(engine, project, flow, ch["input"], {}, ch["run_id"], parent=parent, stop=stop)
        if row["status"] in FINAL:
            return _trusted_result(runner_mod, engine, row)
        if row["status"] == "paused":
            return _trusted_result(runner_mod, engine, row)  # waits for its reviewer
        return runner_mod.resume(engine, row, stop=stop, continue_parent=False)
    except UsageError as exc:  # e.g. the child flow's input_schema refuses the built input
        from flowctl.engine.engine import RunResult

        return RunResult(ch["run_id"], ch["flow"], "failed",
                         error={"type": "UsageError", "code": exc.code, "message": str(exc), "state": None})
