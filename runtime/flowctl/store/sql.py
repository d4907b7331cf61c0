"""The run store: runs, their checkpoints, audit events, step records, definition snapshots.

Backed by SQLAlchemy 2.x Core: SQLite (the default, ``.flowctl/flowctl.db``, WAL,
``synchronous=NORMAL``, writers serialised with ``BEGIN IMMEDIATE``) or PostgreSQL
(``postgresql://…``, driven by psycopg 3). :class:`MemoryStore` keeps the same interface in
dicts, for benchmarks and throw-away runs (``--db memory``).

Shapes (all JSON columns hold text written by :func:`flowctl.store.audit.canonical`):

* run: ``{id, flow, flow_version, digest, parent_id, status, input, params, output, error,
  cursor, created_at, updated_at, available_at, owner, last_seq, last_hash, steps, queue,
  priority, lease_until, fence, cancel_requested, seal}``; times are epoch **seconds**; ``status`` one of
  :data:`STATUSES`. ``available_at`` is when a queued, waiting or paused run is due (a paused
  review's deadline); ``lease_until`` (database clock) and ``fence`` belong to worker leases.
* event: ``{run_id, seq, ts, type, state, attempt, data, prev_hash, hash, fence}`` (see
  :mod:`flowctl.store.audit`; ``fence`` is the token of the commit that wrote it, not hashed).
* step: ``{run_id, step_no, attempt, state, tool, idempotency_key, status, input, output,
  started_at, finished_at}``; ``status`` is ``started``, ``succeeded`` or ``failed``. A side
  effecting step's ``started`` row is committed before the tool is invoked.

:meth:`SqlStore.commit` is the one write path of a running run: it inserts events and step rows
and updates the run row in one transaction (for a step without step rows, one statement on the
DBAPI connection: :mod:`flowctl.store.hot`), conditioned on the run's ``last_seq`` (optimistic
fencing): if another process advanced the run, nothing is written and :class:`RunConflict` is
raised. A worker (:mod:`flowctl.workers.worker`) also passes its fencing token: the update then also
requires ``fence = token AND lease_until >= now`` (database clock), so a worker whose lease
expired or was taken over writes nothing and gets :class:`LeaseLost`. A writer without a token
(``flowctl run``, ``resume``, ``cancel``) is refused while a worker's lease is live, and clears an
expired one (it takes the run over). The schema version lives in ``flowctl_meta``; an older store
is upgraded in place.

Leases and claims (:meth:`SqlStore.claim`, :meth:`~SqlStore.renew`, :meth:`~SqlStore.acquire`,
:meth:`~SqlStore.release`) use the database clock only: ``EXTRACT(EPOCH FROM now())`` on
PostgreSQL, ``julianday('now')`` on SQLite.
"""
from __future__ import annotations

import contextlib
import json
import marshal
import os
import threading
import time
from pathlib import Path

from flowctl.errors import LeaseLost, RunConflict, RunNotFound, StoreError  # LeaseLost: re-exported
from flowctl.store.keyring import PREFIX as _SEALED, Sealed

SCHEMA_VERSION = 4
STATUSES = ("queued", "running", "waiting", "paused", "succeeded", "failed", "cancelled")
FINAL = frozenset({"succeeded", "failed", "cancelled"})
DEFAULT_URL = "sqlite:///.flowctl/flowctl.db"
_JSON_RUN = ("input", "params", "output", "error", "cursor", "cancel_requested")
_KEEP = object()
_JSON_STEP = ("input", "output")


def _dumps(v):
    if v.__class__ is Sealed:  # encrypted already (flowctl.store.keyring): stored as it is
        return str(v)
    return None if v is None else json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


_CURSOR = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)  # written every step: no sorting


def _dump_run_field(key, value):
    if value is None:
        return None
    if value.__class__ is Sealed:
        return str(value)
    return _CURSOR.encode(value) if key == "cursor" else _dumps(value)


def _loads(v):
    return None if v is None else json.loads(v)


SCHEMES = ("sqlite:///", "postgresql://", "postgres://", "postgresql+psycopg://", "memory")


def normalise_url(url: str | None, root: Path | None = None) -> str:
    """``None`` -> the default SQLite file under ``root``; ``postgresql://`` -> psycopg 3 driver;
    ``sqlite:///path`` as is; ``memory`` -> the in-memory store. Anything else (a bare word, an
    unsupported scheme) raises :class:`StoreError`: a typo must not become a new empty store."""
    if not url:
        base = Path(root or ".") / ".flowctl" / "flowctl.db"
        return f"sqlite:///{base}"
    if url == "memory":
        return url
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite:///"):
        _refuse_sqlite_memory(url)
        return url
    if url.startswith("postgresql+psycopg://"):
        return url
    raise StoreError(f"unsupported store address {url!r}",
                     hint="use sqlite:///path/to/flowctl.db, postgresql://user@host/db, or memory")


def _refuse_sqlite_memory(url: str) -> None:
    """``sqlite:///`` (no path), ``sqlite:///:memory:`` and SQLite's other in-memory or temporary
    forms keep nothing once the process ends, while every command that takes ``--db`` promises a
    durable record: refused (``--db memory`` says plainly that nothing is kept)."""
    path, _, query = url[len("sqlite:///"):].partition("?")
    if path.strip() in ("", ":memory:") or path.startswith("file::memory:") or "mode=memory" in query:
        raise StoreError(f"{url!r} is an SQLite database in memory, which keeps nothing once the process ends; the run store must keep every run",
                         hint="use sqlite:///path/to/flowctl.db (or --db memory to keep nothing on purpose)")


def open_store(url: str | None = None, root: Path | None = None, *, create: bool = True,
               pool_size: int | None = None):
    """Open the store at ``url`` (see :func:`normalise_url`), creating or upgrading its tables.

    With ``create=False`` (read-only commands: runs, trace, stats …) a SQLite file that does not
    exist is an error instead of a new empty store. A SQLite file is only created in an existing
    folder, except the default ``.flowctl/``. ``pool_size``: connections kept open (a worker
    needs one per concurrent run plus its heartbeat). Raises :class:`StoreError`.
    """
    default = not url
    url = normalise_url(url, root)
    if url == "memory":
        return MemoryStore()
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        if path.name and str(path) != ":memory:":
            if not path.exists() and not create:
                raise StoreError(f"no run store at {path}", hint="no runs yet? start one with: flowctl run FLOW"
                                 if default else "check --db / FLOWCTL_DB")
            if not path.parent.exists():
                if not default:
                    raise StoreError(f"folder {path.parent} does not exist", hint="create it, or fix --db / FLOWCTL_DB")
                path.parent.mkdir(parents=True, exist_ok=True)
    return SqlStore(url, pool_size=pool_size)


class SqlStore:
    def __init__(self, url: str, *, pool_size: int | None = None):
        import sqlalchemy as sa

        from flowctl.store import tables as store_schema

        self.url = url
        self.safe_url = _safe(url)
        self._saved: set = set()  # definition digests known to be in the store
        self.sa = sa
        self.t = t = store_schema
        kwargs = {}
        self.pg = not url.startswith("sqlite")
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        if pool_size and url not in ("sqlite://", "sqlite:///:memory:"):
            kwargs.update(pool_size=pool_size, max_overflow=max(10, pool_size))
        try:
            self.engine = sa.create_engine(url, **kwargs)
        except Exception as exc:  # noqa: BLE001 - bad URL, missing driver
            raise StoreError(f"cannot open store {_safe(url)}: {exc}",
                             hint="use sqlite:///path.db or postgresql://user@host/db") from None
        if url.startswith("sqlite"):
            _sqlite_pragmas(self.engine, sa)
        # The database clock, in epoch seconds: the only clock leases are measured with.
        if self.pg:
            self.now_expr = sa.cast(sa.extract("epoch", sa.func.now()), sa.Float)
        else:
            self.now_expr = (sa.func.julianday("now") - 2440587.5) * 86400.0
        r = t.runs
        # Built once: the SET columns come from each call's parameters (compiled form cached per set).
        base = r.update().where(r.c.id == sa.bindparam("b_id"), r.c.last_seq == sa.bindparam("b_expect"))
        self._update_run = base  # MemoryStore-compatible plain form (kept for callers that use it)
        #: no token: refused while a worker's lease is live; takes over (clears) an expired one
        free = base.where(sa.or_(r.c.lease_until.is_(None), r.c.lease_until < self.now_expr))
        self._update_free = free.values(lease_until=None)
        #: the same, for a writer whose previous commit cleared the lease (``unleased``): it is NULL
        #: and stays so (a column not in SET is not written, nor its index entry)
        self._update_free_keep = free
        fenced = base.where(r.c.fence == sa.bindparam("b_fence"), r.c.lease_until >= self.now_expr)
        self._update_fenced_keep = fenced
        #: a worker's token, the run stays running: the lease is extended as a heartbeat would
        self._update_fenced = fenced.values(lease_until=self.now_expr + sa.bindparam("b_lease", type_=sa.Float))
        #: a worker's token, the run parks or ends: the lease is released in the same statement
        self._update_fenced_end = fenced.values(lease_until=None)
        from flowctl.store.hot import HotPath

        # the per-step commit without SQLAlchemy (an in-memory SQLite database exists only on the
        # pool's one connection, so it keeps the Core path)
        self.hot = None if url in ("sqlite://", "sqlite:///:memory:") else HotPath(self)
        try:
            self._migrate()
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - connection refused and the like
            raise StoreError(f"cannot open store {_safe(url)}: {_first_line(exc)}") from None

    @contextlib.contextmanager
    def _begin(self):
        """``engine.begin()``, with the database's own failures (locked, full, disconnected, a
        trigger refusing) raised as :class:`StoreError`: the transaction rolled back, nothing kept."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except self.sa.exc.DBAPIError as exc:
            cause = getattr(exc, "orig", None) or exc
            raise StoreError(f"cannot write to {self.safe_url}: {type(cause).__name__}: {_first_line(cause)}",
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
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreError(f"the store was written by a newer flowctl (schema {row[0]}, this one knows {SCHEMA_VERSION})",
                                 hint="upgrade flowctl")
            elif int(row[0]) < SCHEMA_VERSION:
                t.upgrade(conn, int(row[0]))
                conn.execute(t.meta.update().where(t.meta.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))

    def close(self) -> None:
        if self.hot is not None:
            self.hot.close()
        self.engine.dispose()

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
        values = {k: (_dump_run_field(k, v) if k in _JSON_RUN else v) for k, v in fields.items()}
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
                sa.or_(*[r.c[c].startswith(_SEALED) for c in cols]))).all()
        for row in rows:
            run_id = row[0]
            for col, text in zip(cols, row[1:]):
                if not text or not text.startswith(_SEALED):
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
        sa, t = self.sa, self.t
        blob = json.dumps({k: v.decode("utf-8", "surrogateescape") for k, v in files.items()}, sort_keys=True)
        with self._begin() as conn:
            if conn.execute(sa.select(t.definitions.c.digest).where(t.definitions.c.digest == digest)).first() is None:
                conn.execute(t.definitions.insert().values(digest=digest, files=blob))
        self._saved.add(digest)

    def load_definition(self, digest: str) -> dict:
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
        sa, t = self.sa, self.t
        row = {k: (_dumps(v) if k in _JSON_RUN else v) for k, v in run.items() if k != "cursor_json"}
        if run.get("cursor_json") is not None:  # the text the run's seal covers
            row["cursor"] = run["cursor_json"]
        fence = 0
        if lease is not None:
            fence = row["fence"] = 1
            row["lease_until"] = self.now_expr + sa.literal(float(lease), sa.Float)
        if row.get("status") == "queued" and row.get("available_at") is None:
            row["available_at"] = self.now_expr
        with self._begin() as conn:
            conn.execute(t.runs.insert().values(**row))
            self._insert(conn, run["id"], events, steps, fence or None)
            if row.get("status") == "queued":
                self._notify(conn, row.get("queue") or "default")
        return fence

    def commit(self, run_id: str, expect_seq: int, run: dict, events: list = (), steps: list = (), *,
               fence: int | None = None, lease: float | None = None, unleased: bool = False) -> None:
        """Append ``events``, upsert ``steps``, update the run row — one transaction, or nothing.

        Always conditioned on ``last_seq == expect_seq``. With ``fence`` (a worker's token) also on
        ``fence`` and a live lease (database clock); the lease is extended by ``lease`` seconds
        while the run stays running and released when it parks or ends. Without ``fence`` the run
        must not be leased by a live worker, and an expired lease is cleared (the run is taken over)
        unless the caller knows there is none (``unleased``: its previous commit cleared it).
        ``run`` may carry ``cursor_json``, the checkpoint already encoded (the text its ``seal`` covers):
        it is written as is instead of encoding ``cursor`` again.
        Raises :class:`LeaseLost` / :class:`RunConflict`, :class:`StoreError` when the database fails."""
        text = run.get("cursor_json")  # the checkpoint encoded once by the runner, and sealed (audit.run_seal)
        if text is None:
            row = {k: (_dump_run_field(k, v) if k in _JSON_RUN else v) for k, v in run.items()}
        else:
            row = {k: (_dumps(v) if k in _JSON_RUN else v) for k, v in run.items() if k not in ("cursor", "cursor_json")}
            row["cursor"] = text
        due = _review_due(run)
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
        ended = run.get("status") in FINAL  # wakes a waiting parent in the same transaction (_wake_parent)
        if not steps and not ended and self.hot is not None and len(events) <= self.hot.max_events:  # the common step (store_hot.py)
            if not self.hot.commit(stmt, params, [(run_id, e["seq"], e["ts"], e["type"], e.get("state"), e.get("attempt"),
                                                   e["data_json"], e["prev_hash"], e["hash"], fence) for e in events]):
                with self.engine.connect() as conn:
                    raise self._conflict(conn, run_id, fence)
            return
        with self._begin() as conn:
            res = conn.execute(stmt, params)
            if res.rowcount != 1:
                raise self._conflict(conn, run_id, fence)
            self._insert(conn, run_id, events, steps, fence)
            if ended:
                self._wake_parent(conn, run_id)

    def _conflict(self, conn, run_id: str, fence: int | None) -> RunConflict:
        """Why a conditioned update matched no row, as the error to raise."""
        sa, t = self.sa, self.t
        r = t.runs
        found = conn.execute(sa.select(r.c.owner, r.c.fence, r.c.lease_until, r.c.status, self.now_expr)
                             .where(r.c.id == run_id)).first()
        if found is None:
            return RunNotFound(f"no run '{run_id}' in {_safe(self.url)}")
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
            conn.execute(t.events.insert(), [_event_row(run_id, e, fence) for e in events])
        for s in steps:
            s = {k: (_dumps(v) if k in _JSON_STEP else v) for k, v in s.items()}
            key = (t.steps.c.run_id == run_id, t.steps.c.step_no == s["step_no"], t.steps.c.attempt == s["attempt"])
            if conn.execute(sa.select(t.steps.c.status).where(*key)).first() is None:
                conn.execute(t.steps.insert().values(run_id=run_id, **s))
            else:
                conn.execute(t.steps.update().where(*key).values(**s))

    def get_run(self, run_id: str, *, exact: bool = False) -> dict:
        """The run with this id, or (unless ``exact``) with this unique id prefix. Raises
        :class:`RunNotFound`."""
        sa, t = self.sa, self.t
        _check_run_id(run_id)
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id)).mappings().first()
            if row is None and len(run_id) >= 4 and not exact:
                rows = conn.execute(sa.select(t.runs).where(t.runs.c.id.startswith(run_id, autoescape=True))
                                    .limit(2)).mappings().all()
                if len(rows) == 1:
                    row = rows[0]
                elif len(rows) > 1:
                    raise RunNotFound(f"run id prefix '{run_id}' matches several runs",
                                      hint="give more characters: " + ", ".join(r["id"] for r in rows))
        if row is None:
            raise RunNotFound(f"no run '{run_id}' in {_safe(self.url)}", hint="list runs with: flowctl runs")
        return _run_dict(row, self)

    def list_runs(self, status: str | None = None, flow: str | None = None, limit: int = 50,
                  parent_id: str | None = None, top_level: bool = False) -> list:
        """Runs, newest first; ``top_level``: only runs that are no other run's child."""
        sa, t = self.sa, self.t
        q = sa.select(t.runs).order_by(t.runs.c.created_at.desc(), t.runs.c.id.desc())
        if top_level:
            q = q.where(t.runs.c.parent_id.is_(None))
        if status:
            q = q.where(t.runs.c.status == status)
        if flow:
            q = q.where(t.runs.c.flow == flow)
        if parent_id:
            q = q.where(t.runs.c.parent_id == parent_id)
        if limit:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            return [_run_dict(r, self) for r in conn.execute(q).mappings()]

    def events(self, run_id: str) -> list:
        sa, t = self.sa, self.t
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.events).where(t.events.c.run_id == run_id).order_by(t.events.c.seq)).mappings()
            return [_event_dict(r) for r in rows]

    def steps(self, run_id: str) -> list:
        sa, t = self.sa, self.t
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.steps).where(t.steps.c.run_id == run_id)
                                .order_by(t.steps.c.step_no, t.steps.c.attempt)).mappings()
            return [{k: (_loads(v) if k in _JSON_STEP else v) for k, v in r.items()} for r in rows]

    # --------------------------------------------------------------------- workers: claims and leases
    NOTIFY_CHANNEL = "flowctl_runs"

    def now(self) -> float:
        """The database clock, epoch seconds."""
        with self.engine.connect() as conn:
            return float(conn.execute(self.sa.select(self.now_expr)).scalar_one())

    def _notify(self, conn, payload: str) -> None:
        if self.pg:
            conn.execute(self.sa.text("SELECT pg_notify(:c, :p)"), {"c": self.NOTIFY_CHANNEL, "p": payload})

    def request_cancel(self, run_id: str, request: dict) -> bool:
        """Ask the worker holding ``run_id`` to cancel it: ``request`` is ``{by, compensate}``, kept
        with the time (database clock) in ``cancel_requested``. True if a live worker lease holds the
        run (that worker cancels it at its next checkpoint); False if none does (cancel it here)."""
        sa, r = self.sa, self.t.runs
        with self._begin() as conn:
            now = float(conn.execute(sa.select(self.now_expr)).scalar_one())
            res = conn.execute(r.update().where(r.c.id == run_id, r.c.status == "running", r.c.lease_until >= now)
                               .values(cancel_requested=_dumps(dict(request, at=now))))
            return res.rowcount == 1

    def cancel_requests(self, run_ids) -> dict:
        """``{run_id: request}`` for those of ``run_ids`` someone asked to cancel (a worker's heartbeat)."""
        if not run_ids:
            return {}
        sa, r = self.sa, self.t.runs
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(r.c.id, r.c.cancel_requested)
                                .where(r.c.id.in_(list(run_ids)), r.c.cancel_requested.is_not(None)))
            return {rid: _loads(text) for rid, text in rows}

    def nudge(self, run_id: str) -> None:
        """Make the waiting (or running) parent ``run_id`` due now (a child of it ended)."""
        with self._begin() as conn:
            self._nudge(conn, run_id)

    def _nudge(self, conn, run_id: str) -> None:
        sa, r = self.sa, self.t.runs
        res = conn.execute(r.update().where(r.c.id == run_id, r.c.status.in_(("waiting", "running")))
                           .values(available_at=self.now_expr))
        if res.rowcount and self.pg:  # wakes the idle workers of the parent's queue
            queue = conn.execute(sa.select(r.c.queue).where(r.c.id == run_id)).scalar_one_or_none()
            self._notify(conn, queue or "default")

    def _wake_parent(self, conn, run_id: str) -> None:
        """``run_id`` ended in this transaction: make its parent due now, in the same transaction, so
        a child's end and its parent's wake-up are one step (no crash can fall between them). A parent
        that is running keeps the due time through its next park (``Runner.park(keep_due=True)``
        leaves the column alone): whether the parent's re-check of its children saw this end or not,
        it is claimed again. (On PostgreSQL the parent's row lock orders this against its park.)"""
        sa, r = self.sa, self.t.runs
        parent = conn.execute(sa.select(r.c.parent_id).where(r.c.id == run_id)).scalar_one_or_none()
        if parent:
            self._nudge(conn, parent)

    def claim(self, owner: str, n: int, lease: float, queues=None) -> list:
        """Take up to ``n`` runs for ``owner``: due runs (``queued``, ``waiting``, ``paused`` with
        ``available_at <= now``) and ``running`` runs whose lease expired, highest ``priority``
        first, within the store's concurrency limits. Each is marked running for ``owner`` with
        ``lease_until = now + lease`` and its fencing token incremented.

        Returns ``[{id, fence, lease_until, prev_status, prev_owner}]``. PostgreSQL: one statement,
        ``FOR UPDATE SKIP LOCKED`` (claimers never wait on each other), after locking the limit rows
        if any exist; SQLite: a conditional update inside ``BEGIN IMMEDIATE`` (one writer at a time).
        """
        if n <= 0:
            return []
        queues = list(queues) if queues else None
        with self._begin() as conn:
            if self.pg:
                return self._claim_pg(conn, owner, n, float(lease), queues)
            return self._claim_sqlite(conn, owner, n, float(lease), queues)

    def _claim_pg(self, conn, owner, n, lease, queues) -> list:
        sa = self.sa
        limited = conn.execute(sa.text("SELECT scope, name FROM flowctl_limits ORDER BY scope, name FOR UPDATE")).all()
        sql = _PG_CLAIM.format(queues="AND r.queue = ANY(:queues)" if queues else "",
                               picked=_PG_PICK_LIMITED if limited else _PG_PICK)
        params = {"owner": owner, "lease": lease, "n": n, "scan": n * 4 if limited else n}
        if queues:
            params["queues"] = queues
        rows = conn.execute(sa.text(sql), params).mappings().all()
        return [dict(r) for r in rows]

    def _claim_sqlite(self, conn, owner, n, lease, queues) -> list:
        sa, t = self.sa, self.t
        r = t.runs
        now = float(conn.execute(sa.select(self.now_expr)).scalar_one())
        due = sa.and_(r.c.status.in_(("queued", "waiting", "paused")), r.c.available_at <= now)
        expired = sa.and_(r.c.status == "running", r.c.lease_until < now)
        q = (sa.select(r.c.id, r.c.status, r.c.owner, r.c.fence, r.c.flow, r.c.queue).where(sa.or_(due, expired))
             .order_by(r.c.priority.desc(), sa.func.coalesce(r.c.available_at, r.c.lease_until), r.c.id))
        if queues:
            q = q.where(r.c.queue.in_(queues))
        limits = {(s_, nm): mx for s_, nm, mx in conn.execute(sa.select(t.limits.c.scope, t.limits.c.name,
                                                                          t.limits.c.max_running))}
        rows = conn.execute(q.limit(n * 4 if limits else n)).all()
        busy = self._busy(conn, now) if limits else {}
        out = []
        for run_id, status, prev_owner, fence, flow, queue in rows:
            if len(out) >= n:
                break
            keys = [("flow", flow), ("queue", queue)]
            if any(k in limits and busy.get(k, 0) >= limits[k] for k in keys):
                continue
            res = conn.execute(r.update().where(r.c.id == run_id, r.c.fence == fence, r.c.status == status)
                               .values(status="running", owner=owner, lease_until=now + lease, fence=fence + 1,
                                       updated_at=now))
            if res.rowcount == 1:
                for k in keys:
                    busy[k] = busy.get(k, 0) + 1
                out.append({"id": run_id, "fence": fence + 1, "lease_until": now + lease,
                            "prev_status": status, "prev_owner": prev_owner})
        return out

    def _busy(self, conn, now) -> dict:
        """Runs held under a live lease, per ``("flow", name)`` and ``("queue", name)``."""
        sa, r = self.sa, self.t.runs
        live = sa.and_(r.c.status == "running", r.c.lease_until >= now)
        busy = {}
        for scope, col in (("flow", r.c.flow), ("queue", r.c.queue)):
            for name, count in conn.execute(sa.select(col, sa.func.count()).where(live).group_by(col)):
                busy[(scope, name)] = count
        return busy

    def acquire(self, run_id: str, expect_seq: int, owner: str, lease: float) -> tuple:
        """Lease one run by id for ``owner`` (a worker continuing a child or parent run in process):
        only if no live lease is held on it and it is at ``expect_seq``. Returns ``(fence,
        parent_id)`` with the new fencing token; raises :class:`RunConflict` otherwise."""
        sa, r = self.sa, self.t.runs
        stmt = (r.update().where(r.c.id == run_id, r.c.last_seq == expect_seq, r.c.status.notin_(tuple(FINAL)),
                                 sa.or_(r.c.lease_until.is_(None), r.c.lease_until < self.now_expr))
                .values(owner=owner, lease_until=self.now_expr + float(lease), fence=r.c.fence + 1)
                .returning(r.c.fence, r.c.parent_id))
        with self._begin() as conn:
            found = conn.execute(stmt).first()
            if found is None:
                raise self._conflict(conn, run_id, None)
        return int(found[0]), found[1]

    def renew(self, owner: str, held: dict, lease: float) -> set:
        """Heartbeat: extend the lease of each ``{run_id: fence}`` still held by ``owner`` (its token
        current, its lease not yet expired). Returns the ids renewed; the others are lost."""
        if not held:
            return set()
        sa, r = self.sa, self.t.runs
        pairs = [(k, v) for k, v in held.items()]
        stmt = (r.update().where(r.c.owner == owner, r.c.status == "running", r.c.lease_until >= self.now_expr,
                                 sa.tuple_(r.c.id, r.c.fence).in_(pairs))
                .values(lease_until=self.now_expr + float(lease)).returning(r.c.id))
        with self._begin() as conn:
            return {row[0] for row in conn.execute(stmt)}

    def release(self, run_id: str, fence: int, *, status: str | None = None, delay: float = 0.0,
                available_at=_KEEP) -> bool:
        """Give a held run back. ``status=None``: it stays running with its lease ending now (plus
        ``delay``), so any worker's claim takes it over from its checkpoint; else it returns to
        ``status`` (a run claimed but not started), due again after ``delay`` seconds, or at
        ``available_at`` (epoch seconds, or None: not due by time)."""
        r = self.t.runs
        if status is None:
            values = {"lease_until": self.now_expr + float(delay)}
        else:
            values = {"status": status, "lease_until": None}
            if available_at is not _KEEP:
                values["available_at"] = available_at
            elif delay:
                values["available_at"] = self.now_expr + float(delay)
        stmt = r.update().where(r.c.id == run_id, r.c.fence == fence, r.c.status == "running").values(**values) \
            .returning(r.c.queue)
        with self._begin() as conn:
            found = conn.execute(stmt).first()
            if found is not None and not delay:
                self._notify(conn, found[0] or "default")
        return found is not None

    def next_due(self, queues=None):
        """Seconds until the next run becomes claimable (a due time or a lease end); None if none."""
        sa, r = self.sa, self.t.runs
        due = sa.select(sa.func.min(r.c.available_at)).where(r.c.status.in_(("queued", "waiting", "paused")))
        lease = sa.select(sa.func.min(r.c.lease_until)).where(r.c.status == "running")
        if queues:
            due, lease = due.where(r.c.queue.in_(list(queues))), lease.where(r.c.queue.in_(list(queues)))
        with self.engine.connect() as conn:
            now = float(conn.execute(sa.select(self.now_expr)).scalar_one())
            times = [conn.execute(due).scalar(), conn.execute(lease).scalar()]
        times = [x for x in times if x is not None]
        return max(0.0, min(times) - now) if times else None

    # --------------------------------------------------------------------- workers: registry and limits
    def register_worker(self, worker_id: str, *, host: str, pid: int, queues, concurrency: int, lease: float) -> None:
        w = self.t.workers
        values = {"host": host, "pid": pid, "queues": _dumps(list(queues)) if queues else None,
                  "concurrency": concurrency, "lease_s": float(lease), "status": "running",
                  "started_at": self.now_expr, "heartbeat_at": self.now_expr, "runs_done": 0}
        with self._begin() as conn:
            # forget workers silent for a day (their rows only explain history)
            conn.execute(w.delete().where(w.c.heartbeat_at < self.now_expr - 86400.0))
            if conn.execute(w.update().where(w.c.id == worker_id).values(**values)).rowcount == 0:
                conn.execute(w.insert().values(id=worker_id, **values))

    def worker_heartbeat(self, worker_id: str, *, status: str | None = None, runs_done: int | None = None) -> None:
        w = self.t.workers
        values = {"heartbeat_at": self.now_expr}
        if status:
            values["status"] = status
        if runs_done is not None:
            values["runs_done"] = runs_done
        with self._begin() as conn:
            conn.execute(w.update().where(w.c.id == worker_id).values(**values))

    def list_workers(self, *, live_only: bool = True) -> list:
        """Workers with ``{id, host, pid, queues, concurrency, lease_s, status, started_at,
        heartbeat_at, runs_done, age_s, live, runs: [{id, flow, lease_until}]}``; a worker is live
        while its last heartbeat is younger than its lease."""
        sa, w, r = self.sa, self.t.workers, self.t.runs
        with self.engine.connect() as conn:
            now = float(conn.execute(sa.select(self.now_expr)).scalar_one())
            rows = [dict(x) for x in conn.execute(sa.select(w).order_by(w.c.started_at)).mappings()]
            held = conn.execute(sa.select(r.c.owner, r.c.id, r.c.flow, r.c.lease_until)
                                .where(r.c.status == "running", r.c.lease_until >= now)
                                .order_by(r.c.owner, r.c.id)).all()
        out = []
        for row in rows:
            row["queues"] = _loads(row["queues"])
            row["age_s"] = now - row["heartbeat_at"]
            row["live"] = row["status"] != "stopped" and row["age_s"] <= row["lease_s"]
            row["runs"] = [{"id": i, "flow": f, "lease_until": lu} for o, i, f, lu in held if o == row["id"]]
            if row["live"] or not live_only:
                out.append(row)
        return out

    def set_limit(self, scope: str, name: str, max_running: int | None) -> None:
        """Store-wide concurrency limit: at most ``max_running`` runs of flow (``scope="flow"``) or
        queue ``name`` held by workers at once; ``None`` removes it."""
        if scope not in ("flow", "queue"):
            raise StoreError(f"limit scope must be flow or queue, not {scope!r}")
        lim = self.t.limits
        key = (lim.c.scope == scope, lim.c.name == name)
        if self.limits().get((scope, name)) == max_running:
            return  # unchanged: no lock taken (workers starting with the same --limit)
        with self._begin() as conn:
            if max_running is None:
                conn.execute(lim.delete().where(*key))
                return
            # an upsert, never delete + insert: a claim waiting on the row must find it again
            if self.pg:
                from sqlalchemy.dialects.postgresql import insert
            else:
                from sqlalchemy.dialects.sqlite import insert
            stmt = insert(lim).values(scope=scope, name=name, max_running=int(max_running))
            conn.execute(stmt.on_conflict_do_update(index_elements=[lim.c.scope, lim.c.name],
                                                    set_={"max_running": int(max_running)}))

    def limits(self) -> dict:
        sa, lim = self.sa, self.t.limits
        with self.engine.connect() as conn:
            return {(s_, n): m for s_, n, m in conn.execute(sa.select(lim.c.scope, lim.c.name, lim.c.max_running))}

    def listen_dsn(self) -> str | None:
        """A libpq address for ``LISTEN`` (PostgreSQL only)."""
        if not self.pg:
            return None
        return "postgresql://" + self.url.split("://", 1)[1]

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
        """Count and record one gated call as one atomic step (see :func:`flowctl.gate.counters.admit`)."""
        from flowctl.gate.counters import admit_sql

        with self._begin() as conn:
            return admit_sql(self, conn, tools, limits, entry)


# The claim on PostgreSQL: one statement. Two branches, each locking its rows with SKIP LOCKED (a
# row another claimer holds is passed over, never waited for): due runs and runs whose lease
# expired. The picked rows become running for the claimer with a fresh lease and fence + 1.
_PG_CLAIM = """
WITH clock AS (SELECT CAST(EXTRACT(EPOCH FROM now()) AS DOUBLE PRECISION) AS now),
due AS (
    SELECT r.id, r.status AS prev_status, r.owner AS prev_owner, r.flow, r.queue, r.priority,
           r.available_at AS sort_at
    FROM flowctl_runs r
    WHERE r.status IN ('queued', 'waiting', 'paused') AND r.available_at <= (SELECT now FROM clock) {queues}
    ORDER BY r.priority DESC, r.available_at, r.id
    LIMIT :scan
    FOR UPDATE OF r SKIP LOCKED
),
expired AS (
    SELECT r.id, r.status AS prev_status, r.owner AS prev_owner, r.flow, r.queue, r.priority,
           r.lease_until AS sort_at
    FROM flowctl_runs r
    WHERE r.status = 'running' AND r.lease_until < (SELECT now FROM clock) {queues}
    ORDER BY r.priority DESC, r.lease_until, r.id
    LIMIT :scan
    FOR UPDATE OF r SKIP LOCKED
),
cand AS (SELECT * FROM due UNION ALL SELECT * FROM expired),
{picked}
UPDATE flowctl_runs AS r
SET status = 'running', owner = :owner, lease_until = clock.now + :lease, fence = r.fence + 1,
    updated_at = clock.now
FROM picked, clock
WHERE r.id = picked.id
RETURNING r.id, r.fence, r.lease_until, picked.prev_status, picked.prev_owner
"""

_PG_PICK = "picked AS (SELECT * FROM cand ORDER BY priority DESC, sort_at, id LIMIT :n)"

# With limits (their rows are locked FOR UPDATE by the claim's transaction first, so limited
# claimers take turns and each sees the others' committed claims): a candidate is picked only if
# the runs of its flow / queue already held under a live lease plus its rank among the candidates
# of that flow / queue stay within the limit.
_PG_PICK_LIMITED = """ranked AS (
    SELECT c.*,
           row_number() OVER (PARTITION BY c.flow ORDER BY c.priority DESC, c.sort_at, c.id) AS flow_rank,
           row_number() OVER (PARTITION BY c.queue ORDER BY c.priority DESC, c.sort_at, c.id) AS queue_rank
    FROM cand c
),
busy_flow AS (
    SELECT b.flow, count(*) AS n FROM flowctl_runs b
    WHERE b.status = 'running' AND b.lease_until >= (SELECT now FROM clock) GROUP BY b.flow
),
busy_queue AS (
    SELECT b.queue, count(*) AS n FROM flowctl_runs b
    WHERE b.status = 'running' AND b.lease_until >= (SELECT now FROM clock) GROUP BY b.queue
),
picked AS (
    SELECT k.* FROM ranked k
    LEFT JOIN flowctl_limits lf ON lf.scope = 'flow' AND lf.name = k.flow
    LEFT JOIN busy_flow bf ON bf.flow = k.flow
    LEFT JOIN flowctl_limits lq ON lq.scope = 'queue' AND lq.name = k.queue
    LEFT JOIN busy_queue bq ON bq.queue = k.queue
    WHERE (lf.max_running IS NULL OR COALESCE(bf.n, 0) + k.flow_rank <= lf.max_running)
      AND (lq.max_running IS NULL OR COALESCE(bq.n, 0) + k.queue_rank <= lq.max_running)
    ORDER BY k.priority DESC, k.sort_at, k.id
    LIMIT :n
)"""


def _event_dict(r) -> dict:
    try:
        data = _loads(r["data"])
    except ValueError:
        data = {"corrupt": True}  # audit verify reports it (the hash no longer matches)
    return dict(r, data=data, data_json=r["data"])


_EVENT_COLUMNS = ("seq", "ts", "type", "state", "attempt", "prev_hash", "hash")


def _event_row(run_id: str, e: dict, fence=None) -> dict:
    row = {k: e.get(k) for k in _EVENT_COLUMNS}
    row["run_id"] = run_id
    row["fence"] = fence
    row["data"] = e["data_json"] if e.get("data_json") is not None else _dumps(e.get("data"))
    return row


def _review_due(run: dict):
    """A paused review's due time (``available_at``): its reminder (``remind_after``) if not sent
    yet, else its deadline. A worker's claim finds a review to remind or to time out exactly as it
    finds a wait that is due."""
    if run.get("status") != "paused" or run.get("available_at") is not None:
        return None
    cursor = run.get("cursor")
    return review_due_at((getattr(cursor, "plain", cursor) or {}).get("pending") or {})


def review_due_at(pending: dict):
    """When a pending review next needs a worker: its unsent reminder, else its deadline (or None)."""
    if pending.get("kind") != "review":
        return None
    times = [pending.get("deadline")]
    if pending.get("remind_at") and not pending.get("reminded"):
        times.append(pending["remind_at"])
    times = [t for t in times if t is not None]
    return min(times) if times else None


def _run_dict(row, store=None) -> dict:
    row = dict(row)
    if store is not None:
        for k in ("input", "params", "cursor", "output"):  # sealed while the run needs them (flowctl.engine.sensitive)
            v = row.get(k)
            if v is not None and v.startswith(_SEALED):
                row[k] = store.keyring(create=False).open(v, f"{row.get('id')}/{k}")
    try:
        out = {k: (_loads(v) if k in _JSON_RUN else v) for k, v in row.items()}
    except (ValueError, TypeError) as exc:
        raise StoreError(f"run {row.get('id')} has a corrupt record in the store ({exc})",
                         hint="restore the store from a backup; flowctl audit verify RUN checks its events") from None
    if "cursor" in out and not isinstance(out["cursor"], dict):
        raise StoreError(f"run {row.get('id')} has a corrupt checkpoint in the store",
                         hint="restore the store from a backup")
    return out


RUN_ID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._-")


def _check_run_id(run_id: str) -> None:
    if not run_id or len(run_id) > 64 or not set(run_id) <= RUN_ID_CHARS:
        raise RunNotFound(f"'{run_id[:70]}' is not a run id", hint="run ids are letters, digits, '.', '_' and '-'; "
                          "list runs with: flowctl runs")


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
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # take the write lock up front: no upgrade deadlocks


def _safe(url: str) -> str:
    """URL without a password, as the user writes it (``postgresql://``, not SQLAlchemy's
    ``postgresql+psycopg://``)."""
    if url.startswith("postgresql+psycopg://"):
        url = "postgresql://" + url[len("postgresql+psycopg://"):]
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':')[0]}@{host}"
    return url


def _first_line(exc) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _kept(events) -> list:
    """Events as MemoryStore keeps them: flat dicts of strings and numbers, the data as its JSON
    text, or (not encoded yet) as ``marshal`` bytes. A long run keeps hundreds of thousands of
    events; nested dicts would be walked by every full collection of the cyclic garbage collector
    (a third of an in-memory step at 100,000 steps), flat ones of atoms are not tracked at all."""
    out = []
    for e in events:
        kept = {"seq": e["seq"], "ts": e["ts"], "type": e["type"], "state": e.get("state"), "attempt": e.get("attempt")}
        if e.get("data_json") is not None:
            kept["data_json"] = e["data_json"]
        else:
            try:
                kept["blob"] = marshal.dumps(e.get("data"))
            except ValueError:  # not plain data after all: encode it now
                from flowctl.store.audit import encode_data

                kept["data_json"] = encode_data(e.get("data"))
        for key in ("prev_hash", "hash"):
            if key in e:
                kept[key] = e[key]
        out.append(kept)
    return out


class MemoryStore:
    """The store interface in process memory (nothing survives the process). Thread-safe.

    Events are sealed on read: :meth:`commit` keeps the event dicts the engine hands over, and the
    hash chain (with each event's JSON text) is computed the first time the run's events or row are
    read (:func:`flowctl.store.audit.seal`), so a run that nobody reads pays for no encoding or hashing."""

    url = "memory"
    seals_on_read = True

    def __init__(self):
        self._lock = threading.Lock()
        self._defs: dict = {}
        self._runs: dict = {}
        self._events: dict = {}
        self._sealed: dict = {}  # run id -> how many of its events are sealed
        self._steps: dict = {}
        self._gate: list = []

    def close(self) -> None:
        pass

    def keyring(self):
        return None  # nothing leaves the process: nothing to seal

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
            self._sealed[run["id"]] = 0
            self._steps[run["id"]] = {}
            self._put_steps(run["id"], steps)

    def commit(self, run_id, expect_seq, run, events=(), steps=(), *, fence=None, lease=None, unleased=False):
        if "cursor_json" in run:  # a runner's encoded checkpoint: this store keeps the dict
            run = {k: v for k, v in run.items() if k != "cursor_json"}
        with self._lock:
            current = self._runs[run_id]
            if current["last_seq"] != expect_seq:
                raise RunConflict(f"run {run_id} was advanced by another process; this one stops")
            current.update(run)
            self._events[run_id].extend(_kept(events))
            self._put_steps(run_id, steps)

    def _seal(self, run_id) -> None:
        """Hash the events committed since the last read (under the lock)."""
        events = self._events.get(run_id)
        done = self._sealed.get(run_id, 0)
        if events is None or done == len(events):
            return
        from flowctl.store.audit import seal

        tail = events[done:]
        for e in tail:
            if "blob" in e:
                e["data"] = marshal.loads(e.pop("blob"))
        prev = events[done - 1]["hash"] if done else ""
        self._runs[run_id]["last_hash"] = seal(tail, prev)
        for e in tail:
            e.pop("data", None)  # read back from data_json, as SqlStore does
        self._sealed[run_id] = len(events)

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

    def list_runs(self, status=None, flow=None, limit=50, parent_id=None, top_level=False):
        with self._lock:
            rows = [r for r in self._runs.values() if (not status or r["status"] == status)
                    and (not flow or r["flow"] == flow) and (not parent_id or r.get("parent_id") == parent_id)
                    and not (top_level and r.get("parent_id"))]
            rows.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
            for r in rows[:limit or None]:
                self._seal(r["id"])
            return [dict(r) for r in rows[:limit or None]]

    def events(self, run_id):
        with self._lock:
            self._seal(run_id)
            # data as stored: parsed from its JSON text, like SqlStore (a snapshot, not the engine's dict)
            return [dict(e, run_id=run_id, data=json.loads(e["data_json"])) for e in self._events.get(run_id, ())]

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
        from flowctl.gate.counters import admit_memory

        with self._lock:
            return admit_memory(self, tools, limits, entry)


def default_owner() -> str:
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"
