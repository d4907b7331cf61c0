"""Count what a piece of code really sends to the database: transactions committed, statements,
and (PostgreSQL) round trips — traced at the driver, below flowctl and SQLAlchemy.

* **SQLite**: every ``sqlite3`` connection opened while tracing gets a trace callback
  (``set_trace_callback``: each statement as SQLite runs it). A *commit* is a ``COMMIT`` (or
  ``RELEASE``/``END`` of an outer transaction), or a write statement run outside ``BEGIN`` (its
  own implicit transaction); a *read* is a ``SELECT`` outside any transaction.
* **PostgreSQL**: every psycopg connection opened while tracing is traced by libpq itself
  (``PQtrace``: each protocol message, both ways). A *round trip* is one wait for the server:
  each ``ReadyForQuery`` the client had to wait for, counted once per batch of pipelined
  messages (a pipeline sends several syncs before reading); a *commit* is a ``CommandComplete``
  of ``COMMIT``, or of a write (INSERT/UPDATE/DELETE, a CTE holding one) in autocommit mode.

Connections opened *before* tracing starts are not traced: open the store inside the block, or
use :func:`trace_sqlite` / :func:`trace_pg` around the whole use of the store.
"""
from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import tempfile
import threading

_WRITE = re.compile(r"^\s*(WITH\b.*\b(UPDATE|INSERT|DELETE)\b|INSERT|UPDATE|DELETE|REPLACE)", re.I | re.S)


class Counts:
    """What was traced: ``commits``, ``statements``, ``reads`` (SQLite: autocommit SELECTs),
    ``round_trips`` (PostgreSQL), ``log`` (the statements, in order)."""

    def __init__(self):
        self.commits = self.statements = self.reads = self.round_trips = 0
        self.log: list = []
        self.lock = threading.Lock()

    def snapshot(self) -> dict:
        with self.lock:
            return {"commits": self.commits, "statements": self.statements, "reads": self.reads,
                    "round_trips": self.round_trips}


@contextlib.contextmanager
def trace_sqlite():
    """Trace every ``sqlite3`` connection opened inside the block; yields :class:`Counts`."""
    counts = Counts()
    original = sqlite3.connect
    states: dict = {}

    def connect(*args, **kwargs):
        conn = original(*args, **kwargs)
        key = id(conn)
        states[key] = False  # in an explicit transaction

        def on_statement(sql: str) -> None:
            head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            with counts.lock:
                counts.statements += 1
                counts.log.append(sql)
                if head == "BEGIN":
                    states[key] = True
                elif head in ("COMMIT", "END"):
                    states[key] = False
                    counts.commits += 1
                elif head == "ROLLBACK" and not sql.upper().lstrip().startswith("ROLLBACK TO"):
                    states[key] = False
                elif not states[key]:
                    if _WRITE.match(sql):
                        counts.commits += 1
                    elif head in ("SELECT", "WITH"):
                        counts.reads += 1

        conn.set_trace_callback(on_statement)
        return conn

    import sqlite3.dbapi2 as dbapi2  # SQLAlchemy's pysqlite dialect connects through this module

    sqlite3.connect = dbapi2.connect = connect
    try:
        yield counts
    finally:
        sqlite3.connect = dbapi2.connect = original


@contextlib.contextmanager
def trace_pg():
    """Trace every psycopg connection opened inside the block (libpq's ``PQtrace``); yields
    :class:`Counts`, filled in when the block ends (the trace files are read then)."""
    import psycopg

    counts = Counts()
    folder = tempfile.mkdtemp(prefix="pgtrace")
    files: list = []
    original = psycopg.Connection.connect.__func__

    def connect(cls, *args, **kwargs):
        conn = original(cls, *args, **kwargs)
        path = os.path.join(folder, f"{len(files)}.trace")
        fh = open(path, "w")  # noqa: SIM115 - kept open while the connection lives
        files.append((path, fh))
        conn.pgconn.trace(fh.fileno())
        return conn

    saved = psycopg.connect  # ``psycopg.connect`` is the classmethod bound at import: patched too
    psycopg.Connection.connect = classmethod(connect)
    psycopg.connect = psycopg.Connection.connect
    try:
        yield counts
    finally:
        psycopg.Connection.connect = classmethod(original)
        psycopg.connect = saved
        for path, fh in files:
            fh.flush()
            with open(path) as read:
                _read_pg_trace(read.read(), counts)


# a libpq trace line: "<timestamp>\tF|B\t<length>\t<Message>\t <fields>"
_LINE = re.compile(r"^(?:[^\t]+\t)?([FB])\t\d+\t(\w+)\s*(.*)$")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _read_pg_trace(text: str, counts: Counts) -> None:
    waiting = False  # the client sent something and has not read a ReadyForQuery since
    in_txn = False
    named: dict = {}  # prepared statement name -> its SQL
    last_parsed = ""
    executing: list = []  # the SQL of each statement sent and not completed yet, in order
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        side, message, rest = m.groups()
        if side == "F":
            if message in ("Query", "Sync") and not waiting:
                waiting = True
                counts.round_trips += 1
            if message == "Parse":
                fields = _QUOTED.findall(rest)
                name, sql = (fields + ["", ""])[:2]
                named[name] = last_parsed = sql
            elif message == "Bind":
                fields = _QUOTED.findall(rest)
                executing.append(named.get(fields[1] if len(fields) > 1 else "", last_parsed))
            elif message == "Query":
                fields = _QUOTED.findall(rest)
                executing.append(fields[0] if fields else rest)
        else:
            if message == "CommandComplete":
                sql = executing.pop(0) if executing else ""
                tag = rest.strip().strip('"').upper()
                head = tag.split()[0] if tag else ""
                if head == "BEGIN":
                    in_txn = True
                    continue
                if head in ("COMMIT", "ROLLBACK"):
                    if head == "COMMIT":
                        counts.commits += 1
                    in_txn = False
                    continue
                counts.statements += 1
                counts.log.append(sql[:160])
                if not in_txn:
                    if head in ("INSERT", "UPDATE", "DELETE") or _WRITE.match(sql):
                        counts.commits += 1
                    else:
                        counts.reads += 1
            elif message == "ErrorResponse":
                if executing:
                    executing.pop(0)
            elif message == "ReadyForQuery":
                waiting = False
                in_txn = rest.strip() in ("T", "E")
