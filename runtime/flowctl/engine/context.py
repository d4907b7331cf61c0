"""The one thing a state handler sees: :class:`RunContext` (one run's checkpoint, its audit
events not yet committed, and the verbs ``emit``, ``commit``, ``park``, ``scope``, ``goto``).

A handler (:mod:`flowctl.engine.states`) returns the state's response, :data:`DONE` (it moved
the run itself: ``goto``, or the run ended) or :data:`PARKED` (``park`` committed it as waiting
or paused: the step loop stops driving it). Nothing a handler does to steer the loop is raised.
"""
from __future__ import annotations

import copy
import os

from flowctl.engine import sensitive
from flowctl.engine.clock import iso
from flowctl.engine.cursor import Cursor
from flowctl.engine.payload import MAX_DEPTH, MAX_PAYLOAD, fits, too_deep
from flowctl.engine.result import RunResult, pending_review, waiting_children
from flowctl.errors import PayloadTooLarge, RecordTampered
from flowctl.gate.policy import Gate
from flowctl.store.audit import encode_data, row_identity, run_seal, seal_commit, seal_problem
from flowctl.store.sql import FINAL


class _Outcome:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: a handler moved the run itself (``goto``) or ended it: no transition is taken
DONE = _Outcome("DONE")
#: the run is committed as waiting or paused (:meth:`RunContext.park`): stop driving it
PARKED = _Outcome("PARKED")

_IDENTITY_KEYS = ("digest", "flow", "parent_id", "input", "params", "output")


class RunContext:
    """One run as this process drives it. ``row``: the run row as last committed; ``cursor``: its
    :class:`~flowctl.engine.cursor.Cursor`; ``project``/``flow``: the definition it is pinned to.
    ``stop`` (a ``threading.Event``): a sibling branch failed, stop between steps. ``inherited``:
    a parent's secrets (a child run starting). Raises :class:`RecordTampered` for a forged row."""

    span = None  # the run's OpenTelemetry span while tracing is on (flowctl.engine.spans)
    step_span = None
    #: True while events and the checkpoint wait for the next commit to carry them (:meth:`defer`):
    #: the step loop commits them before it stops driving the run anywhere else
    deferred = False

    def __init__(self, engine, project, flow, row, stop=None, inherited=None):
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.project = project
        self.flow = flow
        self.row = row
        self.id = row["id"]
        self.cursor = Cursor.from_json(row["cursor"])
        if self.cursor.state and self.cursor.state not in project.states:
            raise RecordTampered(f"run {self.id}: its checkpoint is at state {self.cursor.state!r}, which its definition "
                                 "does not have; it is not continued",
                                 hint=f"flowctl audit verify {self.id} says what differs; restore the store from a backup")
        self.stop = stop
        self.last_seq = row["last_seq"]
        self.last_hash = row["last_hash"]
        self.events: list = []
        self.step_rows: list = []
        #: the caches of the step, shared by the engine's runs of this flow and definition
        #: (:meth:`flowctl.engine.engine.Engine.step_caches`): ``plans`` — ``(state id, contract ref)`` ->
        #: its :class:`flowctl.engine.calls.StepPlan`, ``state id`` -> its transitions and their texts
        #: (:func:`flowctl.engine.transitions.advance`); ``lean`` — ``state id`` -> its
        #: :class:`flowctl.engine.lean.LeanStep` or False (the general path); ``guards`` — ``(contract id,
        #: entrypoint, side effects)`` -> ``(fn, also, gated)`` (engine.gatecall); ``tool_fns`` —
        #: ``(contract ref, entrypoint)`` -> its entrypoint callable
        caches = getattr(engine, "step_caches", None)
        self.plans, self.lean, self.guards, self.tool_fns = (caches(project, flow) if caches is not None
                                                             else ({}, {}, {}, {}))
        #: the ``uuid()``/``now()`` recorder of the drive under way (:class:`flowctl.expr.expressions.Recorder`)
        self.recorder = None
        self.unleased = row.get("lease_until") is None  # no worker lease to clear on the next commit
        #: the run's pause request as the last commit handed it back (flowctl.engine.pause), or None
        self.pause_request = None
        #: the store hashes events when they are read (MemoryStore): owned small data is not encoded here
        self.lazy = getattr(engine.store, "seals_on_read", False)
        self._identity = None
        #: the review token this process issued (shown once in the result, never stored)
        self.issued_token: str | None = None
        #: ``{run id: RunResult}`` of children this process drove that paused or wait (their tokens)
        self.child_results: dict = {}
        refuse_forged(engine, row)
        self.gate = Gate(project, engine.store, engine.clock)
        self.sensitive = sensitive.flow_fields(project, flow)
        #: names and values redacted from what is stored, the row sealed while live (None: no secrets)
        self.secrets = sensitive.for_run(self, inherited)
        self.tools_folder = str(project.orchestration / "tools")
        self.run_info = {"id": self.id, "flow": flow.id, "flow_version": flow.version,
                         "started_at": iso(row["created_at"]), "parent": row.get("parent_id"),
                         "depth": self.cursor.depth}

    # ------------------------------------------------------------------ events and commits
    def emit(self, type_: str, state: str | None = None, attempt: int | None = None, /, *, strict: bool = False,
             owned=False, text: str | None = None, **data) -> None:
        """Record an audit event (committed with the next checkpoint). Data over the payload limit
        raises :class:`PayloadTooLarge` with ``strict`` (tool outputs), else is replaced by a note.

        The event's JSON text (``data_json``) is made here, once; its hash when it is committed
        (:func:`flowctl.store.audit.seal`). ``owned``: the caller guarantees nothing changes ``data`` later,
        so a store that seals on read (MemoryStore) may keep the dict and encode it then; ``True``
        when every value is small by construction, else a tuple of the values that are not (tool
        input, output ...), which must pass :func:`flowctl.engine.payload.fits` to skip encoding.
        ``text``: ``data``'s stored text already made (:mod:`flowctl.engine.eventtext`: exactly what
        :func:`~flowctl.store.audit.encode_data` gives, and small); used unless the run has secrets.
        For a store that seals on read the event is buffered as the tuple ``(seq, ts, type, state,
        attempt, data_json or None, data)`` (:func:`flowctl.store.memory._kept` takes it as it is),
        else as a dict; :meth:`take_events` gives dicts either way."""
        seq = self.last_seq + len(self.events) + 1
        secrets = self.secrets
        if secrets is not None:  # run data only: engine fields such as "to" (the next state) stay readable
            secrets.event(data)
            text = None
        ts = self.clock.time()
        if text is None and not (owned is not False and self.lazy and (owned is True or fits(owned))):
            text = encode_data(data)
            if len(text) > MAX_PAYLOAD // 4 and len(text.encode()) > MAX_PAYLOAD:
                size = len(text.encode())
                if strict:
                    raise PayloadTooLarge(f"{type_} payload is {size} bytes; the store accepts at most {MAX_PAYLOAD} per payload")
                data = {"truncated": True, "bytes": size}
                text = encode_data(data)
        if self.lazy:  # a store that seals on read takes the event as a tuple (flowctl.store.memory)
            self.events.append((seq, ts, type_, state, attempt, text, data))
        else:
            ev = {"seq": seq, "ts": ts, "type": type_, "state": state, "attempt": attempt, "data": data}
            if text is not None:
                ev["data_json"] = text
            self.events.append(ev)
        if self.engine.listener is not None:
            self._notify(seq, ts, type_, state, attempt, text, data)

    def emit_known(self, type_: str, state: str, attempt: int, text: str, data: dict) -> None:
        """:meth:`emit` of an event whose stored text ``text`` is made already and small
        (:mod:`flowctl.engine.eventtext`) and whose ``data`` nothing changes later, in a run
        without secrets: the step's own events, recorded without :meth:`emit`'s branches."""
        seq = self.last_seq + len(self.events) + 1
        ts = self.clock.time()
        if self.lazy:
            self.events.append((seq, ts, type_, state, attempt, text, data))
        else:
            self.events.append({"seq": seq, "ts": ts, "type": type_, "state": state, "attempt": attempt, "data": data,
                                "data_json": text})
        if self.engine.listener is not None:
            self._notify(seq, ts, type_, state, attempt, text, data)

    def _notify(self, seq, ts, type_, state, attempt, text, data) -> None:
        """Hand the engine's listener its own copy of an event (a listener cannot change the record)."""
        ev = {"seq": seq, "ts": ts, "type": type_, "state": state, "attempt": attempt, "data": copy.deepcopy(data)}
        if text is not None:
            ev["data_json"] = text
        ev["run_id"] = self.id
        try:
            self.engine.listener(ev)
        except Exception:  # noqa: BLE001 - a watcher (live progress into a closed pipe) never fails the run
            self.engine.listener = None  # nor is asked again

    def take_events(self) -> list:
        """The events not committed yet, as dicts (``seq``, ``ts``, ``type``, ``state``, ``attempt``,
        ``data`` and, once encoded, ``data_json``); the buffer is emptied."""
        out, self.events = self.events, []
        if self.lazy:
            out = [_event_dict(e) for e in out]
        return out

    def commit(self, status: str | None = None, **fields) -> None:
        """Write the checkpoint, the buffered events and step rows in one store commit (one
        transaction); ``status`` and ``fields`` (output, error, available_at …) update the run row.
        Raises :class:`~flowctl.errors.RunConflict` (or ``LeaseLost``) when another writer won."""
        c = self.cursor
        self.deferred = False
        run = {"cursor": c.to_json(), "updated_at": self.clock.time(), "steps": c.step}
        if status:
            run["status"] = status
        if fields:
            run.update(fields)
        events, self.events = self.events, []
        if self.lazy and self.secrets is None:  # a store that seals on read, nothing to protect: the row as is
            if events:
                run["last_seq"] = events[-1][0]
            steps, self.step_rows = self.step_rows, []
            if self.unleased:
                self.pause_request = self.store.commit(self.id, self.last_seq, run, events, steps, unleased=True)
            else:
                self.pause_request = self.store.commit(self.id, self.last_seq, run, events, steps)
                self.unleased = True
            if events:
                self.last_seq = run["last_seq"]
            self.row.update(run)
            return
        if events:
            if self.lazy:
                run["last_seq"] = events[-1][0]
            else:
                run["last_seq"] = events[-1]["seq"]
                run["last_hash"] = seal_commit(events, self.last_hash)
        steps, self.step_rows = self.step_rows, []
        stored = run
        if self.secrets is not None:
            if "error" not in run and self.row.get("error") is not None:
                run["error"] = self.row["error"]  # written again, scrubbed: the seal covers the stored text
            stored, steps = sensitive.protect(self, run, steps, status)
        if not self.lazy:  # the row as this commit leaves it, sealed in the same statement (audit.run_seal)
            seal_row(self.id, stored, run.get("last_seq", self.last_seq), run.get("last_hash", self.last_hash),
                     run.get("status", self.row["status"]), stored.get("error", self.row.get("error")),
                     self.identity(stored))
        if self.unleased:
            self.pause_request = self.store.commit(self.id, self.last_seq, stored, events, steps, unleased=True)
        else:  # the first commit of this writer clears a lease that expired (the run is taken over)
            self.pause_request = self.store.commit(self.id, self.last_seq, stored, events, steps)
            self.unleased = True
        if events:
            self.last_seq = run["last_seq"]
            self.last_hash = run.get("last_hash", self.last_hash)
        run.pop("cursor_json", None)
        run.pop("seal", None)
        self.row.update(run)
        if self.secrets is not None and status in FINAL:
            sensitive.drop_children(self)

    def defer(self, **row) -> None:
        """Leave the buffered events and the checkpoint for the next :meth:`commit` to write (one
        transaction fewer), ``row``'s values being what the stored row already holds (a worker's
        claim made the run ``running`` for it: ``status``, ``owner``). Nothing is lost to a crash
        that the crash would not have cost a moment earlier: the next commit comes with the next
        step, and the step loop commits before it stops driving the run (:meth:`Runner.drive`)."""
        self.row.update(row)
        self.deferred = True

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
        """Raise :class:`PayloadTooLarge` when ``value`` encodes to more than ``MAX_PAYLOAD`` bytes,
        or nests more than :data:`~flowctl.engine.payload.MAX_DEPTH` levels deep (a value that
        fits has at most 64 containers, so it cannot: breaker finding, a context grown a level a
        visit was stored until no reader could walk it, and the run was left running)."""
        if fits(value):
            return
        deep = too_deep(value)
        if deep is not None:
            raise PayloadTooLarge(f"{what} nest more than {MAX_DEPTH} levels deep (at {deep[:60]}"
                                  f"{'…' if len(deep) > 60 else ''}); flowctl keeps no deeper value")
        text = encode_data(value)
        if len(text) <= MAX_PAYLOAD // 4:
            return
        size = len(text.encode())
        if size > MAX_PAYLOAD:
            raise PayloadTooLarge(f"{what} is {size} bytes; the store accepts at most {MAX_PAYLOAD} per payload")

    # ------------------------------------------------------------------ scope and moves
    def scope(self) -> dict:
        """What expressions see: ``{input, params, context, response, error, review, visits, state,
        run, item, index}``."""
        c = self.cursor
        return {"input": self.row["input"], "params": self.row.get("params") or {}, "context": c.context,
                "response": c.response, "error": c.error, "review": c.review, "visits": c.visits,
                "state": c.state_info, "run": self.run_info, "item": None, "index": None}

    def goto(self, target: str):
        """Move to state ``target`` (entered on the next step) and commit; returns :data:`DONE`."""
        c = self.cursor
        c.state = target
        c.entered = False
        c.attempt = 1
        c.pending = None
        if getattr(self.engine, "fold_final", False) and self.project.states[target].type == "succeed":
            self.deferred = True  # the succeed state's commit, next, carries this move (one commit fewer)
        else:
            self.commit()
        return DONE

    def park(self, status: str, pending: dict, available_at: float | None, *, keep_due: bool = False):
        """Commit the run as ``status`` (waiting, paused) due at ``available_at`` (epoch seconds) and
        return :data:`PARKED`. ``keep_due``: leave the stored due time as it is instead: a parent
        waiting on queued children stays due if a child ended (``SqlStore._wake_parent``) since."""
        self.cursor.pending = pending
        self.emit("run_paused", self.cursor.state, self.cursor.attempt, status=status,
                  pending={k: v for k, v in pending.items() if k != "token_hash"}, available_at=available_at)
        if keep_due:
            self.commit(status=status)
        else:
            self.commit(status=status, available_at=available_at)
        return PARKED

    def finish_failed(self, err: dict):
        """End the run as failed with ``err`` (compensation, if any, is done); returns :data:`DONE`."""
        c = self.cursor
        c.done = True
        self.emit("run_failed", err.get("state"), error=err, residue=c.residue)
        self.commit(status="failed", error=err)
        return DONE

    def review_expired(self) -> bool:
        """Whether a review is pending and its deadline has passed."""
        pending = self.cursor.pending or {}
        deadline = pending.get("deadline")
        return pending.get("kind") == "review" and deadline is not None and self.clock.time() >= deadline

    def result(self) -> RunResult:
        """The run as it stands now (the review token this process issued included)."""
        c = self.cursor
        review = None
        pending = c.pending or {}
        if self.row["status"] == "paused" and pending.get("kind") == "review":
            review = pending_review(pending, self.issued_token)
        out = RunResult(self.id, self.flow.id, self.row["status"], self.row.get("output"), self.row.get("error"),
                        list(c.path), list(c.residue), review, self.row.get("available_at"), c.step)
        if self.row["status"] == "paused" and pending.get("kind") == "pause":
            out.paused_by = {k: pending.get(k) for k in ("state", "by", "reason")}
        if self.row["status"] == "waiting" and pending.get("kind") == "children":
            out.children = waiting_children(self.store, self.child_results, pending)
        return out


def _event_dict(e: tuple) -> dict:
    """A buffered event of a store that seals on read (``(seq, ts, type, state, attempt, data_json
    or None, data)``) as the dict the other stores take."""
    seq, ts, type_, state, attempt, text, data = e
    ev = {"seq": seq, "ts": ts, "type": type_, "state": state, "attempt": attempt, "data": data}
    if text is not None:
        ev["data_json"] = text
    return ev


def refuse_forged(engine, row) -> None:
    """Raise :class:`RecordTampered` unless ``row`` is what its last commit sealed (resume, recover,
    a worker's claim, cancel, remind: never continue a forged row)."""
    forged = None if getattr(engine.store, "seals_on_read", False) else seal_problem(row)
    if forged:
        raise RecordTampered(f"run {row['id']}: {forged}; it is not continued",
                             hint=f"flowctl audit verify {row['id']} says what differs; restore the store from a backup")


def trusted_project(engine, row):
    """The definition ``row`` is pinned to, once the row is trusted (a swapped digest would
    otherwise choose the definition before :class:`RunContext` could refuse the row)."""
    refuse_forged(engine, row)
    return engine.project_for(row["digest"])


def process_owner(pid: int | None = None) -> str:
    """The owner string of process ``pid`` (default: this one) as runs record it:
    ``host:pid:start``, ``start`` the process's start time (clock ticks since boot, field 22 of
    ``/proc/<pid>/stat``), so that another process given the same pid later (pid reuse, or the
    pid a process had inside a pid namespace) is told apart from it; ``host:pid`` where the start
    time cannot be read (no ``/proc``)."""
    pid = os.getpid() if pid is None else pid
    start = _start_time(pid)
    base = f"{os.uname().nodename}:{pid}"
    return base if start is None else f"{base}:{start}"


def _start_time(pid) -> str | None:
    """Field 22 (starttime) of ``/proc/<pid>/stat``, or None (no such process, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name (field 2) may hold spaces and ')'
    return fields[19] if len(fields) > 19 and fields[19].isdigit() else None


def _parse_owner(owner: str):
    """``(host, pid, start)`` of ``host:pid:start`` or an older ``host:pid`` (start None)."""
    host, _, last = owner.rpartition(":")
    head, _, middle = host.rpartition(":")
    if head and middle.isdigit() and last.isdigit():
        return head, middle, last
    return host, last, None


#: owners an operator declared gone (comma-separated, exact owner strings): their runs are taken over
GONE_OWNERS_ENV = "FLOWCTL_GONE_OWNERS"


def live_owner(owner, me):
    """The owner string (``host:pid:start`` or an older ``host:pid``, see :func:`process_owner`)
    if that process may still be alive (and is not this process), else None.

    Alive: the pid exists on this host with the recorded start time, or exists as a process of
    another pid namespace (``NSpid`` in ``/proc/*/status``) with that start time. Gone: no such
    pid, or the pid is another process (another start time) and no process has that instance's
    pid and start time. Where it cannot be told the owner counts as alive and the string says
    why: an owner on another host, or an older ``host:pid`` owner whose pid exists. The way out
    then is naming the owner (exactly as printed before the parenthesis) in the environment
    variable ``FLOWCTL_GONE_OWNERS`` (comma-separated) once the operator knows it is gone."""
    if not owner or owner == me:
        return None
    if owner in {o.strip() for o in os.environ.get(GONE_OWNERS_ENV, "").split(",")}:
        return None
    host, pid, start = _parse_owner(owner)
    if host != os.uname().nodename:
        return f"{owner} (on another host: this process cannot tell whether it is alive)"
    if not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return None if start is None or not _elsewhere(pid, start) else owner
    except PermissionError:
        pass
    if start is None:
        return (f"{owner} (pid {pid} is alive, but this owner was recorded without its start time:"
                f" whether it is still that process cannot be told)")
    now = _start_time(pid)
    if now is None or now == start or _elsewhere(pid, start):
        return owner
    return None


def owner_hint(owner, first: str) -> str:
    """The hint of a refusal because ``owner`` (a run's recorded owner) may be alive: ``first``,
    then the way out once that process is known to be gone (:data:`GONE_OWNERS_ENV`)."""
    return f"{first}; if it is gone (its pid now another process's), retry with {GONE_OWNERS_ENV}={owner}"


def _elsewhere(pid: str, start: str) -> bool:
    """Whether a process started at ``start`` has pid ``pid`` in a pid namespace nested under
    this one (its innermost ``NSpid``): the owner ran inside ``unshare -p`` and still runs."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return False
    for entry in entries:
        if _start_time(entry) != start:
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("NSpid:"):
                        if line.split()[-1] == pid:
                            return True
                        break
        except OSError:
            continue
    return False


def seal_row(run_id, stored: dict, last_seq, last_hash, status, error, identity: str) -> None:
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


__all__ = ["RunContext", "DONE", "PARKED", "refuse_forged", "trusted_project", "live_owner", "process_owner", "owner_hint",
           "GONE_OWNERS_ENV", "seal_row"]
