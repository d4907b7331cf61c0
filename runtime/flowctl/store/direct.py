"""A SQLite store at this flowctl's schema, opened without SQLAlchemy (issue 17, target 7a).

Importing SQLAlchemy and building the table metadata costs a ``flowctl run`` about 200 ms, more
than the rest of the command. A run on an existing SQLite store whose ``flowctl_meta.schema_version``
is the one this flowctl writes needs none of it: :class:`~flowctl.store.core.SqlStore` then opens in
*direct* mode (:func:`open_direct`) and serves, through the ``sqlite3`` module alone,

* the reads of a run (``get_run``, ``list_runs`` — e.g. the due reviews ``flowctl run`` fires
  first) by a :class:`~flowctl.store.reader.SqlReader` on its own autocommit connection;
* ``save_definition`` (:class:`DirectWrites`: ``BEGIN IMMEDIATE``, the same rows) and
  ``create_run`` (:func:`run_insert`, written by :meth:`flowctl.store.hot.HotPath.write` in the
  per-step commit's group commit; so it is on every SQLite file store, direct or not);
* the per-step commit, by :class:`~flowctl.store.hot.HotPath` unchanged: the run-row UPDATE
  variants are :class:`RunUpdate` statements, whose :meth:`RunUpdate.compile` gives the SQL text
  and parameter order SQLAlchemy's compiler gives for the SQLite dialect, and :class:`LiteEngine`
  opens its connections with the pragmas :func:`flowctl.store.core._sqlite_pragmas` sets (WAL,
  ``synchronous=NORMAL``, a 30 s busy timeout, ``BEGIN`` issued by flowctl).

Anything else (creating or upgrading the schema, step records, the gate's counters, claims,
history, …) loads SQLAlchemy on first use (:meth:`SqlStore._open_sa`): direct mode changes what
is imported, never what is written — the same statements, conditions and transactions.
"""
from __future__ import annotations

import contextlib
import sqlite3
import threading

from flowctl.errors import StoreError, first_line
from flowctl.store.ledger import append
from flowctl.store.reader import SqlReader
from flowctl.store.records import EVENT_ROW, event_rows

#: SQLite's clock in epoch seconds, as SqlStore.now_expr renders it
NOW = "((julianday('now') - 2440587.5) * 86400.0)"

def connect(path: str) -> sqlite3.Connection:
    """A connection as SqlStore's engine makes one: autocommit (flowctl issues ``BEGIN IMMEDIATE``
    itself), WAL, ``synchronous=NORMAL``, busy timeout 30 s, usable from any thread."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def schema_version(conn) -> int | None:
    """``flowctl_meta.schema_version`` read on ``conn`` (None: no such table or row, or not a
    flowctl store)."""
    try:
        row = conn.execute("SELECT value FROM flowctl_meta WHERE key = 'schema_version'").fetchone()
        return None if row is None else int(row[0])
    except (sqlite3.Error, ValueError):
        return None


def direct_path(url: str) -> str | None:
    """The file of a ``sqlite:///PATH`` address direct mode can open (no ``?options``, not in
    memory), else None."""
    if not url.startswith("sqlite:///") or "?" in url:
        return None
    path = url[len("sqlite:///"):]
    return path if path and path != ":memory:" and not path.startswith("file:") else None


class _Compiled:
    """What :class:`~flowctl.store.hot.HotPath` reads of a compiled statement: its text
    (``str``), ``positiontup`` (parameter names in SQL order) and ``binds`` (none fixed here)."""

    __slots__ = ("sql", "positiontup", "binds")

    def __init__(self, sql: str, names: tuple):
        self.sql, self.positiontup, self.binds = sql, names, {}

    def __str__(self) -> str:
        return self.sql


class RunUpdate:
    """One of SqlStore's conditioned UPDATEs of a run row, for SQLite, without SQLAlchemy.

    ``kind``: ``plain`` (``id`` and ``last_seq`` only), ``free`` / ``free_keep`` (no token: the
    lease is not live; ``free`` also clears it), ``fenced_keep`` / ``fenced`` / ``fenced_end`` (a
    worker's token and a live lease, database clock; ``fenced`` extends the lease by ``b_lease``
    seconds, ``fenced_end`` releases it). The same conditions as the SQLAlchemy statements of
    :meth:`flowctl.store.core.SqlStore._open_sa`."""

    __slots__ = ("kind",)

    def __init__(self, kind: str):
        self.kind = kind

    def compile(self, dialect=None, column_keys=()) -> _Compiled:
        kind = self.kind
        names = [c for c in column_keys if c != "lease_until" or kind in ("plain", "free_keep", "fenced_keep")]
        sets = [f"{c}=?" for c in names]
        if kind in ("free", "fenced_end"):
            sets.append("lease_until=NULL")
        elif kind == "fenced":
            sets.append(f"lease_until=({NOW} + ?)")
        where = ["id = ?", "last_seq = ?"]
        params = [*names]
        if kind == "fenced":
            params.append("b_lease")
        params += ["b_id", "b_expect"]
        if kind in ("free", "free_keep"):
            where.append(f"(lease_until IS NULL OR lease_until < {NOW})")
        elif kind.startswith("fenced"):
            where += ["fence = ?", f"lease_until >= {NOW}"]
            params.append("b_fence")
        return _Compiled(f"UPDATE flowctl_runs SET {', '.join(sets)} WHERE {' AND '.join(where)}", tuple(params))

    def __repr__(self) -> str:
        return f"RunUpdate({self.kind!r})"


class _Raw:
    """A connection handed to HotPath, as SQLAlchemy's ``raw_connection()`` gives one."""

    __slots__ = ("dbapi_connection",)

    def __init__(self, conn):
        self.dbapi_connection = conn

    def detach(self) -> None:
        pass


class LiteEngine:
    """SqlStore's ``engine`` in direct mode: HotPath's ``dialect`` and ``raw_connection()``; any other
    use (``connect``, ``begin`` …) opens SQLAlchemy for the store first (:meth:`SqlStore._open_sa`)."""

    dialect = None

    def __init__(self, store, path: str):
        self._store, self._path = store, path

    def raw_connection(self) -> _Raw:
        return _Raw(connect(self._path))

    def dispose(self) -> None:
        pass

    def __getattr__(self, name):
        return getattr(self._store._open_sa(), name)


class DirectWrites:
    """The writes of starting a run, on one connection: a definition snapshot, a run row with its
    first events. Raise :class:`StoreError` when the database fails (nothing kept)."""

    def __init__(self, store, path: str):
        self.store = store
        self.path = path

    def close(self) -> None:
        pass

    def _write(self, fn):
        """``fn(cursor)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on a connection of the store's
        per-step commit (one per thread writing at once)."""
        hot = self.store.hot
        conn = hot._checkout()
        cur = conn.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            try:
                out = fn(cur)
                cur.execute("COMMIT")
            except BaseException:
                try:
                    cur.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
        except sqlite3.Error as exc:
            cur.close()
            conn.close()  # it may be broken: the next write makes a new one
            raise StoreError(f"cannot write to {self.store.safe_url}: {type(exc).__name__}: {first_line(exc)}",
                             hint="nothing of this write was kept; resume the run when the store is back") from None
        cur.close()
        hot._checkin(conn)
        return out

    def save_definition(self, digest: str, blob) -> None:
        """Insert the snapshot ``digest`` unless it is there; ``blob()`` builds its JSON text (only
        when missing)."""
        def write(cur):
            cur.execute("SELECT 1 FROM flowctl_definitions WHERE digest = ?", (digest,))
            if cur.fetchone() is None:
                cur.execute("INSERT INTO flowctl_definitions (digest, files) VALUES (?, ?)", (digest, blob()))
        self._write(write)

    def create_run(self, row: dict, run_id: str, events: list, lease: float | None) -> None:
        """Insert the run ``row`` (JSON columns already text) and its ``events``: :func:`run_insert`."""
        self._write(run_insert(row, run_id, events, lease))


def run_insert(row: dict, run_id: str, events: list, lease: float | None):
    """``write(cursor, tx=None)``: inserts the run ``row`` (JSON columns already text, no value SQL), its
    ``events`` (one packed row when sealed as one commit, schema 7) and its ledger ``start`` row,
    inside the caller's open SQLite transaction. ``lease``: the run starts leased
    (``lease_until`` = database clock + lease); a ``queued`` row without ``available_at`` is due
    now (database clock). ``tx``: the transaction's dict of :func:`flowctl.store.ledger.append`
    (and, with ``events`` in it, the list the group's event rows are kept in until it writes them:
    :class:`flowctl.store.hot.HotPath`)."""
    queued_now = row.get("status") == "queued" and row.get("available_at") is None
    cols, marks, params = [], [], []
    for col, value in row.items():
        cols.append(col)
        if col == "lease_until" and lease is not None:
            marks.append(f"{NOW} + ?")
            params.append(float(lease))
        elif col == "available_at" and queued_now:
            marks.append(NOW)
        else:
            marks.append("?")
            params.append(value)
    if lease is not None and "lease_until" not in row:
        cols.append("lease_until")
        marks.append(f"{NOW} + ?")
        params.append(float(lease))
    if queued_now and "available_at" not in row:
        cols.append("available_at")
        marks.append(NOW)
    sql = f"INSERT INTO flowctl_runs ({', '.join(cols)}) VALUES ({', '.join(marks)})"
    rows = event_rows(run_id, events, row.get("fence"))

    # the run's head as the INSERT writes it (the ledger row records it)
    head = (row["last_seq"], row["last_hash"] or "") if "last_seq" in row and "last_hash" in row else None

    def write(cur, tx=None):
        cur.execute(sql, params)
        if rows and tx is not None and "events" in tx:  # the group's event rows are inserted together
            tx["events"].extend(rows)
        elif rows:
            cur.executemany(_INSERT_EVENTS, rows)
        append(cur.execute, False, run_id, "start", head=head, tx=tx)  # the ledger of runs (flowctl.store.ledger)
        return True
    return write


_INSERT_EVENTS = f"INSERT INTO flowctl_events ({', '.join(EVENT_ROW)}) VALUES ({', '.join('?' * len(EVENT_ROW))})"


def open_direct(store, url: str, schema: int):
    """``(reader, writes, engine)`` for ``store`` in direct mode when ``url`` is an existing SQLite
    file at schema version ``schema``; None otherwise (SQLAlchemy then opens, creates or upgrades it)."""
    import os

    path = direct_path(url)
    if path is None or not os.path.isfile(path):
        return None
    try:  # an existing file: connecting creates nothing
        conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    except sqlite3.Error:
        return None
    if schema_version(conn) != schema:
        conn.close()
        return None
    return LockedReader(url, conn, False, sqlite3.Error), DirectWrites(store, path), LiteEngine(store, path)


class LockedReader(SqlReader):
    """A :class:`~flowctl.store.reader.SqlReader` whose one connection serves one query at a time
    (the threads of a fan-out read through it at once)."""

    def __init__(self, *a):
        super().__init__(*a)
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def _cursor(self):
        with self._lock, super()._cursor() as cur:
            yield cur


__all__ = ["RunUpdate", "LiteEngine", "DirectWrites", "run_insert", "LockedReader", "open_direct", "schema_version", "connect"]
