"""The service log of ``flowctl serve``: every gate decision and every refused request, with who asked.

One append-only row per record, numbered per *session* (the caller's session or trace id): ``seq``
1, 2, 3 … is the causal order of that session's records, and each row carries ``hash =
sha256(prev_hash \\n session \\n seq \\n canonical(record))`` with the previous row's hash
(``""`` for the first), so a deleted, reordered or edited row breaks the chain
(:meth:`ServiceLog.verify`). Refused requests (401, 403, 429) are recorded in the session
``access``: every 403 of a recognised key (``caller`` names it), but a request *without* a live
key (401), and one past its key's rate (429, ``caller`` named), is counted by :class:`Refusals` —
per remote address, reason, method and route (the path's template), per window (default one
minute), in memory between flushes — so that sending requests faster than they are served cannot
grow the store by a row each: the first such refusal of a
window is written at once, the rest of the window as one ``access_denied`` row with ``data.count``
(how many more) and ``data.paths`` (to how many distinct paths) when the window has passed (at the
next refusal, by a timer when none follows, or :meth:`Refusals.flush` when the server stops).

A record: ``{session, seq, at, caller, kind, tool, digest, outcome, policy, rule, reason, data,
prev_hash, hash}``; ``at`` epoch seconds; ``kind`` one of ``gate_check``, ``access_denied``,
``run_submitted``, ``run_cancelled``, ``review_decided``; ``caller`` the API key's name ('' when no
key was presented or it was not recognised); ``digest`` the tool input's sha256 (the input itself is
never kept: it may hold secrets). Storage: ``flowctl_service_log`` in the SQL run store (created on
first use, no schema version needed), or a list on a memory store.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time

from flowctl.errors import StoreError, first_line
from flowctl.store.audit import canonical
from flowctl.store.compiled import cached, cursor_of


FIELDS = ("at", "caller", "kind", "tool", "digest", "outcome", "policy", "rule", "reason", "data")


def record_hash(prev_hash: str, session: str, seq: int, record: dict) -> str:
    body = canonical({k: record.get(k) for k in FIELDS})
    return hashlib.sha256(f"{prev_hash}\n{session}\n{seq}\n{body}".encode("utf-8", "surrogatepass")).hexdigest()


def kept(record: dict) -> dict:
    """The :data:`FIELDS` of ``record`` as the log keeps and hashes them: a NUL in a text field as
    JSON writes it (``\\u0000``; PostgreSQL's text cannot hold one, and a refusal's reason quotes
    what the request named, a URL's ``%00`` too). ``data`` is kept as JSON, which escapes it."""
    out = {k: record.get(k) for k in FIELDS}
    for k, v in out.items():
        if isinstance(v, str) and "\x00" in v:
            out[k] = v.replace("\x00", "\\u0000")
    return out


def verify_chain(rows) -> list:
    """Problems of one session's rows in ``seq`` order (empty: intact)."""
    problems, prev, want = [], "", 1
    for r in rows:
        if r["seq"] != want:
            problems.append(f"seq {r['seq']}: expected {want} (a record is missing)")
        if r["prev_hash"] != prev or r["hash"] != record_hash(prev, r["session"], r["seq"], r):
            problems.append(f"seq {r['seq']}: hash does not match (the record was changed)")
        prev, want = r["hash"], r["seq"] + 1
    return problems


class MemoryLog:
    def __init__(self):
        self._rows: dict = {}
        self._lock = threading.Lock()

    def append(self, session: str, record: dict) -> dict:
        with self._lock:
            rows = self._rows.setdefault(session, [])
            seq = len(rows) + 1
            prev = rows[-1]["hash"] if rows else ""
            record = kept(record)
            row = dict(record, session=session, seq=seq, prev_hash=prev, hash=record_hash(prev, session, seq, record))
            rows.append(row)
            return row

    def session(self, session: str) -> list:
        with self._lock:
            return [dict(r) for r in self._rows.get(session, ())]

    def verify(self, session: str) -> list:
        return verify_chain(self.session(session))


_NO_LOCK = contextlib.nullcontext()


def write_lock(store):
    """What this process's service-log writers hold around their write transaction on ``store``:
    one :class:`threading.Lock` per SQLite store object, a no-op context on PostgreSQL.

    SQLite lets one writer in at a time (``BEGIN IMMEDIATE``) and makes the others *poll*: its busy
    handler sleeps 1, 2, 5 … up to 100 ms between tries, so under 8 concurrent gate checks a
    waiting request slept far longer than the write it waited for (p99 216 ms for ~3 ms checks).
    Queued on a lock instead, the next writer starts the moment the previous one commits. Other
    processes still meet SQLite's own lock, which remains what serialises writes."""
    if getattr(store, "pg", False):
        return _NO_LOCK
    found = store.__dict__.get("_service_write_lock")
    if found is None:
        found = store.__dict__.setdefault("_service_write_lock", threading.Lock())  # one, even when racing
    return found


def session_lock_key(session: str) -> int:
    """The signed 64-bit PostgreSQL advisory-lock key an append to ``session`` holds until it commits.

    On PostgreSQL appends commit in parallel (no process-wide write lock): the appends of one session
    all read the same last ``seq`` and all but one lost the insert of the next and retried, so with
    8 concurrent gate checks of one session one in eight ran out of tries (503, not recorded).
    Holding this lock (its own statement, taken before the tail is read: a statement's snapshot is
    taken before its locks are), the next appender reads the tail the previous one committed. An
    append is the last statement of its transaction (after the gate's function lock,
    :func:`flowctl.store.counters.lock_key`), so the two are always taken in that order."""
    raw = hashlib.sha256(("flowctl-service-log\0" + session).encode("utf-8", "surrogatepass")).digest()[:8]
    return int.from_bytes(raw, "big", signed=True)


class SeqTaken(Exception):
    """Another writer took the session's next ``seq`` first (or this process's remembered tail was
    stale): the transaction is to be rolled back and retried. Never reaches a caller of the API:
    the retries (5) are the appenders'."""


#: sessions whose tail a :class:`SqlLog` remembers
MAX_TAILS = 10_000


class SqlLog:
    """The log in ``flowctl_service_log``. Appends take the next ``seq`` of the session in the same
    transaction, queued per session (SQLite: the write lock; PostgreSQL: :func:`session_lock_key`);
    two writers still racing for one number (a stale remembered tail): the loser retries (primary
    key ``(session, seq)``)."""

    def __init__(self, store):
        self.store = store
        self.sa = sa = store.sa
        meta = sa.MetaData()
        self.t = sa.Table("flowctl_service_log", meta,
                          sa.Column("session", sa.String(64), primary_key=True),
                          sa.Column("seq", sa.Integer, primary_key=True),
                          sa.Column("at", sa.Float, nullable=False),
                          sa.Column("caller", sa.String(64), nullable=False),
                          sa.Column("kind", sa.String(32), nullable=False),
                          sa.Column("tool", sa.String(200)),
                          sa.Column("digest", sa.String(64)),
                          sa.Column("outcome", sa.String(16)),
                          sa.Column("policy", sa.Text),
                          sa.Column("rule", sa.Text),
                          sa.Column("reason", sa.Text),
                          sa.Column("data", sa.Text),
                          sa.Column("prev_hash", sa.String(64), nullable=False),
                          sa.Column("hash", sa.String(64), nullable=False))
        with store.engine.begin() as conn:
            meta.create_all(conn, checkfirst=True)
        t = self.t  # built once: a statement made per append cost more than the append
        self._last = (sa.select(t.c.seq, t.c.hash).where(t.c.session == sa.bindparam("s"))
                      .order_by(t.c.seq.desc()).limit(1))
        self._insert = t.insert()
        self._integrity = store.engine.dialect.dbapi.IntegrityError  # the driver's: the INSERT runs on its cursor
        #: session -> (seq, hash) of its last row as this process committed it: an append then
        #: needs no SELECT of the session's tail. Safe when stale (another process appended since):
        #: seqs are dense, so the number after a stale tail is taken and the insert fails on the
        #: primary key, which the caller retries (the entry dropped, the tail read).
        self._tails: dict = {}

    def append(self, session: str, record: dict) -> dict:
        for attempt in range(5):
            try:
                with write_lock(self.store), self.store._begin() as conn:
                    row = self.append_in(conn, session, record)
                self.committed(row)
                return row
            except SeqTaken:
                if attempt == 4:
                    raise StoreError(f"the service log of {self.store.safe_url} kept losing session {session!r}'s "
                                     "next number to another writer (5 tries)") from None
            except self.store.engine.dialect.dbapi.Error as exc:  # the driver's own (append_in runs on its cursor)
                raise StoreError(f"cannot write to {self.store.safe_url}: {type(exc).__name__}: {first_line(exc)}",
                                 hint="nothing of this record was kept") from None
        raise AssertionError("unreachable")

    def append_in(self, conn, session: str, record: dict) -> dict:
        """Append in the caller's transaction ``conn`` (one commit with the caller's other writes);
        then :meth:`committed` once it has committed. Raises :class:`SeqTaken` when another writer
        took the same ``seq``: roll back and retry the transaction."""
        cur = cursor_of(conn)  # the statements on the driver's cursor, compiled once
        if self.store.pg:  # the session's appenders queue (until this commits), not collide: see session_lock_key
            cur.execute("SELECT pg_advisory_xact_lock(%(k)s)", {"k": session_lock_key(session)})
        tail = self._tails.pop(session, None)  # taken (once the lock is held): only committed() puts one back
        if tail is None:
            last = cached(self.store, ("service_log", "last"), lambda: self._last).execute(cur, {"s": session}).fetchone()
            tail = (last[0], last[1]) if last else (0, "")
        seq, prev = tail[0] + 1, tail[1]
        record = kept(record)
        row = dict(record, session=session, seq=seq, prev_hash=prev, hash=record_hash(prev, session, seq, record))
        values = dict(row, data=None if row["data"] is None else json.dumps(row["data"], sort_keys=True))
        insert = cached(self.store, ("service_log", "insert"), lambda: (self._insert, list(values)))
        try:
            insert.execute(cur, values)
        except self._integrity:
            raise SeqTaken(f"{session} #{seq}") from None  # not a DBAPIError: the store's _begin lets it through
        return row

    def committed(self, row: dict) -> None:
        """Remember ``row`` (from :meth:`append_in`) as its session's tail, once the transaction
        that wrote it has committed (never before: a rolled-back row would leave a gap)."""
        if len(self._tails) >= MAX_TAILS:
            self._tails.clear()  # bounded: a forgotten tail costs one SELECT
        self._tails[row["session"]] = (row["seq"], row["hash"])

    def session(self, session: str) -> list:
        sa, t = self.sa, self.t
        with self.store._read() as conn:
            rows = conn.execute(sa.select(t).where(t.c.session == session).order_by(t.c.seq)).mappings().all()
        return [dict(r, data=None if r["data"] is None else json.loads(r["data"])) for r in rows]

    def verify(self, session: str) -> list:
        return verify_chain(self.session(session))


#: distinct request paths told apart per window and group (past it ``data.paths`` is a lower bound)
MAX_PATHS = 256


def _start_timer(delay: float, fn):
    timer = threading.Timer(delay, fn)
    timer.daemon = True  # never keeps a stopping server alive: flush() writes what is left
    timer.start()
    return timer


class Refusals:
    """Unauthenticated refusals, aggregated (see the module): ``Refusals(log, window=60.0,
    clock=time.time, max_keys=1024, timer=…)``. ``note(remote, record)`` takes one refusal of
    ``remote`` (an address) whose ``record`` is the row it would have been (``data``: ``method``,
    ``path`` and ``route``, the path's template such as ``/v1/runs/{run_id}/cancel``); it returns
    the row written, or None when it was only counted.

    Refusals are grouped by ``(remote, reason, method, route)``: a POST to cancel a run is never
    hidden under a GET of the run list. A group's window row keeps the first request's record and
    adds ``count`` (the refusals after the first), ``paths`` (how many distinct paths they went
    to, told apart up to :data:`MAX_PATHS`), ``first_at``, ``last_at`` and ``window_s``. It is
    written when the window has passed: at the next refusal, by a timer (``timer(delay_s, fn)``
    starts one and returns an object with ``cancel()``; a thread by default) so that a window is
    written even when no refusal follows, or by :meth:`flush` when the server stops.

    A record without a ``route`` is grouped under route ``*``. At most ``max_keys`` groups are
    counted apart in a window; past that the others are counted under remote ``*``: memory stays
    bounded, as reasons, methods (one a route does not take is a 405, never a 401) and routes are
    the server's own few."""

    def __init__(self, log, *, window: float = 60.0, clock=time.time, max_keys: int = 1024, timer=_start_timer):
        self.log, self.window, self.clock, self.max_keys, self.timer = log, float(window), clock, max_keys, timer
        self._open: dict = {}  # (remote, reason, method, route) -> {"start", "last", "count", "paths", "record"}
        self._lock = threading.Lock()
        self._pending = None  # the timer armed for the earliest window that counted more than its first

    def note(self, remote: str, record: dict):
        now = self.clock()
        self.flush(now)
        data = record.get("data") or {}
        key = (remote or "", record.get("reason"), data.get("method"), data.get("route") or "*")
        with self._lock:
            entry = self._open.get(key)
            if entry is None and len(self._open) >= self.max_keys:
                key = ("*",) + key[1:]
                entry = self._open.get(key)
            if entry is not None:
                entry["count"] += 1
                entry["last"] = now
                if len(entry["paths"]) < MAX_PATHS:
                    entry["paths"].add(data.get("path"))
                self._arm(now)
                return None
            self._open[key] = {"start": now, "last": now, "count": 0, "paths": {data.get("path")}, "record": record}
        return self.log.append("access", dict(record, data=dict(data, remote=key[0])))

    def _arm(self, now: float) -> None:
        """Start the timer for the earliest counted window, unless one is armed (holding the lock)."""
        if self._pending is not None:
            return
        due = [e["start"] + self.window for e in self._open.values() if e["count"]]
        if due:
            self._pending = self.timer(max(0.0, min(due) - now), self._due)

    def _due(self) -> None:
        with self._lock:
            self._pending = None
        now = self.clock()
        try:
            self.flush(now)
        except Exception:  # noqa: BLE001 - a timer thread has no caller: the store failed (or closed)
            import logging  # only here: off the import path of every command that opens a store

            logging.getLogger("flowctl.store").exception(
                "the service log could not write a window of refusals without a key")
            return
        with self._lock:
            self._arm(now)

    def flush(self, now: float | None = None) -> list:
        """Write the windows that have passed by ``now`` (None: every open window, and the timer is
        stopped); the rows written."""
        with self._lock:
            done = [(k, e) for k, e in self._open.items() if now is None or now - e["start"] >= self.window]
            for k, _ in done:
                del self._open[k]
            if now is None and self._pending is not None:
                self._pending.cancel()
                self._pending = None
        rows = []
        for (remote, *_), e in done:
            if e["count"]:
                data = dict(e["record"].get("data") or {}, remote=remote, count=e["count"], paths=len(e["paths"]),
                            first_at=e["start"], last_at=e["last"], window_s=self.window)
                rows.append(self.log.append("access", dict(e["record"], at=e["last"], data=data)))
        return rows


def log_of(store):
    """The service log of ``store`` (one :class:`MemoryLog` per memory store object)."""
    if getattr(store, "engine", None) is not None and getattr(store, "sa", None) is not None:
        return SqlLog(store)
    found = store.__dict__.get("_service_log")
    if found is None:
        found = store.__dict__["_service_log"] = MemoryLog()
    return found


__all__ = ["MemoryLog", "Refusals", "SeqTaken", "SqlLog", "kept", "log_of", "record_hash", "session_lock_key",
           "verify_chain", "write_lock"]
