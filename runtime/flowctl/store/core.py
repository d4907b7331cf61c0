"""The SQL run store: runs, their checkpoints, audit events, step records, definition snapshots.

Backed by SQLAlchemy 2.x Core: SQLite (the default, ``.flowctl/flowctl.db``, WAL,
``synchronous=NORMAL``, writers serialised with ``BEGIN IMMEDIATE``) or PostgreSQL
(``postgresql://…``, driven by psycopg 3). :class:`~flowctl.store.memory.MemoryStore` keeps the
same interface in dicts (:class:`flowctl.store.protocol.Store` describes both). An existing
SQLite store at this schema opens in *direct* mode (:mod:`flowctl.store.direct`): the reads and
writes of a run on ``sqlite3`` alone, SQLAlchemy built (:meth:`SqlStore._open_sa`) on the first
use of anything else; ``engine`` is then a :class:`~flowctl.store.direct.LiteEngine` until it is.

Shapes (all JSON columns hold text written by :func:`flowctl.store.audit.canonical`):

* run: ``{id, flow, flow_version, digest, parent_id, status, input, params, output, error,
  cursor, created_at, updated_at, available_at, owner, last_seq, last_hash, steps, queue,
  priority, lease_until, fence, cancel_requested, seal, pause_requested}``; times are epoch **seconds**; ``status`` one of
  :data:`~flowctl.store.records.STATUSES`. ``available_at`` is when a queued, waiting or paused
  run is due (a paused review's reminder or deadline); ``lease_until`` (database clock) and
  ``fence`` belong to worker leases.
* event: ``{run_id, seq, ts, type, state, attempt, data, prev_hash, hash, fence}`` (see
  :mod:`flowctl.store.audit`; ``fence`` is the token of the commit that wrote it, not hashed);
  stored one row per commit (schema 7: a packed row, ``n_events`` events in it) or, as older
  stores hold them, one row per event.
* step: ``{run_id, step_no, attempt, state, tool, idempotency_key, status, input, output,
  started_at, finished_at}``; ``status`` is ``started``, ``succeeded`` or ``failed``. A side
  effecting step's ``started`` row is committed before the tool is invoked.

:meth:`SqlStore.commit` is the one write path of a running run: it inserts events and step rows
and updates the run row in one transaction (for a step without step rows, one statement on the
DBAPI connection: :mod:`flowctl.store.hot`), conditioned on the run's ``last_seq`` (optimistic
fencing): if another process advanced the run, nothing is written and :class:`RunConflict` is
raised. A worker (:mod:`flowctl.workers.worker`) also passes its fencing token: the update then also
requires ``fence = token AND lease_until >= now`` (database clock), so a worker whose lease
expired or was taken over writes nothing and gets :class:`~flowctl.store.records.LeaseLost`. A
writer without a token (``flowctl run``, ``resume``, ``cancel``) is refused while a worker's lease
is live, and clears an expired one (it takes the run over). The schema version lives in
``flowctl_meta``; an older store is upgraded in place (:func:`flowctl.store.tables.upgrade`).

Claims and leases: :mod:`flowctl.store.queue`; history queries (listing, stats, due reviews):
:mod:`flowctl.store.history`.
"""
from __future__ import annotations

import contextlib
import json
import threading

from flowctl.errors import RunConflict, RunNotFound, StoreError
from flowctl.store.direct import RunUpdate, run_insert
from flowctl.store.history import HistoryMethods
from flowctl.store.ledger import sa_append
from flowctl.store.pauses import PauseMethods
from flowctl.store.queue import QueueMethods
from flowctl.errors import first_line
from flowctl.store.summary import Tally, write_summary
from flowctl.store.records import (EVENT_ROW, FINAL, JSON_RUN, JSON_STEP, SEALED_PREFIX, LeaseLost, check_run_id,
                                   dump_run_field, dumps, event_rows, loads, prefix_bounds, review_due, run_dict, step_row)
from flowctl.store.url import safe_url

#: The schema this flowctl writes (``flowctl_meta.schema_version``); see :mod:`flowctl.store.tables`.
SCHEMA_VERSION = 12


_OPENING = threading.Lock()
#: SqlStore attributes that exist once SQLAlchemy is open (:meth:`SqlStore._open_sa`)
_SA_ATTRS = frozenset({"sa", "t", "now_expr", "_update_run", "_update_free", "_update_free_keep",
                       "_update_fenced_keep", "_update_fenced", "_update_fenced_end"})


class SqlStore(QueueMethods, HistoryMethods, PauseMethods):
    def __init__(self, url: str, *, pool_size: int | None = None):
        self.url = url
        self.safe_url = safe_url(url)
        self._saved: set = set()  # definition digests known to be in the store
        self._pool_size = pool_size
        self.pg = not url.startswith("sqlite")
        #: run id -> parent id of the runs this store created or read: a run known to be top-level
        #: ends through the one-statement commit (it has no parent to wake)
        self._parents: dict = {}
        self._returning: dict = {}  # run UPDATE -> the same with RETURNING pause_requested (SQLAlchemy path)
        #: the facts of the events this store wrote per run: the commit ending a run writes its
        #: summary from them, in its own transaction (flowctl.store.summary)
        self._tally = Tally()
        self._reader = self._direct = None
        from flowctl.store.hot import HotPath

        if not self.pg:
            from flowctl.store.direct import open_direct

            opened = open_direct(self, url, SCHEMA_VERSION)
            if opened is not None:  # at this schema: SQLAlchemy loads only if a rarer write needs it
                self._reader, self._direct, self.engine = opened
                self._use_direct_statements()
                self.hot = HotPath(self)
                return
        self._open_sa()
        # the per-step commit without SQLAlchemy (an in-memory SQLite database exists only on the
        # pool's one connection, so it keeps the Core path)
        self.hot = None if url in ("sqlite://", "sqlite:///:memory:") else HotPath(self)
        try:
            self._migrate()
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - connection refused and the like
            raise StoreError(f"cannot open store {safe_url(url)}: {first_line(exc)}") from None

    @property
    def direct(self) -> bool:
        """Whether this store was opened without SQLAlchemy (:mod:`flowctl.store.direct`)."""
        return self._direct is not None

    def __getattr__(self, name):
        if name in _SA_ATTRS and self.__dict__.get("_direct") is not None:
            self._open_sa()  # a direct-mode store's first use of SQLAlchemy
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _use_direct_statements(self) -> None:
        for kind in ("plain", "free", "free_keep", "fenced_keep", "fenced", "fenced_end"):
            self.__dict__["_update_" + ("run" if kind == "plain" else kind)] = RunUpdate(kind)

    def _open_sa(self):
        """Build the SQLAlchemy engine and statements (on open; in direct mode on first need).
        Returns the engine."""
        if "sa" in self.__dict__:
            return self.engine
        with _OPENING:  # one thread builds it (a worker's threads may all need it at once)
            if "sa" in self.__dict__:
                return self.engine
            return self._build_sa()

    def _build_sa(self):
        import sqlalchemy as sa

        from flowctl.store import tables as t

        url, pool_size = self.url, self._pool_size
        kwargs = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        if pool_size and url not in ("sqlite://", "sqlite:///:memory:"):
            kwargs.update(pool_size=pool_size, max_overflow=max(10, pool_size))
        try:
            engine = sa.create_engine(url, **kwargs)
        except Exception as exc:  # noqa: BLE001 - bad URL, missing driver
            raise StoreError(f"cannot open store {safe_url(url)}: {exc}",
                             hint="use sqlite:///path.db or postgresql://user@host/db") from None
        if url.startswith("sqlite"):
            _sqlite_pragmas(engine, sa)
        # The database clock, in epoch seconds: the only clock leases are measured with.
        if self.pg:
            now = sa.cast(sa.extract("epoch", sa.func.now()), sa.Float)
        else:
            now = (sa.func.julianday("now") - 2440587.5) * 86400.0
        r = t.runs
        # Built once: the SET columns come from each call's parameters (compiled form cached per set).
        base = r.update().where(r.c.id == sa.bindparam("b_id"), r.c.last_seq == sa.bindparam("b_expect"))
        #: no token: refused while a worker's lease is live; takes over (clears) an expired one
        free = base.where(sa.or_(r.c.lease_until.is_(None), r.c.lease_until < now))
        fenced = base.where(r.c.fence == sa.bindparam("b_fence"), r.c.lease_until >= now)
        self.__dict__.update(
            now_expr=now, t=t, engine=engine,
            _update_run=base,  # MemoryStore-compatible plain form (kept for callers that use it)
            _update_free=free.values(lease_until=None),
            #: the same, for a writer whose previous commit cleared the lease (``unleased``): it is NULL
            #: and stays so (a column not in SET is not written, nor its index entry)
            _update_free_keep=free,
            _update_fenced_keep=fenced,
            #: a worker's token, the run stays running: the lease is extended as a heartbeat would
            _update_fenced=fenced.values(lease_until=now + sa.bindparam("b_lease", type_=sa.Float)),
            #: a worker's token, the run parks or ends: the lease is released in the same statement
            _update_fenced_end=fenced.values(lease_until=None))
        self.sa = sa  # last: "sa" present means everything above is
        return engine

    def _read(self):
        """A connection for reads only (``with store._read() as conn``). On SQLite its transaction
        starts with a plain ``BEGIN``, a read snapshot: every other transaction takes the write lock
        with ``BEGIN IMMEDIATE``, and a read that took it too made every writer of every process
        (a worker's step, the gate's check) wait while it read. Nothing may be written on it."""
        return self.engine.connect().execution_options(flowctl_read=True)

    @contextlib.contextmanager
    def _begin(self):
        """``engine.begin()``, with the database's own failures (locked, full, disconnected, a
        trigger refusing) raised as :class:`StoreError`: the transaction rolled back, nothing kept."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except self.sa.exc.DBAPIError as exc:
            cause = getattr(exc, "orig", None) or exc
            raise StoreError(f"cannot write to {self.safe_url}: {type(cause).__name__}: {first_line(cause)}",
                             hint="nothing of this write was kept; resume the run when the store is back") from None

    # --------------------------------------------------------------------- schema
    def _migrate(self) -> None:
        sa, t = self.sa, self.t
        try:  # the common case: an up-to-date store; one read, no DDL
            with self.engine.connect() as conn:
                row = conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")).first()
            if row is not None and int(row[0]) == SCHEMA_VERSION:
                return
        except sa.exc.DBAPIError:
            pass  # no tables yet
        with self.engine.begin() as conn:
            if self.pg:  # one upgrader at a time (workers starting together on an old store)
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(7466135)"))
            t.metadata.create_all(conn, checkfirst=True)
            row = conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")).first()
            if row is None:
                conn.execute(t.meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
                t.schema_11(conn)  # the ledger's head row (flowctl.store.ledger)
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreError(f"the store was written by a newer flowctl (schema {row[0]}, this one knows {SCHEMA_VERSION})",
                                 hint="upgrade flowctl")
            elif int(row[0]) < SCHEMA_VERSION:
                t.upgrade(conn, int(row[0]))
                conn.execute(t.meta.update().where(t.meta.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))

    #: runs outlive the process (see :attr:`flowctl.store.protocol.Store.durable`)
    durable = True

    def close(self) -> None:
        if self.hot is not None:
            self.hot.close()
        if self._direct is not None:
            self._direct.close()
            self._reader.close()
        engine = self.__dict__.get("engine")
        if engine is not None:
            engine.dispose()

    # --------------------------------------------------------------------- secrets (flowctl.engine.sensitive)
    def keyring(self, *, create: bool = True):
        """The :class:`~flowctl.store.keyring.Keyring` sealing this store's sensitive runs (resolved once).
        ``create=False`` (opening what is stored): never generate a SQLite key file. Raises
        :class:`~flowctl.errors.SecretKeyError`."""
        found = getattr(self, "_keyring", None)
        if found is None:
            from flowctl.store.keyring import keyring_for

            found = self._keyring = keyring_for(self.url, create=create)
        return found

    def drop_secrets(self, run_id: str, expect_seq: int, fields: dict) -> bool:
        """Overwrite a finished run's ``fields`` (input, params, cursor, output) with their redacted
        form, if it is still at ``expect_seq``. True if written."""
        r = self.t.runs
        values = {k: (dump_run_field(k, v) if k in JSON_RUN else v) for k, v in fields.items()}
        with self._begin() as conn:
            res = conn.execute(r.update().where(r.c.id == run_id, r.c.last_seq == expect_seq,
                                                r.c.status.in_(tuple(FINAL))).values(**values))
            return res.rowcount == 1

    def rekey(self) -> dict:
        """Re-seal every sealed run field under the first key (key rotation); each row is updated
        only if unchanged since read, so a live run's own commits win. Returns ``{"resealed": n,
        "current": m}`` (``current``: already under the first key)."""
        sa, r = self.sa, self.t.runs
        ring = self.keyring()
        cols = ("input", "params", "cursor", "output")
        done = current = 0
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(r.c.id, *[r.c[c] for c in cols]).where(
                sa.or_(*[r.c[c].startswith(SEALED_PREFIX) for c in cols]))).all()
        for row in rows:
            run_id = row[0]
            for col, text in zip(cols, row[1:]):
                if not text or not text.startswith(SEALED_PREFIX):
                    continue
                if not ring.needs_rotation(text):
                    current += 1
                    continue
                aad = f"{run_id}/{col}"
                fresh = ring.seal(ring.open(text, aad), aad)
                with self._begin() as conn:
                    done += conn.execute(r.update().where(r.c.id == run_id, r.c[col] == text)
                                         .values(**{col: fresh})).rowcount
        return {"resealed": done, "current": current}

    # --------------------------------------------------------------------- definitions
    def save_definition(self, digest: str, files: dict) -> None:
        """Keep the definition snapshot ``digest`` (content-addressed: written once, never changed)."""
        if digest in self._saved:  # this store saved or found it already: snapshots are immutable
            return
        if self._direct is not None:
            self._direct.save_definition(digest, lambda: json.dumps(
                {k: v.decode("utf-8", "surrogateescape") for k, v in files.items()}, sort_keys=True))
            self._saved.add(digest)
            return
        sa, t = self.sa, self.t
        with self._begin() as conn:
            if conn.execute(sa.select(t.definitions.c.digest).where(t.definitions.c.digest == digest)).first() is None:
                # built only when missing: a big project's snapshot is megabytes of JSON
                blob = json.dumps({k: v.decode("utf-8", "surrogateescape") for k, v in files.items()}, sort_keys=True)
                conn.execute(t.definitions.insert().values(digest=digest, files=blob))
        self._saved.add(digest)

    def load_definition(self, digest: str) -> dict:
        if self._reader is not None:
            return self._reader.load_definition(digest)
        sa, t = self.sa, self.t
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.definitions.c.files).where(t.definitions.c.digest == digest)).first()
        if row is None:
            raise StoreError(f"definition {digest[:12]} is not in the store")
        return {k: v.encode("utf-8", "surrogateescape") for k, v in json.loads(row[0]).items()}

    # --------------------------------------------------------------------- runs
    def create_run(self, run: dict, events: list, steps: list = (), *, lease: float | None = None) -> int:
        """Insert a run with its first events. A ``queued`` run without ``available_at`` is due now
        (database clock) and wakes listening workers (PostgreSQL NOTIFY). ``lease`` (seconds): the
        run starts leased by ``run["owner"]`` (fence 1), as a worker creating a child run does.
        Returns the run's fencing token."""
        row = {k: (dumps(v) if k in JSON_RUN else v) for k, v in run.items() if k != "cursor_json"}
        if run.get("cursor_json") is not None:  # the text the run's seal covers
            row["cursor"] = run["cursor_json"]
        fence = 0
        if lease is not None:
            fence = row["fence"] = 1
        self._note_parent(run)
        if not steps and not self.pg and self.hot is not None and _plain(row):  # (a value may be SQL: now_expr + delay)
            # the same rows on the per-step commit's connections: grouped with the commits in flight
            self.hot.write(run_insert(row, run["id"], events, lease))
            self._tally.started(run["id"], events)
            return fence
        sa, t = self.sa, self.t
        if lease is not None:
            row["lease_until"] = self.now_expr + sa.literal(float(lease), sa.Float)
        if row.get("status") == "queued" and row.get("available_at") is None:
            row["available_at"] = self.now_expr
        plain = lease is None and row.get("status") != "queued"  # no value is SQL (the database clock)
        with self._begin() as conn:
            # plain values as parameters: the compiled INSERT is reused (``.values()`` compiles each time)
            conn.execute(t.runs.insert(), row) if plain else conn.execute(t.runs.insert().values(**row))
            self._insert(conn, run["id"], events, steps, fence or None)
            sa_append(conn, self.pg, run["id"], "start")  # the ledger of runs, same transaction
            if row.get("status") == "queued":
                self._notify(conn, row.get("queue") or "default")
        self._tally.started(run["id"], events)
        return fence

    def commit(self, run_id: str, expect_seq: int, run: dict, events: list = (), steps: list = (), *,
               fence: int | None = None, lease: float | None = None, unleased: bool = False) -> dict | None:
        """Append ``events``, upsert ``steps``, update the run row — one transaction, or nothing.
        Returns the run's pause request (``{by, reason, at}``, :mod:`flowctl.engine.pause`) as the
        update left it, or None: the UPDATE's own ``RETURNING``, no read of its own.

        Always conditioned on ``last_seq == expect_seq``. With ``fence`` (a worker's token) also on
        ``fence`` and a live lease (database clock); the lease is extended by ``lease`` seconds
        while the run stays running and released when it parks or ends. Without ``fence`` the run
        must not be leased by a live worker, and an expired lease is cleared (the run is taken over)
        unless the caller knows there is none (``unleased``: its previous commit cleared it).
        ``run`` may carry ``cursor_json``, the checkpoint already encoded (the text its ``seal`` covers):
        it is written as is instead of encoding ``cursor`` again.
        Raises :class:`LeaseLost` / :class:`RunConflict`, :class:`StoreError` when the database fails."""
        if self.hot is not None:  # a cancel request an earlier end of this run returned no longer stands
            self.hot.forget_end(run_id)
        text = run.get("cursor_json")  # the checkpoint encoded once by the runner, and sealed (audit.run_seal)
        if text is None:
            row = {k: (dump_run_field(k, v) if k in JSON_RUN else v) for k, v in run.items()}
        else:
            row = {k: (dumps(v) if k in JSON_RUN else v) for k, v in run.items() if k not in ("cursor", "cursor_json")}
            row["cursor"] = text
        due = review_due(run)
        if due is not None:
            row["available_at"] = due
        if fence is None:
            stmt = self._update_free_keep if unleased and "status" not in run else self._update_free
            params = dict(row, b_id=run_id, b_expect=expect_seq)
        elif run.get("status") not in (None, "running"):
            stmt, params = self._update_fenced_end, dict(row, b_id=run_id, b_expect=expect_seq, b_fence=fence)
        elif not lease:
            stmt, params = self._update_fenced_keep, dict(row, b_id=run_id, b_expect=expect_seq, b_fence=fence)
        else:
            stmt = self._update_fenced
            params = dict(row, b_id=run_id, b_expect=expect_seq, b_fence=fence, b_lease=float(lease))
        # a run that ends wakes a waiting parent in the same transaction (_wake_parent); one this
        # store knows to be top-level has none, and ends through the one-statement commit (on
        # SQLite the per-step commit wakes the parent itself, one more statement in its transaction)
        final = run.get("status") in FINAL  # its ledger row and summary are written in the same transaction
        ended = final and self._parents.pop(run_id, "?") is not None
        summary = self._tally.ending(run_id, expect_seq, events) if final else None
        if (not (steps and self.pg) and not (ended and self.pg) and self.hot is not None
                and len(events) <= self.hot.max_events):  # the common step (store_hot.py)
            done = self.hot.commit(stmt, params, event_rows(run_id, events, fence), ledger=run_id if final else None,
                                   wake=ended, summary=summary, steps=[step_row(run_id, s) for s in steps])
            if not done:
                with self.engine.connect() as conn:
                    raise self._conflict(conn, run_id, fence)
            if not final:
                self._tally.written(run_id, expect_seq, events)
            return None if done is True else loads(done)
        if stmt.__class__ is RunUpdate:  # chosen in direct mode: this write needs SQLAlchemy's form of it
            self._open_sa()
            stmt = getattr(self, "_update_" + ("run" if stmt.kind == "plain" else stmt.kind))
        returning = self._returning.get(stmt)
        if returning is None:
            returning = self._returning[stmt] = stmt.returning(self.t.runs.c.pause_requested)
        with self._begin() as conn:
            found = conn.execute(returning, params).all()
            if len(found) != 1:
                raise self._conflict(conn, run_id, fence)
            self._insert(conn, run_id, events, steps, fence)
            if ended:  # the parent's row before the ledger's head: the order every run's end takes
                self._wake_parent(conn, run_id)  # (the parent's own end holds its row, then the head)
            if final:
                sa_append(conn, self.pg, run_id, "end")
                write_summary(conn.exec_driver_sql, self.pg, run_id, *summary)
        if not final:
            self._tally.written(run_id, expect_seq, events)
        return loads(found[0][0])

    def _conflict(self, conn, run_id: str, fence: int | None) -> RunConflict:
        """Why a conditioned update matched no row, as the error to raise."""
        sa, t = self.sa, self.t
        r = t.runs
        found = conn.execute(sa.select(r.c.owner, r.c.fence, r.c.lease_until, r.c.status, self.now_expr)
                             .where(r.c.id == run_id)).first()
        if found is None:
            return RunNotFound(f"no run '{run_id}' in {safe_url(self.url)}")
        owner, current, lease_until, status, now = found
        if fence is not None:
            if current != fence:
                why = f"run {run_id} was claimed by {owner or 'another process'} (fence {current}, ours {fence})"
            elif lease_until is None or lease_until < now:
                why = f"the lease on run {run_id} (fence {fence}) expired"
            else:
                why = f"run {run_id} was advanced by another writer"
            return LeaseLost(why + "; this worker wrote nothing and stops driving it",
                             hint="a worker that misses heartbeats longer than its lease loses its runs")
        if lease_until is not None and lease_until >= now and status == "running":
            return RunConflict(f"run {run_id} is leased by worker {owner} for {lease_until - now:.1f}s more; "
                               "this process wrote nothing",
                               hint="let the worker finish it; a stopped worker's lease expires on its own")
        return RunConflict(f"run {run_id} was advanced by another process; this one stops",
                           hint="see flowctl trace " + run_id)

    def _insert(self, conn, run_id, events, steps, fence=None):
        sa, t = self.sa, self.t
        if events:
            conn.execute(t.events.insert(), [dict(zip(EVENT_ROW, row)) for row in event_rows(run_id, events, fence)])
        for s in steps:
            s = step_row(run_id, s)
            key = (t.steps.c.run_id == run_id, t.steps.c.step_no == s["step_no"], t.steps.c.attempt == s["attempt"])
            if conn.execute(sa.select(t.steps.c.status).where(*key)).first() is None:
                conn.execute(t.steps.insert().values(**s))
            else:
                conn.execute(t.steps.update().where(*key).values(**s))

    def get_run(self, run_id: str, *, exact: bool = False) -> dict:
        """The run with this id, or (unless ``exact``) with this unique id prefix. Raises
        :class:`RunNotFound`."""
        if self._reader is not None:
            found = self._reader.get_run(run_id, exact=exact)
            self._note_parent(found)
            return found
        sa, t = self.sa, self.t
        check_run_id(run_id)
        with self._read() as conn:
            row = conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id)).mappings().first()
            if row is None and len(run_id) >= 4 and not exact:
                rows = conn.execute(sa.select(t.runs).where(*self._id_range(run_id))
                                    .order_by(self._id_order()).limit(2)).mappings().all()
                if len(rows) == 1:
                    row = rows[0]
                elif len(rows) > 1:
                    raise RunNotFound(f"run id prefix '{run_id}' matches several runs",
                                      hint="give more characters: " + ", ".join(r["id"] for r in rows))
        if row is None:
            raise RunNotFound(f"no run '{run_id}' in {safe_url(self.url)}", hint="list runs with: flowctl runs")
        found = run_dict(row, self)
        self._note_parent(found)
        return found

    def _note_parent(self, run: dict) -> None:
        """Remember ``run``'s parent id (None: a top-level run) for :meth:`commit`."""
        if len(self._parents) > 100_000:  # a long-lived worker: forget, the slower path is as correct
            self._parents.clear()
        self._parents[run["id"]] = run.get("parent_id")

    def list_runs(self, status: str | None = None, flow: str | None = None, limit: int = 50,
                  parent_id: str | None = None, top_level: bool = False, *, due_by: float | None = None) -> list:
        """See :meth:`flowctl.store.history.HistoryMethods.list_runs` (in direct mode, the same
        query through :class:`~flowctl.store.reader.SqlReader`)."""
        if self._reader is not None:
            return self._reader.list_runs(status, flow, limit, parent_id, top_level, due_by=due_by)
        return super().list_runs(status, flow, limit, parent_id, top_level, due_by=due_by)

    def _id_order(self):
        """Run ids in code-point order: binary on SQLite; ``COLLATE "C"`` on PostgreSQL, whatever the
        database's collation (served by the index ``ix_flowctl_runs_id_c``)."""
        return self.t.runs.c.id.collate("C") if self.pg else self.t.runs.c.id

    def _id_range(self, prefix: str) -> tuple:
        """WHERE terms for the ids starting with ``prefix``: an index range (see :func:`prefix_bounds`)."""
        low, high = prefix_bounds(prefix)
        col = self._id_order()
        return col >= low, col < high

    def events(self, run_id: str) -> list:
        """The run's events in ``seq`` order, packed rows unpacked (:meth:`events_page`, batch by batch)."""
        from flowctl.store.events import iter_events

        return list(iter_events(self, run_id))

    def steps(self, run_id: str) -> list:
        sa, t = self.sa, self.t
        with self._read() as conn:
            rows = conn.execute(sa.select(t.steps).where(t.steps.c.run_id == run_id)
                                .order_by(t.steps.c.step_no, t.steps.c.attempt)).mappings()
            return [{k: (loads(v) if k in JSON_STEP else v) for k, v in r.items()} for r in rows]

    # --------------------------------------------------------------------- policy gate counters
    def gate_record(self, entry: dict) -> None:
        with self._begin() as conn:
            conn.execute(self.t.gate_log.insert().values(**entry))

    def gate_count(self, column: str, value: str, tool: str, since: float) -> int:
        sa, t = self.sa, self.t
        q = sa.select(sa.func.count()).select_from(t.gate_log).where(
            t.gate_log.c[column] == value, t.gate_log.c.tool == tool, t.gate_log.c.at >= since)
        with self.engine.connect() as conn:
            return conn.execute(q).scalar_one()

    def gate_seen(self, run_id: str, tool: str, digest: str, since: float) -> bool:
        sa, t = self.sa, self.t
        q = sa.select(t.gate_log.c.id).where(t.gate_log.c.run_id == run_id, t.gate_log.c.tool == tool,
                                              t.gate_log.c.digest == digest, t.gate_log.c.at >= since).limit(1)
        with self.engine.connect() as conn:
            return conn.execute(q).first() is not None

    #: Called (no arguments) inside :meth:`gate_admit`'s transaction between counting and recording:
    #: tests inject another process's decision there. ``None`` in production.
    gate_hook = None

    def gate_admit(self, tools, limits, entry: dict | None = None):
        """Count and record one gated call as one atomic step (see :func:`flowctl.store.counters.admit`)."""
        from flowctl.store.counters import admit_sql

        with self._begin() as conn:
            return admit_sql(self, conn, tools, limits, entry)


def _plain(row: dict) -> bool:
    """Whether every value of ``row`` is a plain parameter (no SQL expression such as the database clock)."""
    return all(v is None or v.__class__ in (str, int, float, bool) for v in row.values())


def _sqlite_pragmas(engine, sa) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn):
        if conn.get_execution_options().get("flowctl_read"):  # SqlStore._read: a snapshot, no write lock
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # take the write lock up front: no upgrade deadlocks
