"""Driving one run: the step loop, transitions, error layers, parking and resuming.

A :class:`Runner` holds one run's checkpoint (``cursor``) and buffers its audit events until the
next commit. The cursor (JSON, stored on the run row) is::

    {state, entered, step, attempt, visits, path, context, response, error, review,
     saga: [{state, step, tool, input, output, idempotency_key, at}],   # completed side effects
     residue: [{state, tool, error}],                                    # compensations that failed
     inflight: {step, attempt, state, tool, input, idempotency_key} | None,
     pending: {kind: retry|wait|review, ...} | None,
     secrets: {fields, values},     # a sensitive run only (flowctl.engine.sensitive): the row is sealed then
     after_compensation: {goto|fail|fallback|...} | None,
     state_info: {id, entered_at, attempt}, done}

Task execution lives in :mod:`flowctl.engine.states.task`, compensation in :mod:`flowctl.engine.saga`.
"""
from __future__ import annotations

import copy
import hashlib
import hmac
import os
import secrets

from flowctl.engine import saga
from flowctl.engine import sensitive
from flowctl.engine.states import task
from flowctl.store.audit import canonical, encode_data, row_identity, run_seal, seal, seal_problem
from flowctl.engine.clock import iso
from flowctl.definition.durations import parse_duration
from flowctl.engine.engine import RunResult, new_run_id
from flowctl.errors import (FlowctlError, MaxStepsExceeded, NoTransitionMatched, PayloadTooLarge, RecordTampered,
                     ReviewTimeout, RunTimeout, StepError, UsageError, error_names)
from flowctl.expr.expressions import RECORDER, Recorder, compile_expr
from flowctl.engine.payload import FIT_STRING, MAX_PAYLOAD, fits
from flowctl.gate.policy import Gate
from flowctl.definition.runtime_schemas import check_instance
from flowctl.expr.scope import apply_set, build, compile_set
from flowctl.store.sql import FINAL, RUN_ID_CHARS

#: Review tokens: after TOKEN_ATTEMPTS wrong tokens within TOKEN_WINDOW seconds a run refuses every
#: token (the right one too) until the oldest of them leaves the window; a reissued token resets it.
TOKEN_ATTEMPTS = 5
TOKEN_WINDOW = 900.0

# States of the path kept in the checkpoint. The checkpoint is re-encoded and rewritten on every step,
# so a longer tail makes each durable step of a long run slower; the audit log keeps all of them.
PATH_KEPT = 32
LIMIT_ERRORS = (MaxStepsExceeded, RunTimeout)


class Park(Exception):
    """The run stopped here on purpose (waiting, paused); the checkpoint is committed."""


def start(engine, project, flow, run_input, params, run_id=None, *, parent: dict | None = None,
          stop=None) -> RunResult:
    """Create a run and drive it. ``parent`` (``{id, state, index, depth}``) makes it a child run of
    a parallel/map/subflow state; ``stop`` (a ``threading.Event``) cancels it between steps."""
    if run_id is not None and not (isinstance(run_id, str) and 0 < len(run_id) <= 40 and set(run_id) <= RUN_ID_CHARS):
        raise UsageError(f"run id {str(run_id)[:50]!r} cannot be used",
                         hint="1 to 40 letters, digits, '.', '_' or '-' (or leave it out: flowctl makes one)")
    try:
        size = len(canonical(run_input).encode())
    except UnicodeEncodeError as exc:
        raise UsageError(f"run input holds text that is not valid Unicode ({exc.reason} at {exc.start})",
                         hint="pass UTF-8 text; a lone surrogate such as \\ud800 cannot be stored") from None
    if size > MAX_PAYLOAD:
        raise UsageError(f"run input is {size} bytes; the limit is {MAX_PAYLOAD}", hint="pass a reference, not the data")
    if flow.input_schema:
        problem = check_instance(flow.input_schema, run_input)
        if problem:
            raise UsageError(f"input does not match the input_schema of flow '{flow.id}': {problem}",
                             hint=f"pass --input JSON or @file; the schema is at {flow.where('input_schema')}")
    unknown = sorted(set(params) - set(flow.params))
    if unknown:
        from flowctl.definition.kinds import did_you_mean

        declared = ", ".join(sorted(flow.params)) or "none"
        raise UsageError(f"flow '{flow.id}' has no param {', '.join(repr(u) for u in unknown)}",
                         hint=did_you_mean(unknown[0], flow.params) or f"declared params: {declared} ({flow.where('flow')})")
    merged = dict(flow.params)
    merged.update(params)
    now = engine.clock.time()
    digest = project.digest()
    engine.store.save_definition(digest, dict(project.snapshot))
    run_id = run_id or new_run_id(engine.clock)
    cursor = {"state": flow.start, "entered": False, "step": 0, "attempt": 1, "visits": {}, "path": [],
              "context": {}, "response": None, "error": None, "review": None, "saga": [], "residue": [],
              "inflight": None, "pending": None, "after_compensation": None, "state_info": None, "done": False,
              "fanout": None, "depth": (parent or {}).get("depth", 0),
              "parent": {k: parent[k] for k in ("state", "index")} if parent else None}
    row = {"id": run_id, "flow": flow.id, "flow_version": str(flow.version), "digest": digest,
           "parent_id": parent["id"] if parent else None,
           "status": "running", "input": run_input, "params": merged, "output": None, "error": None,
           "cursor": cursor, "created_at": now, "updated_at": now, "available_at": None, "owner": engine.owner,
           "last_seq": 0, "last_hash": "", "steps": 0}
    runner = Runner(engine, project, flow, row, stop=stop, inherited=(parent or {}).get("secrets"))
    runner.emit("run_started", flow=flow.id, flow_version=flow.version, digest=digest, input=run_input,
                params=merged, git_commit=_git_commit(project.root), owner=engine.owner,
                parent=cursor["parent"] and dict(cursor["parent"], run_id=row["parent_id"]))
    first = runner.take_events()
    row["last_seq"] = first[-1]["seq"]
    row["last_hash"] = "" if runner.lazy else seal(first, "")
    stored = row if runner.secrets is None else sensitive.new_row(runner, row)
    if not runner.lazy:
        _seal_row(run_id, stored, row["last_seq"], row["last_hash"], "running", None, row_identity(stored))
    engine.store.create_run(stored, first)
    row.pop("cursor_json", None)
    runner.last_seq, runner.last_hash = row["last_seq"], row["last_hash"]
    return runner.drive()


def resume(engine, row, *, token=None, decision=None, data=None, by=None, stop=None,
           continue_parent: bool = True) -> RunResult:
    """Continue a run (see Engine.resume). A child run that ends here continues its parent, unless
    the parent itself is driving it (``continue_parent=False``)."""
    result = _resume(engine, row, token=token, decision=decision, data=data, by=by, stop=stop)
    if continue_parent and row.get("parent_id") and result.status in FINAL:
        try:
            parent = engine.store.get_run(row["parent_id"])
            queued = ((parent.get("cursor") or {}).get("fanout") or {}).get("queued")
            if engine.distribute_children or queued:
                pass  # queued for workers: the child's final commit made the parent due (SqlStore.commit)
            elif parent["status"] == "waiting" and ((parent.get("cursor") or {}).get("pending") or {}).get("kind") == "children":
                resume(engine, parent)
        except FlowctlError:
            pass  # the parent continues on its next resume or recover (or a worker's next claim)
    return result


def _resume(engine, row, *, token=None, decision=None, data=None, by=None, stop=None) -> RunResult:
    if row["status"] in FINAL:
        if token is not None:
            raise UsageError(f"run {row['id']} has already ended ({row['status']}); the token cannot be used",
                             hint="a review token works once, while its run is paused")
        return result_from_row(row)
    status = row["status"]
    if token is not None and status != "paused":  # a token decides a paused review, and only that
        raise UsageError(f"run {row['id']} is not paused for review (it is {status}); the token cannot be used",
                         hint=f"continue it without a token: flowctl resume {row['id']} (or flowctl recover)")
    project = _trusted_project(engine, row)
    flow = project.flows[row["flow"]]
    runner = Runner(engine, project, flow, row, stop=stop)
    if status == "running":
        # a worker's lease, not a process id, says who holds a leased run (the store refuses a live one)
        holder = None if row.get("lease_until") else _live_owner(row.get("owner"), engine.owner)
        if holder:
            raise UsageError(f"run {row['id']} is being executed by {holder}", hint="wait for it, or stop that process")
        runner.emit("run_resumed", reason="orphaned", previous_owner=row.get("owner"), owner=engine.owner)
    elif status == "paused":
        pending = runner.cursor["pending"] or {}
        if token is None and not runner.review_expired():
            raise UsageError(f"run {row['id']} is paused for review at '{pending.get('state')}'",
                             hint=f"flowctl resume {row['id']} --token TOKEN --decision {'|'.join(pending.get('decisions', []))}")
        if token is not None:
            runner.decide_review(token, decision, data, by)
    elif status == "waiting":
        # a parent waiting on its children re-checks them whenever it is resumed (a child's end makes it due)
        children = (runner.cursor.get("pending") or {}).get("kind") == "children"
        due = 0 if children else row.get("available_at") or 0
        delay = due - engine.clock.time()
        if delay > engine.max_inline_wait:
            return result_from_row(row)
        if delay > 0:
            engine.clock.sleep(delay)
        runner.emit("run_resumed", reason="due", owner=engine.owner)
    runner.commit(status="running", owner=engine.owner, available_at=None)
    return runner.drive()


def recover(engine) -> list:
    results = []
    now = engine.clock.time()
    candidates = []
    for status in ("running", "waiting", "paused"):
        candidates.extend(engine.store.list_runs(status=status, limit=0))
    for row in sorted(candidates, key=lambda r: r["created_at"]):
        if row["status"] == "running" and ((row.get("lease_until") or 0) > now  # a worker holds it
                                           or _live_owner(row.get("owner"), engine.owner)):
            continue
        if row["status"] == "waiting" and (row.get("available_at") or 0) > now + engine.max_inline_wait:
            continue
        if row["status"] == "paused":
            pending = (row.get("cursor") or {}).get("pending") or {}
            deadline = pending.get("deadline")
            if deadline is None or deadline > now:
                if pending.get("remind_at") and pending["remind_at"] <= now and not pending.get("reminded"):
                    try:
                        remind(engine, row)
                    except FlowctlError:
                        pass
                continue
        try:
            results.append(resume(engine, row))
        except FlowctlError as exc:
            results.append(RunResult(row["id"], row["flow"], row["status"],  # refused: not continued
                                     error={"type": type(exc).__name__, "code": exc.code, "message": str(exc),
                                            "refused": True}))
    return results


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
        live = _live_owner(row.get("owner"), engine.owner)
        if live:
            raise UsageError(f"run {row['id']} is being executed by {live}",
                             hint="stop that process first; the run stays resumable and can then be cancelled")
    project = _trusted_project(engine, row)
    runner = Runner(engine, project, project.flows[row["flow"]], row)
    runner.emit("run_cancelled", by=by, compensate=compensate)
    # a cancel that an earlier (stopped) cancel began goes on as that one asked
    runner.cursor.setdefault("cancelling", None)
    runner.cursor["cancelling"] = runner.cursor["cancelling"] or {"by": by, "compensate": compensate}
    runner.cursor["pending"] = None
    runner.commit(status="running", owner=engine.owner, available_at=None)  # owns the run, or RunConflict
    finish_cancel(runner)
    return runner.result()


def finish_cancel(runner) -> None:
    """Carry out the cancel recorded in ``cursor.cancelling`` of a run this process owns: undo an
    in-flight call that happened, cancel the unfinished children, compensate, end ``cancelled``."""
    engine, c = runner.engine, runner.cursor
    request = c["cancelling"]
    compensate, by = request.get("compensate", True), request.get("by")
    if compensate and c.get("inflight"):
        task.undo_inflight(runner)
    for child in engine.store.list_runs(parent_id=runner.id, limit=0):
        if child["status"] not in FINAL:
            try:
                cancel(engine, child, compensate=compensate, by=by)
            except FlowctlError as exc:  # it ended or was taken meanwhile: it stands as it is, and the log says so
                runner.emit("child_not_cancelled", c["state"], run_id=child["id"], code=exc.code, message=str(exc))
    if compensate:
        saga.compensate(runner, reason="cancelled")
    c["done"] = True
    c["pending"] = None
    err = {"type": "Cancelled", "code": "CANCELLED", "message": f"cancelled by {by or 'a user'}", "state": c["state"]}
    runner.commit(status="cancelled", error=err, available_at=None)


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


def remind(engine, row) -> None:
    """``remind_after`` passed with no decision: call the review's ``notify`` tool again with a new
    token (the old one stops working; only hashes are stored) and ``reminder: true``."""
    project = _trusted_project(engine, row)
    runner = Runner(engine, project, project.flows[row["flow"]], row)
    pending = runner.cursor["pending"]
    state = project.states[pending["state"]]
    token = secrets.token_urlsafe(24)
    runner.cursor["pending"] = dict(pending, token_hash=_hash_token(token), reminded=True)
    runner.emit("review_reminded", state.id)
    if state.get("notify"):
        try:
            task.notify(runner, state, state.get("notify"), {
                "token": token, "run_id": runner.id, "show": pending.get("show"), "decisions": pending.get("decisions"),
                "deadline": iso(pending["deadline"]) if pending.get("deadline") else None, "reminder": True})
        except Exception as exc:  # noqa: BLE001 - denied or failed: the old token stays the one that works
            runner.cursor["pending"] = dict(pending, reminded=True)
            runner.emit("review_reminder_failed", state.id, error=error_names(exc)[0], message=str(exc))
    runner.commit()


def reissue_token(engine, row, by=None) -> str:
    """A new one-time token for a run paused for review; the old token stops working."""
    if row["status"] != "paused" or ((row.get("cursor") or {}).get("pending") or {}).get("kind") != "review":
        raise UsageError(f"run {row['id']} is not paused for review (it is {row['status']})")
    project = _trusted_project(engine, row)
    runner = Runner(engine, project, project.flows[row["flow"]], row)
    token = secrets.token_urlsafe(24)
    runner.cursor["pending"] = dict(runner.cursor["pending"], token_hash=_hash_token(token), refused_at=[])
    runner.emit("review_token_reissued", runner.cursor["pending"].get("state"), by=by)
    runner.commit()
    return token


def result_from_row(row) -> RunResult:
    cursor = row.get("cursor") or {}
    return RunResult(row["id"], row["flow"], row["status"], row.get("output"), row.get("error"),
                     list(cursor.get("path", [])), list(cursor.get("residue", [])), None,
                     row.get("available_at"), cursor.get("step", 0))


def _live_owner(owner, me):
    """The owner string if that process is alive on this host (and is not this process)."""
    if not owner or owner == me:
        return None
    host, _, pid = owner.rpartition(":")
    if host != os.uname().nodename:
        return owner  # another host: this process cannot tell whether it is alive, so it is
    if not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return owner
    return owner


def _refuse_forged(engine, row) -> None:
    """Raise :class:`RecordTampered` unless ``row`` is what its last commit sealed (resume, recover,
    a worker's claim, cancel, remind: never continue a forged row)."""
    forged = None if getattr(engine.store, "seals_on_read", False) else seal_problem(row)
    if forged:
        raise RecordTampered(f"run {row['id']}: {forged}; it is not continued",
                             hint=f"flowctl audit verify {row['id']} says what differs; restore the store from a backup")


def _trusted_project(engine, row):
    """The definition ``row`` is pinned to, once the row is trusted (a swapped digest would
    otherwise choose the definition before :class:`Runner` could refuse the row)."""
    _refuse_forged(engine, row)
    return engine.project_for(row["digest"])


_IDENTITY_KEYS = ("digest", "flow", "parent_id", "input", "params", "output")


def _seal_row(run_id, stored: dict, last_seq, last_hash, status, error, identity: str) -> None:
    """Seal ``stored`` (a run row as the store will write it) for :func:`flowctl.store.audit.seal_problem`:
    ``stored["seal"]`` over its checkpoint text and ``identity`` (:func:`flowctl.store.audit.row_identity`),
    and ``stored["cursor_json"]``, that very text for the store to write, when the checkpoint is kept
    in plaintext. An encrypted checkpoint (a run with secrets, :mod:`flowctl.engine.sensitive`) is written
    as its ciphertext and sealed by its plaintext, which is what a reader gets back."""
    cursor = stored["cursor"]
    plain = getattr(cursor, "plain", cursor)
    text = encode_data(plain)
    if plain is cursor:
        stored["cursor_json"] = text
    stored["seal"] = run_seal(run_id, last_seq, last_hash, status, error, text, identity)


def _sensitive_fields(project, flow) -> frozenset:
    """Every field name marked ``sensitive`` by a contract this flow or a flow it starts uses:
    redacted in all of the run's stored data (:mod:`flowctl.engine.sensitive`)."""
    return sensitive.flow_fields(project, flow)


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


class _Move:
    """A business transition ready to run: its ``when`` and ``set`` compiled once."""

    __slots__ = ("to", "when", "evaluate", "apply_set", "line", "short")

    def __init__(self, t):
        self.to, self.when, self.line = t.to, t.when, t.line()
        self.short = len(t.when or "") <= FIT_STRING
        self.evaluate = compile_expr(t.when, t.where("when")).evaluate if t.when is not None else None
        self.apply_set = compile_set(t.set, t.where("set"))


def _moves(project, flow, state_id) -> tuple:
    """The transitions leaving ``state_id`` in file order (first match wins), compiled; cached on
    the project (per flow and state)."""
    key = ("moves", flow.id, state_id)
    found = project._resolved.get(key)
    if found is None:
        found = project._resolved[key] = tuple(_Move(t) for t in flow.transitions_from(state_id))
    return found


class Runner:
    def __init__(self, engine, project, flow, row, stop=None, inherited=None):
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.project = project
        self.flow = flow
        self.row = row
        self.id = row["id"]
        self.cursor = row["cursor"]
        self.stop = stop
        self.last_seq = row["last_seq"]
        self.last_hash = row["last_hash"]
        self.events: list = []
        self.step_rows: list = []
        self.tool_fns: dict = {}  # (contract ref, entrypoint) -> its entrypoint callable
        self.unleased = row.get("lease_until") is None  # no worker lease to clear on the next commit
        #: the store hashes events when they are read (MemoryStore): owned small data is not encoded here
        self.lazy = getattr(engine.store, "seals_on_read", False)
        self._identity = None
        _refuse_forged(engine, row)
        self.gate = Gate(project, engine.store, engine.clock)
        self.sensitive = _sensitive_fields(project, flow)
        #: names and values redacted from what is stored, the row sealed while live (None: no secrets)
        self.secrets = sensitive.for_run(self, inherited)
        self.tools_folder = str(project.orchestration / "tools")
        self.run_info = {"id": self.id, "flow": flow.id, "flow_version": flow.version,
                         "started_at": iso(row["created_at"]), "parent": row.get("parent_id"),
                         "depth": row["cursor"].get("depth", 0)}

    # ------------------------------------------------------------------ events and commits
    def emit(self, type_: str, state: str | None = None, attempt: int | None = None, /, *, strict: bool = False,
             owned=False, **data) -> dict:
        """Record an audit event (committed with the next checkpoint). Data over the payload limit
        raises :class:`PayloadTooLarge` with ``strict`` (tool outputs), else is replaced by a note.

        The event's JSON text (``data_json``) is made here, once; its hash when it is committed
        (:func:`flowctl.store.audit.seal`). ``owned``: the caller guarantees nothing changes ``data`` later,
        so a store that seals on read (MemoryStore) may keep the dict and encode it then; ``True``
        when every value is small by construction, else a tuple of the values that are not (tool
        input, output ...), which must pass :func:`flowctl.engine.payload.fits` to skip encoding."""
        seq = self.last_seq + len(self.events) + 1
        if self.secrets is not None:  # run data only: engine fields such as "to" (the next state) stay readable
            self.secrets.event(data)
        ev = {"seq": seq, "ts": self.clock.time(), "type": type_, "state": state, "attempt": attempt, "data": data}
        if not (owned is not False and self.lazy and (owned is True or fits(owned))):
            data_json = encode_data(data)
            if len(data_json) > MAX_PAYLOAD // 4 and len(data_json.encode()) > MAX_PAYLOAD:
                size = len(data_json.encode())
                if strict:
                    raise PayloadTooLarge(f"{type_} payload is {size} bytes; the store accepts at most {MAX_PAYLOAD} per payload")
                ev["data"] = {"truncated": True, "bytes": size}
                data_json = encode_data(ev["data"])
            ev["data_json"] = data_json
        self.events.append(ev)
        if self.engine.listener is not None:  # its own copy: a listener cannot change the record
            self.engine.listener(dict(ev, run_id=self.id, data=copy.deepcopy(ev["data"])))
        return ev

    def take_events(self) -> list:
        out, self.events = self.events, []
        return out

    def commit(self, status: str | None = None, **fields) -> None:
        run = {"cursor": self.cursor, "updated_at": self.clock.time(), "steps": self.cursor["step"]}
        if status:
            run["status"] = status
        run.update(fields)
        events = self.take_events()
        if events:
            run["last_seq"] = events[-1]["seq"]
            if not self.lazy:
                run["last_hash"] = seal(events, self.last_hash)
        steps, self.step_rows = self.step_rows, []
        stored = run
        if self.secrets is not None:
            if "error" not in run and self.row.get("error") is not None:
                run["error"] = self.row["error"]  # written again, scrubbed: the seal covers the stored text
            stored, steps = sensitive.protect(self, run, steps, status)
        if not self.lazy:  # the row as this commit leaves it, sealed in the same statement (audit.run_seal)
            _seal_row(self.id, stored, run.get("last_seq", self.last_seq), run.get("last_hash", self.last_hash),
                      run.get("status", self.row["status"]), stored.get("error", self.row.get("error")),
                      self.identity(stored))
        if self.unleased:
            self.store.commit(self.id, self.last_seq, stored, events, steps, unleased=True)
        else:  # the first commit of this writer clears a lease that expired (the run is taken over)
            self.store.commit(self.id, self.last_seq, stored, events, steps)
            self.unleased = True
        if events:
            self.last_seq = run["last_seq"]
            self.last_hash = run.get("last_hash", self.last_hash)
        run.pop("cursor_json", None)
        run.pop("seal", None)
        self.row.update(run)
        if self.secrets is not None and status in FINAL:
            sensitive.drop_children(self)

    def identity(self, stored: dict) -> str:
        """:func:`flowctl.store.audit.row_identity` of the row as this commit leaves it (``stored`` over
        the row); computed again only when one of its values is another object than last time."""
        view = {k: stored[k] if k in stored else self.row.get(k) for k in _IDENTITY_KEYS}
        key = tuple(id(v) for v in view.values())
        cached = self._identity
        if cached is None or cached[0] != key:
            cached = self._identity = (key, row_identity(view), view)  # the view keeps the ids valid
        return cached[1]

    def check_size(self, value, what: str) -> None:
        if fits(value):
            return
        text = encode_data(value)
        if len(text) <= MAX_PAYLOAD // 4:
            return
        size = len(text.encode())
        if size > MAX_PAYLOAD:
            raise PayloadTooLarge(f"{what} is {size} bytes; the store accepts at most {MAX_PAYLOAD} per payload")

    # ------------------------------------------------------------------ scope
    def scope(self) -> dict:
        c = self.cursor
        return {"input": self.row["input"], "params": self.row.get("params") or {}, "context": c["context"],
                "response": c["response"], "error": c["error"], "review": c["review"], "visits": c["visits"],
                "state": c["state_info"], "run": self.run_info, "item": None, "index": None}

    # ------------------------------------------------------------------ the loop
    def drive(self) -> RunResult:
        factory = getattr(self.engine, "recorder_factory", None)
        recorder = factory(self) if factory is not None else Recorder(self.clock)
        token = RECORDER.set(recorder)
        halt = getattr(self.engine, "halt", None)  # a worker's checkpoint flag (flowctl.workers.worker.Worker.halt)
        try:
            while not self.cursor["done"]:
                if self.stop is not None and self.stop.is_set():
                    self.stopped_by_sibling()
                    break
                if halt is not None and halt(self.id):
                    break  # stays running, its last checkpoint committed: the worker cancels or releases it
                if self.cursor.get("cancelling"):  # a cancel owned the run and its process stopped
                    finish_cancel(self)
                    break
                if self.cursor.get("after_compensation"):
                    try:
                        self.finish_handler(self.cursor["after_compensation"])
                    except Park:  # a fallback tool waits for its own gate review
                        return self.result()
                    continue
                state = self.project.states[self.cursor["state"]]
                try:
                    if not self.cursor["entered"]:
                        self.enter(state)
                    response = self.execute(state)
                    if response is _DONE:
                        continue
                    self.advance(state, response)
                except Park:
                    return self.result()
                except LIMIT_ERRORS as exc:
                    self.fail_with(state, exc, layer="limit")
                except Exception as exc:  # noqa: BLE001 - every error goes through the layers
                    if isinstance(exc, FlowctlError) and not isinstance(exc, StepError):
                        raise
                    try:
                        self.handle_error(state, exc)
                    except Park:
                        return self.result()
                    except Exception as during:  # noqa: BLE001 - a handler failed (e.g. its set): fail the run
                        if isinstance(during, FlowctlError) and not isinstance(during, StepError):
                            raise
                        self.emit("handler_failed", state.id, self.cursor["attempt"], error=type(during).__name__,
                                  message=str(during))
                        self.fail_with(state, during, layer="handler")
        finally:
            RECORDER.reset(token)
        return self.result()

    def stopped_by_sibling(self) -> None:
        """A sibling branch failed: stop here without compensating (the parent takes over the saga)."""
        c = self.cursor
        c["done"] = True
        c["pending"] = None
        err = {"type": "Cancelled", "code": "CANCELLED", "message": "a sibling branch failed", "state": c["state"]}
        self.emit("run_cancelled", c["state"], reason="sibling failed", compensate=False)
        self.commit(status="cancelled", error=err, available_at=None)

    def result(self) -> RunResult:
        c = self.cursor
        review = None
        pending = c.get("pending") or {}
        if self.row["status"] == "paused" and pending.get("kind") == "review":
            review = {k: pending.get(k) for k in ("state", "decisions", "show", "deadline")}
            review["token"] = getattr(self, "issued_token", None)
        out = RunResult(self.id, self.flow.id, self.row["status"], self.row.get("output"), self.row.get("error"),
                        list(c["path"]), list(c["residue"]), review, self.row.get("available_at"), c["step"])
        if self.row["status"] == "waiting" and pending.get("kind") == "children":
            from flowctl.engine.states import fanout

            out.children = fanout.waiting_children(self, pending)
        return out

    def enter(self, state) -> None:
        c = self.cursor
        limits = self.flow.limits
        if c["step"] + 1 > limits.max_steps:
            raise MaxStepsExceeded(f"run took {limits.max_steps} steps (limits.max_steps) and would enter '{state.id}'")
        visits = c["visits"].get(state.id, 0) + 1
        if limits.max_visits is not None and visits > limits.max_visits:
            raise MaxStepsExceeded(f"state '{state.id}' would be entered {visits} times (limits.max_visits {limits.max_visits})")
        if limits.timeout is not None and self.clock.time() - self.row["created_at"] > limits.timeout:
            raise RunTimeout(f"run exceeded limits.timeout ({limits.timeout:g}s)")
        c["step"] += 1
        c["visits"] = dict(c["visits"], **{state.id: visits})
        c["path"].append(state.id)
        if len(c["path"]) > PATH_KEPT:  # long loops: the checkpoint keeps the recent path only
            c["path_dropped"] = c.get("path_dropped", 0) + len(c["path"]) - PATH_KEPT
            del c["path"][:-PATH_KEPT]
        c["entered"] = True
        c["attempt"] = 1
        c["state_info"] = {"id": state.id, "entered_at": iso(self.clock.time()), "attempt": 1}
        self.emit("state_entered", state.id, 1, owned=True, type=state.type, step=c["step"], visit=visits)

    def execute(self, state):
        kind = state.type
        if kind == "task":
            return task.run_task(self, state)
        if kind == "choice":
            return self.cursor["response"]
        if kind == "pass":
            self.cursor["context"] = apply_set(self.cursor["context"], state.get("set"), self.scope(),
                                               state.where("set"), check=self.check_size)
            return self.cursor["response"]
        if kind == "wait":
            return self.wait(state)
        if kind == "review":
            return self.review(state)
        if kind == "succeed":
            self.succeed(state)
            return _DONE
        if kind == "fail":
            self.fail_state(state)
            return _DONE
        if kind in ("parallel", "map", "subflow"):
            from flowctl.engine.states import fanout

            return fanout.run_children(self, state)
        raise StepError(f"state type '{kind}' ({state.id}) is not supported by this engine")

    # ------------------------------------------------------------------ transitions
    def advance(self, state, response) -> None:
        c = self.cursor
        c["response"] = response
        scope = self.scope()
        chosen = None
        evaluated = []
        small = True  # every result a boolean or null and every condition short: the event is small
        for move in _moves(self.project, self.flow, state.id):
            if move.when is None:
                chosen = move
                evaluated.append({"when": None, "result": True})
                break
            value = move.evaluate(scope)
            evaluated.append({"when": move.when, "result": value})  # null stays null in the trace
            if small and not (move.short and (value is True or value is False or value is None)):
                small = False
            if not (value is None or value is False or value == "" or value == [] or value == {}):
                chosen = move  # JMESPath truthiness (scope.truthy)
                break
        if chosen is None:
            raise NoTransitionMatched(f"no transition from '{state.id}' matched",
                                      hint="; ".join(f"{e['when']} -> {e['result']!r}" for e in evaluated))
        if chosen.apply_set is not None:
            c["context"] = chosen.apply_set(c["context"], scope, self.check_size)
        c["error"] = None  # the state completed: the caught error leaves the scope
        data = {"to": chosen.to, "conditions": evaluated, "line": chosen.line}
        recorder = RECORDER.get()
        if recorder is not None and recorder.recorded:
            data["recorded"] = list(recorder.recorded)
            recorder.recorded.clear()
            small = False
        self.emit("transition_taken", state.id, c["attempt"], owned=True if small and len(evaluated) <= 16
                  else (evaluated, data.get("recorded")),
                  **data)
        self.goto(chosen.to)

    def goto(self, target: str) -> None:
        c = self.cursor
        c["state"] = target
        c["entered"] = False
        c["attempt"] = 1
        c["pending"] = None
        self.commit()

    # ------------------------------------------------------------------ endings
    def succeed(self, state) -> None:
        c = self.cursor
        output = c["context"] if self.flow.output is None else build(self.flow.output, self.scope(), self.flow.where("output"))
        c["done"] = True
        c["error"] = None
        self.emit("run_succeeded", state.id, output=output)
        self.commit(status="succeeded", output=output)

    def fail_state(self, state) -> None:
        """End the run as failed with the state's error and cause. It does not compensate unless the
        state says ``compensate: true`` (a handler may already have compensated)."""
        scope = self.scope()
        err_name = _literal_or_expr(state.get("error"), scope, state.where("error"))
        cause = _literal_or_expr(state.get("cause"), scope, state.where("cause")) or ""
        err = {"type": str(err_name), "code": str(err_name), "message": str(cause), "state": state.id}
        if state.get("compensate") and self.cursor["saga"]:
            self.cursor["after_compensation"] = {"fail": err, "compensate": True}
            self.commit()
            return
        self.finish_failed(err)

    def finish_failed(self, err: dict) -> None:
        c = self.cursor
        c["done"] = True
        self.emit("run_failed", err.get("state"), error=err, residue=c["residue"])
        self.commit(status="failed", error=err)

    # ------------------------------------------------------------------ error layers
    def handle_error(self, state, exc, *, skip_state_layer: bool = False) -> None:
        c = self.cursor
        err = error_dict(exc, state.id, c["attempt"])
        c["error"] = err
        names = matchable_names(exc)
        layers = [] if skip_state_layer else [("state", state.on_error)]
        layers.append(("flow", self.flow.on_error))
        for layer, handlers in layers:
            for index, h in enumerate(handlers):
                if "*" in h.errors or any(n in h.errors for n in names):
                    self.emit("error_caught", state.id, c["attempt"], error=err, layer=layer, handler=index,
                              line=h.line())
                    self.run_handler(state, h, err)
                    return
        self.emit("error_caught", state.id, c["attempt"], error=err, layer="default", handler=None)
        self.fail_with(state, exc, layer="default", err=err)

    def fail_with(self, state, exc, *, layer: str, err=None) -> None:
        err = err or error_dict(exc, state.id, self.cursor["attempt"])
        self.cursor["error"] = err
        self.cursor["after_compensation"] = {"fail": err, "compensate": True}
        self.commit()

    def run_handler(self, state, h, err) -> None:
        c = self.cursor
        if h.set:
            c["context"] = apply_set(c["context"], h.set, self.scope(), h.where("set"))
        if h.goto:
            action = {"goto": h.goto, "compensate": bool(h.compensate)}
        elif h.fallback:
            action = {"fallback": h.fallback, "state": state.id, "compensate": bool(h.compensate)}
        elif h.fail:
            action = {"fail": {"type": h.fail, "code": h.fail, "message": err["message"], "state": state.id},
                      "compensate": h.compensate is not False}
        else:
            action = {"fail": err, "compensate": h.compensate is not False}
        c["after_compensation"] = action
        self.commit()

    def finish_handler(self, action: dict) -> None:
        """Carry out a handler's action, compensating first if asked (resumable after a crash)."""
        if action.get("compensate"):
            saga.compensate(self, reason="handler")
        c = self.cursor
        c["after_compensation"] = None
        if "goto" in action:
            self.goto(action["goto"])
        elif "fallback" in action:
            state = self.project.states[action["state"]]
            try:
                response = task.run_fallback(self, state, action["fallback"])
                self.advance(state, response)
            except Park:  # paused for the fallback's gate review: the fallback runs on resume (compensated already)
                c["after_compensation"] = dict(action, compensate=False)
                self.commit()
                raise
            except LIMIT_ERRORS as exc:
                self.fail_with(state, exc, layer="limit")
            except Exception as exc:  # noqa: BLE001
                if isinstance(exc, FlowctlError) and not isinstance(exc, StepError):
                    raise
                self.handle_error(state, exc, skip_state_layer=True)
        else:
            self.finish_failed(action["fail"])

    # ------------------------------------------------------------------ parking
    def park(self, status: str, pending: dict, available_at: float | None, *, keep_due: bool = False) -> None:
        """Commit the run as ``status`` (waiting, paused) due at ``available_at`` and stop driving it.
        ``keep_due``: leave the stored due time as it is instead: a parent waiting on queued
        children stays due if a child ended (``SqlStore._wake_parent``) since it was resumed."""
        self.cursor["pending"] = pending
        self.emit("run_paused", self.cursor["state"], self.cursor["attempt"], status=status, pending=_public(pending),
                  available_at=available_at)
        if keep_due:
            self.commit(status=status)
        else:
            self.commit(status=status, available_at=available_at)
        raise Park()

    def wait(self, state):
        c = self.cursor
        pending = c.get("pending") or {}
        due = pending.get("due")
        if due is None:
            if state.get("duration") is not None:
                due = self.clock.time() + parse_duration(state.get("duration"))
            else:
                from flowctl.expr.expressions import _parse_time

                value = compile_expr(state.get("until"), state.where("until")).evaluate(self.scope())
                try:
                    due = _parse_time(value).timestamp()
                except (ValueError, TypeError) as exc:
                    from flowctl.errors import ExpressionError

                    raise ExpressionError(f"until of '{state.id}' gave {value!r}, not an ISO-8601 time ({exc})") from None
            self.emit("wait_started", state.id, due=iso(due))
        delay = due - self.clock.time()
        if delay > self.engine.max_inline_wait:
            self.park("waiting", {"kind": "wait", "state": state.id, "due": due}, due)
        if delay > 0:
            self.clock.sleep(delay)
        return c["response"]

    def review(self, state):
        c = self.cursor
        pending = c.get("pending") or {}
        if pending.get("kind") == "review" and pending.get("decided"):
            c["pending"] = None
            return c["response"]
        if pending.get("kind") == "review" and self.review_expired():
            return self.review_timeout(state)
        if c.get("inflight") and c["inflight"].get("state") == state.id:  # its notify call was cut short
            task.recover_notify(self, state)
        token = secrets.token_urlsafe(24)  # 192 bits
        self.issued_token = token
        scope = self.scope()
        show = build(state.get("show") or {}, scope, state.where("show"))
        timeout = state.get("timeout")
        if isinstance(timeout, dict):
            seconds = compile_expr(timeout["expr"], state.where("timeout")).evaluate(scope)
            if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
                from flowctl.errors import ExpressionError

                raise ExpressionError(f"timeout of review '{state.id}' gave {seconds!r}, not a positive number of seconds")
            deadline = self.clock.time() + float(seconds)
        else:
            deadline = self.clock.time() + parse_duration(timeout) if isinstance(timeout, str) else None
        remind = state.get("remind_after")
        review = {"kind": "review", "state": state.id, "token_hash": _hash_token(token),
                  "decisions": list(state.get("decisions") or []), "show": show, "deadline": deadline,
                  "remind_at": self.clock.time() + parse_duration(remind) if isinstance(remind, str) else None}
        self.emit("review_requested", state.id, show=show, decisions=review["decisions"],
                  deadline=iso(deadline) if deadline else None)
        notify = state.get("notify")
        if notify:
            task.notify(self, state, notify, {"token": token, "run_id": self.id, "show": show,
                                              "decisions": review["decisions"],
                                              "deadline": iso(deadline) if deadline else None})
        self.park("paused", review, None)

    def review_expired(self) -> bool:
        pending = self.cursor.get("pending") or {}
        deadline = pending.get("deadline")
        return pending.get("kind") == "review" and deadline is not None and self.clock.time() >= deadline

    def review_timeout(self, state):
        on_timeout = state.get("on_timeout") or {"fail": "ReviewTimeout"}
        self.cursor["pending"] = None
        self.emit("review_timed_out", state.id)
        if "goto" in on_timeout:
            self.cursor["error"] = {"type": "ReviewTimeout", "code": "REVIEW_TIMEOUT",
                                    "message": f"review '{state.id}' timed out", "state": state.id, "attempt": 1}
            self.goto(on_timeout["goto"])
            return _DONE
        raise ReviewTimeout(f"review '{state.id}' was not decided in time") if on_timeout["fail"] == "ReviewTimeout" \
            else _named_failure(on_timeout["fail"], f"review '{state.id}' was not decided in time")

    def decide_review(self, token, decision, data, by) -> None:
        pending = self.cursor.get("pending") or {}
        if pending.get("kind") != "review":
            self.emit("review_refused", self.cursor["state"], reason="no review pending")
            self.commit()
            raise UsageError(f"run {self.id} has no pending review (the token may already have been used)")
        now = self.clock.time()
        recent = [t for t in pending.get("refused_at") or () if t > now - TOKEN_WINDOW]
        if len(recent) >= TOKEN_ATTEMPTS:  # guessing is throttled per run: even the right token waits
            until = recent[-TOKEN_ATTEMPTS] + TOKEN_WINDOW
            self.emit("review_refused", pending["state"], reason="throttled", until=iso(until))
            self.commit()
            raise UsageError(f"run {self.id} refuses review tokens until {iso(until)}: {len(recent)} wrong tokens "
                             f"in the last {TOKEN_WINDOW / 60:g} minutes",
                             hint=f"wait, or issue a new token: flowctl reviews --reissue {self.id}")
        if not hmac.compare_digest(_hash_token(token), pending["token_hash"]):
            self.cursor["pending"] = dict(pending, refused_at=recent[-(TOKEN_ATTEMPTS - 1):] + [now])
            self.emit("review_refused", pending["state"], reason="wrong token",
                      attempts_left=max(0, TOKEN_ATTEMPTS - len(recent) - 1))
            self.commit()
            raise UsageError(f"wrong token for run {self.id}", hint="use the token printed when the run paused")
        if self.review_expired():
            self.emit("review_refused", pending["state"], reason="expired")
            self.commit()
            raise UsageError(f"the review of run {self.id} expired at {iso(pending['deadline'])}",
                             hint=f"its on_timeout applies on the next: flowctl resume {self.id}")
        if decision not in pending["decisions"]:
            raise UsageError(f"decision '{decision}' is not one of {', '.join(pending['decisions'])}")
        at = iso(self.clock.time())
        if self.secrets is not None:
            self.secrets.learn(data)
        self.cursor["review"] = {"decision": decision, "data": data, "by": by, "at": at, "state": pending["state"],
                                 "step": pending.get("step", self.cursor["step"]), "policy": bool(pending.get("policy")),
                                 "call": pending.get("call")}
        self.cursor["pending"] = dict(pending, decided=True, token_hash="used")
        self.emit("review_decided", pending["state"], decision=decision, data=data, by=by, at=at)


_DONE = object()


def _public(pending: dict) -> dict:
    return {k: v for k, v in pending.items() if k != "token_hash"}


def _hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _literal_or_expr(value, scope, where):
    if isinstance(value, dict) and "expr" in value:
        return compile_expr(value["expr"], where).evaluate(scope)
    return value


def _named_failure(name, message):
    from flowctl.errors import FlowFailed

    return FlowFailed(name, message)


def matchable_names(exc) -> list:
    """Names a handler can match for ``exc``: the error's own name, its classes, and ``ToolError``
    for anything raised by tool code (not timeouts), as ASL's States.TaskFailed."""
    names = list(getattr(exc, "flowctl_names", None) or error_names(exc))
    return names


def error_dict(exc, state_id: str, attempt: int) -> dict:
    """``{type, code, message, state, attempt}`` for the scope's ``error`` and the run's error."""
    names = matchable_names(exc)
    type_name = names[0] if names else type(exc).__name__
    code = getattr(exc, "code", None)
    if not isinstance(exc, StepError) or code in (None, "TOOL_ERROR", "FLOW_FAILED"):
        code = type_name
    return {"type": type_name, "code": code, "message": str(exc) or type_name, "state": state_id, "attempt": attempt}
