"""The run store: runs, their checkpoints, audit events, step records, definition snapshots.

Backed by SQLAlchemy 2.x Core: SQLite (the default, ``.flowctl/flowctl.db``, WAL,
``synchronous=NORMAL``, writers serialised with ``BEGIN IMMEDIATE``) or PostgreSQL
(``postgresql://…``, driven by psycopg 3). :class:`MemoryStore` keeps the same interface in
dicts, for benchmarks and throw-away runs (``--db memory``).

Shapes (all JSON columns hold text written by :func:`flowctl.audit.canonical`):

* run: ``{id, flow, flow_version, digest, parent_id, status, input, params, output, error,
  cursor, created_at, updated_at, available_at, owner, last_seq, last_hash, steps}``; times are
  epoch **seconds**; ``status`` one of :data:`STATUSES`.
* event: ``{run_id, seq, ts, type, state, attempt, data, prev_hash, hash}`` (see :mod:`flowctl.audit`).
* step: ``{run_id, step_no, attempt, state, tool, idempotency_key, status, input, output,
  started_at, finished_at}``; ``status`` is ``started``, ``succeeded`` or ``failed``. A side
  effecting step's ``started`` row is committed before the tool is invoked.

:meth:`SqlStore.commit` is the one write path of a running run: it inserts events and step rows
and updates the run row in one transaction, conditioned on the run's ``last_seq`` (optimistic
fencing): if another process advanced the run, nothing is written and :class:`StoreError` is
raised. The schema version lives in ``flowctl_meta``; an older store is upgraded in place.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from .errors import RunConflict, RunNotFound, StoreError

SCHEMA_VERSION = 1
STATUSES = ("running", "waiting", "paused", "succeeded", "failed", "cancelled")
FINAL = frozenset({"succeeded", "failed", "cancelled"})
DEFAULT_URL = "sqlite:///.flowctl/flowctl.db"
_JSON_RUN = ("input", "params", "output", "error", "cursor")
_JSON_STEP = ("input", "output")


def _dumps(v):
    return None if v is None else json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


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
    if url.startswith(("postgresql+psycopg://", "sqlite:///")):
        return url
    raise StoreError(f"unsupported store address {url!r}",
                     hint="use sqlite:///path/to/flowctl.db, postgresql://user@host/db, or memory")


def open_store(url: str | None = None, root: Path | None = None, *, create: bool = True):
    """Open the store at ``url`` (see :func:`normalise_url`), creating or upgrading its tables.

    With ``create=False`` (read-only commands: runs, trace, stats …) a SQLite file that does not
    exist is an error instead of a new empty store. A SQLite file is only created in an existing
    folder, except the default ``.flowctl/``. Raises :class:`StoreError`.
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
    return SqlStore(url)


class SqlStore:
    def __init__(self, url: str):
        import sqlalchemy as sa

        from . import store_schema

        self.url = url
        self.sa = sa
        self.t = t = store_schema
        kwargs = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        try:
            self.engine = sa.create_engine(url, **kwargs)
        except Exception as exc:  # noqa: BLE001 - bad URL, missing driver
            raise StoreError(f"cannot open store {_safe(url)}: {exc}",
                             hint="use sqlite:///path.db or postgresql://user@host/db") from None
        if url.startswith("sqlite"):
            _sqlite_pragmas(self.engine, sa)
        # Built once: the SET columns come from each call's parameters (compiled form cached per set).
        self._update_run = t.runs.update().where(t.runs.c.id == sa.bindparam("b_id"),
                                                  t.runs.c.last_seq == sa.bindparam("b_expect"))
        try:
            self._migrate()
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - connection refused and the like
            raise StoreError(f"cannot open store {_safe(url)}: {_first_line(exc)}") from None

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
        self.engine.dispose()

    # --------------------------------------------------------------------- definitions
    def save_definition(self, digest: str, files: dict) -> None:
        sa, t = self.sa, self.t
        blob = json.dumps({k: v.decode("utf-8", "surrogateescape") for k, v in files.items()}, sort_keys=True)
        with self.engine.begin() as conn:
            if conn.execute(sa.select(t.definitions.c.digest).where(t.definitions.c.digest == digest)).first() is None:
                conn.execute(t.definitions.insert().values(digest=digest, files=blob))

    def load_definition(self, digest: str) -> dict:
        sa, t = self.sa, self.t
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.definitions.c.files).where(t.definitions.c.digest == digest)).first()
        if row is None:
            raise StoreError(f"definition {digest[:12]} is not in the store")
        return {k: v.encode("utf-8", "surrogateescape") for k, v in json.loads(row[0]).items()}

    # --------------------------------------------------------------------- runs
    def create_run(self, run: dict, events: list, steps: list = ()) -> None:
        t = self.t
        row = {k: (_dumps(v) if k in _JSON_RUN else v) for k, v in run.items()}
        with self.engine.begin() as conn:
            conn.execute(t.runs.insert().values(**row))
            self._insert(conn, run["id"], events, steps)

    def commit(self, run_id: str, expect_seq: int, run: dict, events: list = (), steps: list = ()) -> None:
        """Append ``events``, upsert ``steps``, update the run row — one transaction, or nothing."""
        sa, t = self.sa, self.t
        row = {k: (_dumps(v) if k in _JSON_RUN else v) for k, v in run.items()}
        with self.engine.begin() as conn:
            res = conn.execute(self._update_run, dict(row, b_id=run_id, b_expect=expect_seq))
            if res.rowcount != 1:
                raise RunConflict(f"run {run_id} was advanced by another process; this one stops",
                                  hint="see flowctl trace " + run_id)
            self._insert(conn, run_id, events, steps)

    def _insert(self, conn, run_id, events, steps):
        sa, t = self.sa, self.t
        if events:
            conn.execute(t.events.insert(), [_event_row(run_id, e) for e in events])
        for s in steps:
            s = {k: (_dumps(v) if k in _JSON_STEP else v) for k, v in s.items()}
            key = (t.steps.c.run_id == run_id, t.steps.c.step_no == s["step_no"], t.steps.c.attempt == s["attempt"])
            if conn.execute(sa.select(t.steps.c.status).where(*key)).first() is None:
                conn.execute(t.steps.insert().values(run_id=run_id, **s))
            else:
                conn.execute(t.steps.update().where(*key).values(**s))

    def get_run(self, run_id: str) -> dict:
        """The run with this id, or with this unique id prefix. Raises :class:`RunNotFound`."""
        sa, t = self.sa, self.t
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id)).mappings().first()
            if row is None and len(run_id) >= 4:
                rows = conn.execute(sa.select(t.runs).where(t.runs.c.id.like(run_id + "%")).limit(2)).mappings().all()
                if len(rows) == 1:
                    row = rows[0]
                elif len(rows) > 1:
                    raise RunNotFound(f"run id prefix '{run_id}' matches several runs",
                                      hint="give more characters: " + ", ".join(r["id"] for r in rows))
        if row is None:
            raise RunNotFound(f"no run '{run_id}' in {_safe(self.url)}", hint="list runs with: flowctl runs")
        return _run_dict(row)

    def list_runs(self, status: str | None = None, flow: str | None = None, limit: int = 50,
                  parent_id: str | None = None) -> list:
        sa, t = self.sa, self.t
        q = sa.select(t.runs).order_by(t.runs.c.created_at.desc(), t.runs.c.id.desc())
        if status:
            q = q.where(t.runs.c.status == status)
        if flow:
            q = q.where(t.runs.c.flow == flow)
        if parent_id:
            q = q.where(t.runs.c.parent_id == parent_id)
        if limit:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            return [_run_dict(r) for r in conn.execute(q).mappings()]

    def events(self, run_id: str) -> list:
        sa, t = self.sa, self.t
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.events).where(t.events.c.run_id == run_id).order_by(t.events.c.seq)).mappings()
            return [dict(r, data=_loads(r["data"]), data_json=r["data"]) for r in rows]

    def steps(self, run_id: str) -> list:
        sa, t = self.sa, self.t
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.steps).where(t.steps.c.run_id == run_id)
                                .order_by(t.steps.c.step_no, t.steps.c.attempt)).mappings()
            return [{k: (_loads(v) if k in _JSON_STEP else v) for k, v in r.items()} for r in rows]

    # --------------------------------------------------------------------- policy gate counters
    def gate_record(self, entry: dict) -> None:
        with self.engine.begin() as conn:
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


_EVENT_COLUMNS = ("seq", "ts", "type", "state", "attempt", "prev_hash", "hash")


def _event_row(run_id: str, e: dict) -> dict:
    row = {k: e.get(k) for k in _EVENT_COLUMNS}
    row["run_id"] = run_id
    row["data"] = e["data_json"] if e.get("data_json") is not None else _dumps(e.get("data"))
    return row


def _run_dict(row) -> dict:
    return {k: (_loads(v) if k in _JSON_RUN else v) for k, v in dict(row).items()}


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
    """URL without a password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':')[0]}@{host}"
    return url


def _first_line(exc) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class MemoryStore:
    """The store interface in process memory (nothing survives the process). Thread-safe."""

    url = "memory"

    def __init__(self):
        self._lock = threading.Lock()
        self._defs: dict = {}
        self._runs: dict = {}
        self._events: dict = {}
        self._steps: dict = {}
        self._gate: list = []

    def close(self) -> None:
        pass

    def save_definition(self, digest, files):
        self._defs.setdefault(digest, dict(files))

    def load_definition(self, digest):
        try:
            return dict(self._defs[digest])
        except KeyError:
            raise StoreError(f"definition {digest[:12]} is not in the store") from None

    def create_run(self, run, events, steps=()):
        with self._lock:
            self._runs[run["id"]] = dict(run)
            self._events[run["id"]] = [dict(e, run_id=run["id"]) for e in events]
            self._steps[run["id"]] = {}
            self._put_steps(run["id"], steps)

    def commit(self, run_id, expect_seq, run, events=(), steps=()):
        with self._lock:
            current = self._runs[run_id]
            if current["last_seq"] != expect_seq:
                raise RunConflict(f"run {run_id} was advanced by another process; this one stops")
            current.update(run)
            self._events[run_id].extend(dict(e, run_id=run_id) for e in events)
            self._put_steps(run_id, steps)

    def _put_steps(self, run_id, steps):
        table = self._steps[run_id]
        for s in steps:
            key = (s["step_no"], s["attempt"])
            table.setdefault(key, {"run_id": run_id}).update(s)

    def get_run(self, run_id):
        found = self._runs.get(run_id)
        if found is None:
            matches = [r for k, r in self._runs.items() if k.startswith(run_id)] if len(run_id) >= 4 else []
            if len(matches) != 1:
                raise RunNotFound(f"no run '{run_id}' in memory")
            found = matches[0]
        return json.loads(json.dumps(found))

    def list_runs(self, status=None, flow=None, limit=50, parent_id=None):
        rows = [r for r in self._runs.values() if (not status or r["status"] == status)
                and (not flow or r["flow"] == flow) and (not parent_id or r.get("parent_id") == parent_id)]
        rows.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
        return [dict(r) for r in rows[:limit or None]]

    def events(self, run_id):
        return [dict(e) for e in self._events.get(run_id, ())]

    def steps(self, run_id):
        return [dict(v) for _, v in sorted(self._steps.get(run_id, {}).items())]

    def gate_record(self, entry):
        with self._lock:
            self._gate.append(dict(entry))

    def gate_count(self, column, value, tool, since):
        return sum(1 for g in self._gate if g[column] == value and g["tool"] == tool and g["at"] >= since)

    def gate_seen(self, run_id, tool, digest, since):
        return any(g["run_id"] == run_id and g["tool"] == tool and g["digest"] == digest and g["at"] >= since
                   for g in self._gate)


def default_owner() -> str:
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"
