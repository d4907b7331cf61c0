"""The in-memory run store (``--db memory``; benchmarks, ``flowctl test``, throw-away runs).

:class:`MemoryStore` implements :class:`flowctl.store.protocol.Store` in dicts: nothing survives
the process, nothing is sealed (no keyring), and it is no
:class:`~flowctl.store.protocol.QueueStore`: workers, claims and leases need a shared store.
"""
from __future__ import annotations

import hashlib
import json
import marshal
import threading
import time

from flowctl.errors import RunConflict, RunNotFound, StoreError
from flowctl.store.reader import run_facts, run_figures
from flowctl.store.records import FINAL, review_due_at


def _kept(events) -> list:
    """Events as MemoryStore keeps them until they are sealed: tuples ``(seq, ts, type, state,
    attempt, data_json, blob)`` of strings and numbers, the data as its JSON text or (not encoded
    yet) as ``marshal`` bytes in ``blob``. A long run keeps hundreds of thousands of events; nested
    dicts would be walked by every full collection of the cyclic garbage collector (a third of an
    in-memory step at 100,000 steps), tuples of atoms are untracked once the collector has seen them.
    ``events``: dicts (``seq``, ``ts``, ``type``, ``state``, ``attempt``, ``data``, ``data_json``) or
    the tuples :meth:`flowctl.engine.context.RunContext.emit` buffers for a store that seals on read.
    Hashes an event arrives with are not kept: the chain is computed here, when the run is read."""
    out = []
    add = out.append
    for e in events:
        if type(e) is tuple:  # (seq, ts, type, state, attempt, data_json or None, data): RunContext.emit's
            seq, ts, type_, state, attempt, text, data = e
        else:
            seq, ts, type_, state, attempt = e["seq"], e["ts"], e["type"], e.get("state"), e.get("attempt")
            text, data = e.get("data_json"), e.get("data")
        blob = None
        if text is None:
            try:
                blob = marshal.dumps(data)
            except ValueError:  # not plain data after all: encode it now
                from flowctl.store.audit import encode_data

                text = encode_data(data)
        add((seq, ts, type_, state, attempt, text, blob))
    return out


def _chain(events: list, done: int, hashes: list) -> str:
    """Seal ``events[done:]`` (kept events, in ``seq`` order) after ``hashes[-1]`` (or ""): each one's
    hash is appended to ``hashes`` (the event keeps its tuple; an event kept as ``blob`` gets its
    text). The hash is :func:`flowctl.store.audit.event_hash`'s, over the same text (the golden
    record of tests/engine/test_step_golden.py and the audit tests hold it to it); the last hash."""
    from flowctl.store.audit import encode_data

    sha256 = hashlib.sha256
    add = hashes.append
    prev = hashes[-1] if hashes else ""
    for i in range(done, len(events)):
        seq, ts, type_, state, attempt, text, blob = events[i]
        if text is None:
            text = encode_data(marshal.loads(blob))
            events[i] = (seq, ts, type_, state, attempt, text, None)
        prev = sha256(f"{prev}\n{seq}\n{ts!r}\n{type_}\n{state!r}\n{attempt!r}\n{text}".encode("utf-8")).hexdigest()
        add(prev)
    return prev


def _read(e, i: int, hashes: list, run_id) -> dict:
    """Sealed kept event ``e`` (number ``i`` of its run) as the store's readers get it (the keys in
    SqlStore's order)."""
    return {"seq": e[0], "ts": e[1], "type": e[2], "state": e[3], "attempt": e[4], "data_json": e[5],
            "prev_hash": hashes[i - 1] if i else "", "hash": hashes[i], "run_id": run_id, "data": json.loads(e[5])}


class MemoryStore:
    """The store interface in process memory (nothing survives the process). Thread-safe.

    Events are sealed on read: :meth:`commit` keeps the event dicts the engine hands over, and the
    hash chain (with each event's JSON text) is computed the first time the run's events or row are
    read (:func:`flowctl.store.audit.seal`), so a run that nobody reads pays for no encoding or hashing."""

    url = "memory"
    safe_url = "memory"
    seals_on_read = True
    #: nothing outlives the process (see :attr:`flowctl.store.protocol.Store.durable`)
    durable = False

    def __init__(self):
        self._lock = threading.Lock()
        self._defs: dict = {}
        self._runs: dict = {}
        self._events: dict = {}
        self._hashes: dict = {}  # run id -> the hashes of its events sealed so far (event i: hashes[i])
        self._steps: dict = {}
        self._gate: list = []
        from flowctl.store.ledger import MemoryLedger

        self.ledger = MemoryLedger()  # the store-wide ledger of runs (flowctl.store.ledger)

    def close(self) -> None:
        pass

    def keyring(self, *, create: bool = True):
        return None  # nothing leaves the process: nothing to seal

    def rekey(self) -> dict:
        return {"resealed": 0, "current": 0}  # nothing is sealed in memory

    def now(self) -> float:
        """The store's clock: this process's, epoch seconds."""
        return time.time()

    def drop_secrets(self, run_id, expect_seq, fields):
        with self._lock:
            row = self._runs.get(run_id)
            if row is None or row["last_seq"] != expect_seq or row["status"] not in FINAL:
                return False
            row.update(fields)
            return True

    def save_definition(self, digest, files):
        self._defs.setdefault(digest, dict(files))

    def load_definition(self, digest):
        try:
            return dict(self._defs[digest])
        except KeyError:
            raise StoreError(f"definition {digest[:12]} is not in the store") from None

    def create_run(self, run, events, steps=(), *, lease=None):
        run = {k: v for k, v in run.items() if k != "cursor_json"}
        with self._lock:
            self._runs[run["id"]] = dict(run)
            self._events[run["id"]] = _kept(events)  # run_id is added on read
            self._hashes[run["id"]] = []
            self._steps[run["id"]] = {}
            self._put_steps(run["id"], steps)
            self._ledger(run["id"], "start")

    def _ledger(self, run_id, kind) -> None:
        """Append the run's ledger row with its head as it stands (under the lock)."""
        self._seal(run_id)
        row = self._runs[run_id]
        self.ledger.append(run_id, kind, row.get("last_seq") or 0, row.get("last_hash") or "")

    def ledger_runs(self) -> list:
        """``(id, last_seq, last_hash, ended)`` of every run, for :func:`flowctl.store.ledger.verify`."""
        with self._lock:
            for run_id in self._runs:
                self._seal(run_id)
            return [(i, r.get("last_seq") or 0, r.get("last_hash") or "", r["status"] in FINAL)
                    for i, r in self._runs.items()]

    def commit(self, run_id, expect_seq, run, events=(), steps=(), *, fence=None, lease=None, unleased=False):
        if "cursor_json" in run:  # a runner's encoded checkpoint: this store keeps the dict
            run = {k: v for k, v in run.items() if k != "cursor_json"}
        with self._lock:
            current = self._runs[run_id]
            if current["last_seq"] != expect_seq:
                raise RunConflict(f"run {run_id} was advanced by another process; this one stops")
            current.update(run)
            if events:
                self._events[run_id].extend(_kept(events))
            if steps:
                self._put_steps(run_id, steps)
            if run.get("status") in FINAL:
                self._ledger(run_id, "end")
            pause = current.get("pause_requested")
            return None if pause is None else dict(pause)

    def request_pause(self, run_id, request):
        with self._lock:
            row = self._runs.get(run_id)
            if row is None or row["status"] in FINAL:
                return None, False
            if row.get("pause_requested") is None:
                row["pause_requested"] = dict(request, at=time.time())
                return dict(row["pause_requested"]), True
            return dict(row["pause_requested"]), False

    def _seal(self, run_id) -> None:
        """Hash the events committed since the last read (under the lock)."""
        events = self._events.get(run_id)
        hashes = self._hashes.get(run_id)
        if events is None or len(hashes) == len(events):
            return
        self._runs[run_id]["last_hash"] = _chain(events, len(hashes), hashes)

    def _put_steps(self, run_id, steps):
        table = self._steps[run_id]
        for s in steps:
            key = (s["step_no"], s["attempt"])
            table.setdefault(key, {"run_id": run_id}).update(s)

    def get_run(self, run_id, *, exact=False):
        with self._lock:  # fan-out threads add runs while others look them up
            found = self._runs.get(run_id)
            if found is None:
                matches = ([r for k, r in self._runs.items() if k.startswith(run_id)]
                           if len(run_id) >= 4 and not exact else [])
                if len(matches) != 1:
                    raise RunNotFound(f"no run '{run_id}' in memory")
                found = matches[0]
            self._seal(found["id"])
            return json.loads(json.dumps(found))

    def list_runs(self, status=None, flow=None, limit=50, parent_id=None, top_level=False, *, due_by=None):
        with self._lock:
            rows = [r for r in self._runs.values() if (not status or r["status"] == status)
                    and (not flow or r["flow"] == flow) and (not parent_id or r.get("parent_id") == parent_id)
                    and not (top_level and r.get("parent_id")) and (due_by is None or _due(r, due_by))]
            rows.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
            for r in rows[:limit or None]:
                self._seal(r["id"])
            return [dict(r) for r in rows[:limit or None]]

    def stats_rows(self, limit=1000, since=None, flow=None, top_level=True):
        """See :meth:`flowctl.store.protocol.Store.stats_rows`."""
        runs = self._stats_runs(limit, since, flow, top_level)
        return runs, run_facts(self, runs)

    def stats_figures(self, limit=1000, since=None, flow=None, top_level=True):
        """See :meth:`flowctl.store.protocol.Store.stats_figures` (folded from the events: the
        memory store keeps no summaries)."""
        runs = self._stats_runs(limit, since, flow, top_level)
        return runs, run_figures(self, runs)

    def _stats_runs(self, limit, since, flow, top_level) -> list:
        runs = [r for r in self.list_runs(flow=flow, limit=limit, top_level=top_level)
                if since is None or r["created_at"] >= since]
        return [{"id": r["id"], "status": r["status"], "steps": r["steps"], "created_at": r["created_at"],
                 "flow": r["flow"], "last_seq": r["last_seq"]} for r in runs]

    def events(self, run_id):
        with self._lock:
            self._seal(run_id)
            # data as stored: parsed from its JSON text, like SqlStore (a snapshot, not the engine's dict)
            hashes = self._hashes.get(run_id)
            return [_read(e, i, hashes, run_id) for i, e in enumerate(self._events.get(run_id, ()))]

    def events_page(self, run_id, after_seq, limit):
        """At most ``limit`` events with ``seq > after_seq`` (see :func:`flowctl.store.events.iter_events`)."""
        import bisect

        with self._lock:
            self._seal(run_id)
            kept = self._events.get(run_id, ())
            start = bisect.bisect_right(kept, after_seq, key=lambda e: e[0])
            hashes = self._hashes.get(run_id)
            return [_read(kept[i], i, hashes, run_id) for i in range(start, min(start + limit, len(kept)))]

    def steps(self, run_id):
        return [dict(v) for _, v in sorted(self._steps.get(run_id, {}).items())]

    def request_cancel(self, run_id, request):
        return False  # no worker leases in memory: the caller cancels the run itself

    def cancel_requests(self, run_ids):
        return {}

    def nudge(self, run_id):
        with self._lock:
            row = self._runs.get(run_id)
            if row is not None and row["status"] in ("waiting", "running"):
                row["available_at"] = time.time()

    def gate_record(self, entry):
        with self._lock:
            self._gate.append(dict(entry))

    def gate_count(self, column, value, tool, since):
        return sum(1 for g in self._gate if g[column] == value and g["tool"] == tool and g["at"] >= since)

    def gate_seen(self, run_id, tool, digest, since):
        return any(g["run_id"] == run_id and g["tool"] == tool and g["digest"] == digest and g["at"] >= since
                   for g in self._gate)

    gate_hook = None

    def gate_admit(self, tools, limits, entry=None):
        from flowctl.store.counters import admit_memory

        with self._lock:
            return admit_memory(self, tools, limits, entry)


def _due(row: dict, by: float) -> bool:
    """The row's due time (``available_at``, or for a paused review the time its cursor gives) is
    ``<= by``."""
    at = row.get("available_at")
    if at is None and row.get("status") == "paused":
        at = review_due_at((row.get("cursor") or {}).get("pending") or {})
    return at is not None and at <= by
