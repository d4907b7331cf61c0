"""A run's life from outside the step loop: start (or queue), resume, recover, remind, reissue.

:func:`start` creates the run row (its definition snapshot saved, input checked, first events
sealed) and drives it; :func:`create` with ``queued`` writes it ``queued`` for workers instead and
returns without driving. :func:`resume` continues a paused (for review, or by an operator:
:mod:`flowctl.engine.pause`), waiting or orphaned run;
:func:`recover` every one that is due. Cancelling: :mod:`flowctl.engine.cancel`; a run whose
``cancel_requested`` its worker never carried out (it died first) is cancelled as asked by whichever
resume or recover takes it over, as by a worker that claims it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

from flowctl.definition.kinds import did_you_mean
from flowctl.definition.runtime_schemas import check_instance
from flowctl.engine import cancel as cancelling
from flowctl.engine import adhoc, pause, sensitive
from flowctl.engine.adhoc import flow_of, is_session
from flowctl.engine.cursor import Cursor
from flowctl.engine.context import RunContext, live_owner, owner_hint, seal_row, trusted_project
from flowctl.engine.loop import Runner
from flowctl.engine.payload import MAX_PAYLOAD, not_json
from flowctl.engine.result import RunResult, new_run_id, result_from_row
from flowctl.engine.states import review
from flowctl.errors import DecisionInvalid, FlowctlError, RunConflict, RunInUse, UsageError
from flowctl.store.audit import canonical, row_identity, seal_commit
from flowctl.store.sql import FINAL, RUN_ID_CHARS


@dataclass(frozen=True)
class Queued:
    """How :func:`create` writes a run for workers: its ``queue``, ``priority`` and ``delay``
    (seconds from now, database clock; None: due now)."""

    queue: str = "default"
    priority: int = 0
    delay: float | None = None


def start(engine, project, flow, run_input, params, run_id=None, *, parent: dict | None = None,
          stop=None) -> RunResult:
    """Create a run and drive it. ``parent`` (``{id, state, index, depth, secrets}``) makes it a
    child run of a parallel/map/subflow state; ``stop`` (a ``threading.Event``) cancels it between
    steps. Raises :class:`UsageError` for a bad run id, input or param."""
    return create(engine, project, flow, run_input, params, run_id, parent=parent, stop=stop).drive()


def create(engine, project, flow, run_input, params, run_id=None, *, parent: dict | None = None, stop=None,
           queued: Queued | None = None) -> Runner:
    """Check and write a new run (status ``running``, or ``queued`` as ``queued`` says, then owned by
    no process) with its ``run_started`` event; the :class:`Runner` that drives it."""
    _check_start(flow, run_id, run_input, params)
    if queued is not None:  # nothing of a queued run is shown live: the worker that claims it drives it
        engine = copy.copy(engine)
        engine.listener = None
    merged = dict(flow.params)
    merged.update(params)
    now = engine.clock.time()
    digest = project.digest()
    engine.store.save_definition(digest, dict(project.snapshot))
    run_id = run_id or new_run_id(engine.clock)
    cursor = Cursor(state=flow.start, depth=(parent or {}).get("depth", 0),
                    parent={k: parent[k] for k in ("state", "index")} if parent else None)
    row = {"id": run_id, "flow": flow.id, "flow_version": str(flow.version), "digest": digest,
           "parent_id": parent["id"] if parent else None,
           "status": "running", "input": run_input, "params": merged, "output": None, "error": None,
           "cursor": cursor.to_json(), "created_at": now, "updated_at": now, "available_at": None,
           "owner": engine.owner, "last_seq": 0, "last_hash": "", "steps": 0}
    runner = Runner(engine, project, flow, row, stop=stop, inherited=(parent or {}).get("secrets"))
    runner.emit("run_started", flow=flow.id, flow_version=flow.version, digest=digest, input=run_input,
                params=merged, git_commit=_project_commit(project), owner=engine.owner,
                parent=cursor.parent and dict(cursor.parent, run_id=row["parent_id"]))
    first = runner.take_events()
    row["last_seq"] = first[-1]["seq"]
    row["last_hash"] = "" if runner.lazy else seal_commit(first, "")
    if queued is not None:
        row.update(status="queued", owner=None, queue=queued.queue, priority=int(queued.priority))
        if queued.delay:
            row["available_at"] = engine.store.now_expr + float(queued.delay)
    stored = row if runner.secrets is None else sensitive.new_row(runner, row)
    if not runner.lazy:
        seal_row(run_id, stored, row["last_seq"], row["last_hash"], row["status"], None, row_identity(stored))
    engine.store.create_run(stored, first)
    row.pop("cursor_json", None)
    runner.last_seq, runner.last_hash = row["last_seq"], row["last_hash"]
    return runner


def _check_start(flow, run_id, run_input, params) -> None:
    if run_id is not None and not (isinstance(run_id, str) and 0 < len(run_id) <= 40 and set(run_id) <= RUN_ID_CHARS):
        raise UsageError(f"run id {str(run_id)[:50]!r} cannot be used",
                         hint="1 to 40 letters, digits, '.', '_' or '-' (or leave it out: flowctl makes one)")
    for what, value in (("run input", run_input), ("params", params)):
        bad = not_json(value)  # NaN, an infinity, a lone surrogate: what JSON stored as UTF-8 cannot hold
        if bad is not None:
            pointer = bad[0] if len(bad[0]) <= 80 else f"{bad[0][:40]}/…{bad[0][-30:]}"  # (one nested 100 deep)
            at = f" at {pointer}" if pointer else ""
            raise UsageError(f"{what}{at}: {bad[1]}", hint="pass JSON values only: numbers, text, true/false, null, "
                             "lists and objects", field="input" if what == "run input" else "params")
    size = len(canonical(run_input).encode())
    if size > MAX_PAYLOAD:
        raise UsageError(f"run input is {size} bytes; the limit is {MAX_PAYLOAD}", hint="pass a reference, not the data",
                         field="input")
    if flow.input_schema:
        problem = check_instance(flow.input_schema, run_input)
        if problem:
            raise UsageError(f"input does not match the input_schema of flow '{flow.id}': {problem}",
                             hint=f"the flow's input_schema is at {flow.where('input_schema')}", field="input")
    unknown = sorted(set(params) - set(flow.params))
    if unknown:
        declared = ", ".join(sorted(flow.params)) or "none"
        raise UsageError(f"flow '{flow.id}' has no param {', '.join(repr(u) for u in unknown)}",
                         hint=did_you_mean(unknown[0], flow.params) or f"declared params: {declared} ({flow.where('flow')})",
                         field="params")


def resume(engine, row, *, token=None, decision=None, data=None, by=None, stop=None,
           continue_parent: bool = True, claimed: bool = False) -> RunResult:
    """Continue a run (see Engine.resume). A child run that ends here continues its parent, unless
    the parent itself is driving it (``continue_parent=False``). ``claimed``: a worker's claim
    (:meth:`flowctl.store.sql.SqlStore.claim`) already made the row ``running`` for ``engine.owner``
    under a lease and cleared its due time; the ``run_resumed`` of a due or orphaned run is then
    committed with the run's first step instead of alone (one commit fewer)."""
    result = _resume(engine, row, token=token, decision=decision, data=data, by=by, stop=stop, claimed=claimed)
    if continue_parent and row.get("parent_id") and result.status in FINAL:
        try:
            parent = engine.store.get_run(row["parent_id"])
            queued = ((parent.get("cursor") or {}).get("fanout") or {}).get("queued")
            if engine.launcher.queued or queued:
                pass  # queued for workers: the child's final commit made the parent due (SqlStore.commit)
            elif parent["status"] == "waiting" and ((parent.get("cursor") or {}).get("pending") or {}).get("kind") == "children":
                resume(engine, parent)
        except FlowctlError:
            pass  # the parent continues on its next resume or recover (or a worker's next claim)
    return result


def _resume(engine, row, *, token=None, decision=None, data=None, by=None, stop=None,
            claimed: bool = False) -> RunResult:
    if row["status"] in FINAL:
        if token is not None:
            raise UsageError(f"run {row['id']} has already ended ({row['status']}); the token cannot be used",
                             hint="a review token works once, while its run is paused")
        return result_from_row(row)
    status = row["status"]
    if token is not None and status != "paused":  # a token decides a paused review, and only that
        raise UsageError(f"run {row['id']} is not paused for review (it is {status}); the token cannot be used",
                         hint=f"continue it without a token: flowctl resume {row['id']} (or flowctl recover)")
    project = trusted_project(engine, row)  # a forged row is refused before anything else is said of it
    if status == "running":
        # a worker's lease, not a process id, says who holds a leased run (the store refuses a live one)
        holder = None if row.get("lease_until") else live_owner(row.get("owner"), engine.owner)
        if holder:
            raise RunInUse(f"run {row['id']} is being executed by {holder}",
                             hint=owner_hint(row["owner"], "wait for it, or stop that process"))
    if row.get("cancel_requested"):
        return _requested_cancel(engine, row)
    if is_session(row["flow"]):  # no states to drive: only the server acts in it (flowctl.engine.adhoc)
        if status == "paused" and token is not None:  # a gate review of one of its calls: decided, not driven
            return adhoc.decide(RunContext(engine, project, flow_of(project, row), row), token, decision, data, by)
        raise UsageError(f"run {row['id']} is a flowctl serve session; it is not resumed",
                         hint=f"invoke its tools through the server, or end it: flowctl cancel {row['id']}")
    flow = project.flows[row["flow"]]
    runner = Runner(engine, project, flow, row, stop=stop)
    operator = pause.is_paused_by_operator(row)
    if status == "running":
        runner.emit("run_resumed", reason="orphaned", previous_owner=row.get("owner"), owner=engine.owner)
    elif operator:
        if token is not None:
            raise UsageError(f"run {row['id']} was paused by an operator, not for review; the token cannot be used",
                             hint=f"continue it without a token: flowctl resume {row['id']}")
        pause.continue_paused(runner, by=by)
    elif status == "paused":
        pending = runner.cursor.pending or {}
        if token is None and not runner.review_expired():
            raise UsageError(f"run {row['id']} is paused for review at '{pending.get('state')}'",
                             hint=f"flowctl resume {row['id']} --token TOKEN --decision {'|'.join(pending.get('decisions', []))}")
        if token is not None:
            review.decide(runner, token, decision, data, by)
    elif status == "waiting":
        # a parent waiting on its children re-checks them whenever it is resumed (a child's end makes it due)
        children = (runner.cursor.pending or {}).get("kind") == "children"
        due = 0 if children else row.get("available_at") or 0
        delay = due - engine.clock.time()
        if delay > engine.max_inline_wait:
            return result_from_row(row)
        if delay > 0:
            engine.clock.sleep(delay)
        runner.emit("run_resumed", reason="due", owner=engine.owner)
    if claimed and status in ("running", "waiting"):  # the claim wrote these: run_resumed goes with the first step
        runner.defer(status="running", owner=engine.owner, available_at=None)
    elif operator:  # an operator's pause ends: a request that came in meanwhile is dropped
        runner.commit(status="running", owner=engine.owner, available_at=None, pause_requested=None)
    else:
        runner.commit(status="running", owner=engine.owner, available_at=None)
    return runner.drive()


def _requested_cancel(engine, row) -> RunResult:
    """Take over a run whose ``cancel_requested`` (``{by, compensate, at}``) its worker recorded but
    never carried out (it died or was cut off first): cancel it as asked, compensating unless told
    not to, as a worker that claims it would. Raises :class:`RunConflict` when another command
    committed first (nothing is undone then)."""
    request = row["cancel_requested"]
    return cancelling.cancel(engine, row, compensate=request.get("compensate", True), by=request.get("by"),
                             holder=True)


def recover(engine) -> list:
    """Continue every due run (see Engine.recover); a refused one is a result with ``error.refused``."""
    results = []
    now = engine.clock.time()
    candidates = []
    for status in ("running", "waiting", "paused"):
        candidates.extend(engine.store.list_runs(status=status, limit=0))
    for row in sorted(candidates, key=lambda r: r["created_at"]):
        if is_session(row["flow"]) and not row.get("cancel_requested"):  # the server acts in it, no one else
            continue
        if row["status"] == "running" and ((row.get("lease_until") or 0) > now  # a worker holds it
                                           or live_owner(row.get("owner"), engine.owner)):
            continue
        if row.get("cancel_requested"):  # a cancel its worker recorded but did not carry out: due now
            pass
        elif row["status"] == "waiting" and (row.get("available_at") or 0) > now + engine.max_inline_wait:
            continue
        elif row["status"] == "paused":
            pending = (row.get("cursor") or {}).get("pending") or {}
            deadline = pending.get("deadline")
            if deadline is None or deadline > now:
                if pending.get("remind_at") and pending["remind_at"] <= now and not pending.get("reminded"):
                    try:
                        remind(engine, row)
                    except FlowctlError:
                        pass
                continue
        if len(candidates) > 1 and _moved_on(engine, row):  # an earlier run here continued it (its parent)
            continue
        try:
            results.append(resume(engine, row))
        except (RunInUse, RunConflict):  # another process took it meanwhile (a worker, another recover): its now
            continue
        except FlowctlError as exc:
            results.append(RunResult(row["id"], row["flow"], row["status"],  # refused: not continued
                                     error={"type": type(exc).__name__, "code": exc.code, "message": str(exc),
                                            "refused": True}))
    return results


def _moved_on(engine, row) -> bool:
    """True if ``row`` changed since it was listed: continuing a parent continues its unfinished
    children (and a child that ends continues its parent), so a later row of the same listing may
    already be done; continuing it from the stale copy would be refused as a conflict."""
    try:
        now = engine.store.get_run(row["id"])
    except FlowctlError:
        return True
    return now.get("last_seq") != row.get("last_seq") or now["status"] != row["status"]


def fire_due_reviews(engine) -> list:
    """Review timeouts and reminders that came due while no process ran (``flowctl run`` calls
    this first, as do ``recover`` and workers)."""
    now = engine.clock.time()
    results = []
    for row in engine.store.list_runs(status="paused", limit=0, due_by=now):  # only due ones: an index range
        pending = (row.get("cursor") or {}).get("pending") or {}
        if pending.get("deadline") is not None and pending["deadline"] <= now:
            try:
                results.append(resume(engine, row))
            except FlowctlError:
                pass
        elif pending.get("remind_at") and pending["remind_at"] <= now and not pending.get("reminded"):
            try:
                remind(engine, row)
            except FlowctlError:
                pass
    return results


def context_of(engine, row) -> RunContext:
    """A :class:`RunContext` on a stored run (trusted first), to record on it without driving it."""
    project = trusted_project(engine, row)
    return RunContext(engine, project, flow_of(project, row), row)


def remind(engine, row) -> None:
    """``remind_after`` passed with no decision: notify again with a new token (:func:`review.remind`)."""
    review.remind(context_of(engine, row))


def check_decision(engine, row, decision, data):
    """What deciding the run's pending review with ``decision`` and ``data`` would record as its
    data (:func:`review.check_data`), checked against the run's pinned definition without recording
    anything (a decision without a token checks first, before a token is issued for it). Raises
    :class:`UsageError` when no review is pending or the decision is not offered,
    :class:`ReviewDataInvalid` for data the review's ``data_schema`` rejects."""
    pending = (row.get("cursor") or {}).get("pending") or {}
    if row["status"] != "paused" or pending.get("kind") != "review":
        raise UsageError(f"run {row['id']} is not paused for review (it is {row['status']})")
    if decision not in (pending.get("decisions") or ()):
        raise DecisionInvalid(f"decision '{decision}' is not one of {', '.join(pending.get('decisions') or ())}")
    return review.check_data(trusted_project(engine, row).states.get(pending.get("state") or ""), data)


def reissue_token(engine, row, by=None) -> str:
    """A new one-time token for a run paused for review; the old token stops working."""
    if row["status"] != "paused" or ((row.get("cursor") or {}).get("pending") or {}).get("kind") != "review":
        raise UsageError(f"run {row['id']} is not paused for review (it is {row['status']})")
    return review.reissue(context_of(engine, row), by=by)


def _project_commit(project):
    """The git commit of ``project``'s checkout (None outside git), read once per loaded project:
    its files were read once too, so the runs it starts later (a map's thousands of children, a
    worker's runs) ran the files of that commit, not of one checked out since."""
    key = ("git", "commit")
    found = project._resolved.get(key, key)
    if found is key:
        found = project._resolved[key] = _git_commit(project.root)
    return found


def _git_commit(root):
    head = root / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            target = root / ".git" / ref[5:]
            if target.exists():
                return target.read_text().strip()
            packed = root / ".git" / "packed-refs"
            for line in packed.read_text().splitlines() if packed.exists() else ():
                if line.endswith(" " + ref[5:]):
                    return line.split()[0]
            return None
        return ref
    except OSError:
        return None


__all__ = ["start", "create", "Queued", "resume", "recover", "fire_due_reviews", "remind", "check_decision",
           "reissue_token", "context_of"]
