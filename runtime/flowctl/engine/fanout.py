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

**The plan in the checkpoint is O(1) per child** (issue 17): ``cursor.fanout`` holds the plan's
size, counters and the children not yet ended, never every child's input or outcome, so a
child's end commits a checkpoint whose size does not grow with the item count. The children's
run ids derive from the plan's seed (:meth:`Children.run_id`); their inputs are planned again
when needed (checked against the plan's digest, kept in memory meanwhile), or frozen in the plan
when the state's expressions call ``now()`` or ``uuid()``. Each child's outcome lives in its own
row: the response is assembled once, at the end, from one batched read of the children's rows,
each verified as :func:`trusted_result` verifies a row (its seal), and their statuses counted
against the parent's counters. A plan written by an engine before this one (``children``: a list
of every child) is converted as it is read (:func:`upgrade`), its recorded outcomes kept.

``response`` is the list of child outputs in branch or item order (a tolerated failed or cancelled
item is ``{"error": {...}}``); for ``subflow`` it is the child's output. A map with a ``batch`` runs one
child per batch with input ``{"items": [item inputs]}`` and flattens the outputs.
"""
from __future__ import annotations

import hashlib
import re
import threading
import uuid
from collections import OrderedDict

from flowctl.engine.context import PARKED, refuse_forged
from flowctl.engine.result import RunResult, result_from_row
from flowctl.errors import BranchFailed, FlowctlError, MaxStepsExceeded, RecordTampered, UsageError
from flowctl.store.audit import canonical, verify_run
from flowctl.store.sql import FINAL

DEFAULT_MAX_DEPTH = 10
#: the statuses a child ends with, counted in the plan's ``ended``
ENDED = ("succeeded", "failed", "cancelled")
#: expressions that give another value each time: a plan using them is frozen, not planned again
_IMPURE = re.compile(r"\b(now|uuid)\s*\(")
#: plans planned again recently, ``{(run id, state, visit, digest): [(flow, input)]}`` (a worker
#: continues the same parent once per child that ends: it plans once, not once per child)
_RECENT: OrderedDict = OrderedDict()
_RECENT_MAX = 8
_RECENT_LOCK = threading.Lock()
#: children handed out ahead of the plan's last commit: a child at or past the committed
#: ``reserved`` was never started, so it starts without first looking for its row
RESERVE = 64
#: a parent commits its plan once this many children ended since its last commit, or this many
#: seconds passed (and when it parks or goes on): a child's outcome is in its own row, so a crash
#: between loses nothing (the resumed parent reads the ended children back; none runs again)
RECORD_EVERY = 32
RECORD_EVERY_S = 0.5


def run_children(ctx, state, planner):
    """Run the children of ``state`` (planned by ``planner(ctx, state) -> (plans, concurrency,
    batched)``, ``plans`` a list of ``(flow id, input)``); return the response, or ``PARKED`` while
    a child waits or pauses. Raises :class:`BranchFailed` when more failed than tolerated,
    :class:`RecordTampered` when a child's row is not what it sealed or is missing."""
    c = ctx.cursor
    visit = c.visits.get(state.id, 1)
    fan = c.fanout
    plans = None
    if not fan or fan.get("state") != state.id or fan.get("visit") != visit:
        fan, plans = plan(ctx, state, visit, planner)
        c.fanout = fan
        children = Children(ctx, state, fan, planner, plans)
        shown = [{"index": i, "flow": plans[i][0], "run_id": children.run_id(i)} for i in range(min(50, len(plans)))]
        ctx.emit("fanout_started", state.id, c.attempt, kind=state.type, count=len(plans),
                 children=shown, max_concurrency=fan["max_concurrency"])
        ctx.commit()
    else:
        if "children" in fan:  # a plan written by an engine before issue 17
            fan = c.fanout = upgrade(fan)
        children = Children(ctx, state, fan, planner)
    if _drive(ctx, state, fan, children) is PARKED:
        return PARKED
    if fan["open"] and not fan.get("failed"):
        return ctx.park("waiting", {"kind": "children", "state": state.id, "children": open_ids(fan)}, None)
    ended = outcomes(ctx, state, fan, children)
    failed = failed_branches({"failed": fan.get("failed"), "children": ended})
    for ch in ended:  # the parent takes over the completed side effects of its children
        if ch["status"] in ("succeeded", "cancelled") and ch.get("saga"):
            c.saga.extend(ch["saga"])
    c.saga.sort(key=lambda e: e.get("at", 0))
    ctx.emit("fanout_finished", state.id, c.attempt, succeeded=sum(ch["status"] == "succeeded" for ch in ended),
             failed=len(failed), cancelled=sum(ch["status"] == "cancelled" for ch in ended))
    c.fanout = None
    if len(failed) > fan["tolerated"] or fan.get("failed"):
        first = failed[0] if failed else next(ch for ch in ended if ch["status"] != "succeeded")
        err = first.get("error") or {}
        how = "failed" if all(ch["status"] == "failed" for ch in failed) else "failed or were cancelled"
        raise BranchFailed(f"{len(failed)} of {len(ended)} child runs of '{state.id}' {how}; child "
                           f"{first['run_id']} ({first['flow']}#{first['index']}): {err.get('type')}: {err.get('message')}")
    outputs = [ch["output"] if ch["status"] == "succeeded" else {"error": ch.get("error")} for ch in ended]
    if state.type == "subflow":
        return outputs[0]
    if fan.get("batched"):
        flat = []
        for out in outputs:
            flat.extend(out if isinstance(out, list) else [out])
        return flat
    return outputs


def failed_branches(fan) -> list:
    """The children of ``fan`` (``{failed?, children: [{status, ...}]}``: the outcomes
    :func:`outcomes` assembled, or a plan before issue 17) that count as failed branches
    (``[child dict]``, plan order): each ``failed`` one, and each ``cancelled`` one unless too
    many had failed already.

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


def plan(ctx, state, visit, planner) -> tuple:
    """``(fan, plans)``: the fan-out plan kept in ``cursor.fanout`` and the children it plans
    (``[(flow id, input)]``). The plan: ``{state, visit, count, max_concurrency, tolerated, depth,
    batched, ids: {ms, nonce}, digest | inputs, next, reserved, open: {index: run id}, ended:
    {succeeded, failed, cancelled}, kept: {index: outcome}}`` (``queued`` and ``failed`` once set).
    ``next``: children ``0..next-1`` were handed to the launcher (each ended or in ``open``);
    ``reserved``: no child from this index on was ever started (:data:`RESERVE`); ``kept``: the
    outcomes that have no row of their own (a child its flow refused to start). Raises
    :class:`MaxStepsExceeded` past ``max_depth``."""
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
    fan = {"state": state.id, "visit": visit, "count": len(plans), "max_concurrency": max(1, concurrency),
           "tolerated": tolerated, "depth": depth, "batched": batched,
           "ids": {"ms": int(ctx.clock.time() * 1000), "nonce": uuid.uuid4().hex[:16]},
           "next": 0, "reserved": 0, "open": {}, "ended": dict.fromkeys(ENDED, 0), "kept": {}}
    if replannable(state):
        fan["digest"] = plan_digest(ctx, plans)
        _remember((ctx.id, state.id, visit, fan["digest"]), plans)
    else:
        fan["inputs"] = [[flow, child_input] for flow, child_input in plans]
    return fan, plans


def replannable(state) -> bool:
    """True when planning ``state`` again on the same run gives the same children: its
    expressions (``items``, ``item_input``, ``input``) call neither ``now()`` nor ``uuid()``."""
    texts = [getattr(state, name, None) for name in ("items", "item_input", "input")]
    return not _IMPURE.search(canonical(texts))


def plan_digest(ctx, plans) -> str:
    """sha256 hex of the planned children (``[(flow, input)]``, canonical JSON); keyed by the
    store's key for a sensitive run (the digest outlives nothing, but stays no hash of a secret)."""
    text = canonical([[flow, child_input] for flow, child_input in plans])
    ring = getattr(ctx.secrets, "keyring", None) if ctx.secrets is not None else None
    if ring is not None:
        return ring.digest(text)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _remember(key, plans) -> None:
    with _RECENT_LOCK:
        _RECENT[key] = plans
        _RECENT.move_to_end(key)
        while len(_RECENT) > _RECENT_MAX:
            _RECENT.popitem(last=False)


class Children:
    """The children of the plan ``fan`` of ``state`` in run ``ctx``: :meth:`run_id` and
    :meth:`plan` by index (0-based, plan order). Inputs are planned again (once, and only when a
    child is to start) unless the plan froze them; planned again, they must match the plan's
    digest (else :class:`RecordTampered`)."""

    def __init__(self, ctx, state, fan, planner, plans=None):
        self.ctx, self.state, self.fan, self.planner = ctx, state, fan, planner
        self._plans = plans
        self._lock = threading.Lock()
        #: children from this index on were never started (the plan's ``reserved`` as committed)
        self.unstarted_from = fan.get("reserved", fan["count"])

    def fresh(self, index: int) -> bool:
        """True if child ``index`` was never started: it has no row to look for."""
        return index >= self.unstarted_from

    def reserve(self, index: int) -> None:
        """Before child ``index`` starts: commit the plan's ``reserved`` past it (every
        :data:`RESERVE` children), so a run resumed after a crash knows to look for its row."""
        fan = self.fan
        if "reserved" in fan and index >= fan["reserved"]:
            fan["reserved"] = min(fan["count"], index + RESERVE)
            self.ctx.commit()

    def run_id(self, index: int) -> str:
        """Child ``index``'s run id: 12 hex digits of the plan's milliseconds, then 12 of
        ``sha256(nonce:index)`` (ids in the form :func:`~flowctl.engine.result.new_run_id` makes)."""
        return child_id(self.fan, index)

    def plan(self, index: int) -> tuple:
        """``(flow id, input)`` of child ``index``."""
        inputs = self.fan.get("inputs")
        if inputs is not None:
            flow, child_input = inputs[index]
            return flow, child_input
        with self._lock:
            if self._plans is None:
                self._plans = self._replan()
        return self._plans[index]

    def _replan(self) -> list:
        fan, ctx = self.fan, self.ctx
        key = (ctx.id, fan["state"], fan["visit"], fan.get("digest"))
        with _RECENT_LOCK:
            found = _RECENT.get(key)
        if found is not None:
            return found
        plans = self.planner(ctx, self.state)[0]
        if len(plans) != fan["count"] or plan_digest(ctx, plans) != fan.get("digest"):
            raise RecordTampered(f"run {ctx.id}: the children of '{fan['state']}' planned again are not those its "
                                 "checkpoint started; it is not continued",
                                 hint=f"flowctl audit verify {ctx.id} says what differs; restore the store from a backup")
        _remember(key, plans)
        return plans


def child_id(fan, index: int) -> str:
    """The run id of child ``index`` of plan ``fan`` (see :meth:`Children.run_id`)."""
    listed = fan.get("run_ids")
    if listed is not None:  # a plan before issue 17 listed them
        return listed[index]
    ids = fan["ids"]
    tail = hashlib.sha256(f"{ids['nonce']}:{index}".encode()).hexdigest()[:12]
    return f"{ids['ms']:012x}{tail}"


def open_ids(fan) -> list:
    """Run ids of the plan's children handed out and not ended, in plan order."""
    return [fan["open"][k] for k in sorted(fan["open"], key=int)]


def take_next(fan) -> int | None:
    """The index of the next child to hand out (then in ``open`` once the caller starts or queues
    it), or None: all handed out, or too many failed."""
    if fan.get("failed"):
        return None
    backlog = fan.get("backlog")
    if backlog:
        return backlog.pop(0)
    if fan["next"] < fan["count"]:
        fan["next"] += 1
        return fan["next"] - 1
    return None


def left_to_start(fan) -> int:
    """How many children :func:`take_next` would still hand out."""
    if fan.get("failed"):
        return 0
    return len(fan.get("backlog") or ()) + fan["count"] - fan["next"]


def _drive(ctx, state, fan, children):
    """Hand the unfinished children to the launcher: a plan queued for workers stays queued. A
    plan that failed (before, or while the launcher drove it) first takes in the children a dead
    process may have started unrecorded (:func:`started_unrecorded`)."""
    while True:
        if fan.get("failed") and fan["next"] < children.unstarted_from:
            started_unrecorded(ctx, fan, children)
        if not fan["open"] and not left_to_start(fan):
            return None
        launcher = ctx.engine.queue_launcher if fan.get("queued") else ctx.engine.launcher
        if launcher.queued:
            fan["queued"] = True
        out = launcher.drive(ctx, state, fan, children)
        if out is not None or not fan.get("failed") or fan["next"] >= children.unstarted_from:
            return out


def started_unrecorded(ctx, fan, children) -> None:
    """A plan that failed hands out no more children; but children from ``next`` up to
    ``reserved`` may have been started by a process that died before its next checkpoint. Each
    of them that has a row is put in ``open`` (``next`` moves past them all), so the launcher
    continues or records it as any open child: none is left running unseen, or counted among the
    children's rows but not by the plan (breaker finding: a fan-out killed while it failed was then
    refused as tampered, its children's effects never undone)."""
    for index in range(fan["next"], children.unstarted_from):
        try:
            ctx.store.get_run(children.run_id(index), exact=True)
        except FlowctlError:
            continue  # never started
        fan["open"][str(index)] = children.run_id(index)
    fan["next"] = max(fan["next"], children.unstarted_from)


def child_parent(ctx, state, fan, index: int) -> dict:
    """The ``parent`` of child ``index`` as a run start takes it: ``{id, state, index, depth, secrets}``."""
    return {"id": ctx.id, "state": state.id, "index": index, "depth": fan["depth"],
            "secrets": ctx.secrets and ctx.secrets.kept()}


def refused_child(flow: str, run_id: str, exc: UsageError) -> RunResult:
    """The outcome of a child its flow refused to start (e.g. its input_schema refuses the built input)."""
    return RunResult(run_id, flow, "failed",
                     error={"type": UsageError.__name__, "code": exc.code, "message": str(exc), "state": None})


def record(ctx, state, fan, index: int, result, *, keep: bool = False) -> None:
    """Child ``index`` ended (or paused, or waits): count it in the plan (``keep``: and keep its
    outcome there, a child without a row of its own); say so in the log. O(1) in the plan's size."""
    key, status = str(index), result.status
    if status in ENDED:
        fan["open"].pop(key, None)
        fan["ended"][status] = fan["ended"].get(status, 0) + 1
        if keep:
            fan["kept"][key] = {"flow": result.flow, "status": status, "output": result.output, "error": result.error}
    else:
        fan["open"][key] = result.run_id
        if status in ("paused", "waiting"):  # its review token, for the parent's result only
            ctx.child_results[result.run_id] = result
    if ctx.secrets is not None:  # what the child knew to be secret, the parent now redacts too
        try:
            row = ctx.store.get_run(result.run_id, exact=True)
        except FlowctlError:
            row = {}  # never created (its input was refused)
        ctx.secrets.absorb((row.get("cursor") or {}).get("secrets"))
    ctx.emit("child_finished", state.id, None, run_id=result.run_id, index=index, flow=result.flow,
             status=status, error=result.error)


def outcomes(ctx, state, fan, children) -> list:
    """Every child's outcome, in plan order: ``[{index, flow, run_id, status, output, error,
    saga}]``, read in one batched query of the parent's child rows, each checked as
    :func:`trusted_result` checks one; a kept outcome as the plan holds it; a child never started
    (too many failed first) ``cancelled``. Raises :class:`RecordTampered` for a row that is not
    what it sealed, a child handed out whose row is missing, or statuses that disagree with the
    plan's counts."""
    n = fan["count"]
    index_of = {child_id(fan, i): i for i in range(n)}
    found: list = [None] * n
    for row in ctx.store.list_runs(parent_id=ctx.id, limit=0):
        i = index_of.get(row["id"])
        if i is None:
            continue  # a child of another fan-out of this run
        result = trusted_result(ctx.engine, row)
        saga = (row.get("cursor") or {}).get("saga") if result.status in ("succeeded", "cancelled") else None
        found[i] = {"index": i, "flow": row["flow"], "run_id": row["id"], "status": result.status,
                    "output": result.output, "error": result.error, "saga": list(saga or ())}
    for key, kept in fan["kept"].items():
        i = int(key)
        found[i] = {"index": i, "run_id": child_id(fan, i), "saga": [], **kept}
    counts = dict.fromkeys(ENDED, 0)
    for i, ch in enumerate(found):
        if ch is None:
            if not fan.get("failed"):
                raise RecordTampered(f"run {ctx.id}: child run {child_id(fan, i)} of '{state.id}' is missing from the "
                                     "store; its parent does not take a response without it",
                                     hint="restore the store from a backup")
            found[i] = ch = {"index": i, "flow": children.plan(i)[0], "run_id": child_id(fan, i),
                             "status": "cancelled", "output": None, "error": None, "saga": []}
            continue  # never started
        if str(i) not in fan["open"] and ch["status"] in counts:
            counts[ch["status"]] += 1
    recorded = {k: fan["ended"].get(k, 0) for k in ENDED}
    if counts != recorded:
        raise RecordTampered(f"run {ctx.id}: the child runs of '{state.id}' say {counts}, its checkpoint recorded "
                             f"{recorded}; its parent does not take their outcome",
                             hint=f"flowctl audit verify {ctx.id} and its child runs say what differs; "
                                  "restore the store from a backup")
    return found


def upgrade(fan) -> dict:
    """A plan written before issue 17 (``children: [{index, flow, input, run_id, status, output,
    error, saga?, queued?}]``) in this engine's form: its run ids and inputs listed, the outcomes it
    recorded kept (the parent's sealed checkpoint vouched for them), the children paused, waiting
    or queued ``open``, the others to start (``backlog``: a started one is found by its id)."""
    children = fan["children"]
    out = {k: fan[k] for k in ("state", "visit", "max_concurrency", "tolerated", "depth", "batched") if k in fan}
    out.update({k: fan[k] for k in ("queued", "failed") if k in fan})
    out.update(count=len(children), reserved=len(children), run_ids=[ch["run_id"] for ch in children],
               inputs=[[ch["flow"], ch.get("input")] for ch in children], next=len(children), backlog=[],
               open={}, ended=dict.fromkeys(ENDED, 0), kept={})
    for i, ch in enumerate(children):
        status = ch.get("status")
        if status in ENDED:
            out["kept"][str(i)] = {"flow": ch["flow"], "status": status, "output": ch.get("output"),
                                   "error": ch.get("error"), "saga": list(ch.get("saga") or ())}
            out["ended"][status] += 1
        elif status is not None or ch.get("queued"):
            out["open"][str(i)] = ch["run_id"]
        else:
            out["backlog"].append(i)
    return out


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


__all__ = ["run_children", "failed_branches", "plan", "record", "trusted_result", "child_parent", "refused_child",
           "Children", "child_id", "open_ids", "take_next", "left_to_start", "outcomes", "upgrade", "replannable",
           "plan_digest", "DEFAULT_MAX_DEPTH", "ENDED"]
