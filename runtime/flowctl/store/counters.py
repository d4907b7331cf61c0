"""The gate's counters in the store: ``rate`` and ``dedupe`` decided and recorded in one atomic step.

A *limit* is one dict, checked in order:

- ``{"kind": "rate", "since": epoch s, "max": int, "column": "flow"|"run_id"|None, "value": str}``:
  at most ``max`` recorded calls of the function (any id in ``tools``) since ``since``, counted
  among the rows whose ``column`` is ``value`` (``column`` None: every call of the function);
- ``{"kind": "dedupe", "since": epoch s, "run_id": str, "digest": str}``: no recorded call of
  the function by ``run_id`` with input digest ``digest`` since ``since``.

:func:`admit_sql` returns ``(index of the first limit that fails, calls counted)``, or ``None``
when every limit holds — and then inserts ``entry`` (a ``gate_log`` row) when given, in the same
transaction. The transaction is serialised per function: on PostgreSQL by a transaction-scoped
advisory lock keyed by the function's contract ids, on SQLite by its ``BEGIN IMMEDIATE`` write
lock (see ``store._sqlite_pragmas``). So two processes deciding at once on the same function
see each other's calls: a ``rate: {max: 1}`` lets exactly one through.

Each count is an index range, however long the gate log grows: ``(tool, at)`` for a rate over
every call of the function, ``(tool, flow, at)`` and ``(tool, run_id, at)`` for a rate per flow or
per run and for dedupe (schema version 5, :mod:`flowctl.store.tables`).
"""
from __future__ import annotations

import hashlib

from flowctl.store.compiled import cached, cursor_of


def lock_key(tools) -> int:
    """A signed 64-bit advisory-lock key for a function (its sorted contract ids)."""
    raw = hashlib.sha256(("flowctl-gate\0" + "\0".join(sorted(tools))).encode()).digest()[:8]
    return int.from_bytes(raw, "big", signed=True)


def _admit_statement(store, tools: tuple, limits):
    """The one SELECT of every limit's count for ``tools`` and the limits' shape, with the changing
    values as bound parameters (``since<i>``, ``value<i>``, ``run<i>``, ``digest<i>``); compiled
    once per shape by :func:`admit_sql` (building and compiling it each call cost most of a check)."""
    sa, log = store.sa, store.t.gate_log

    def bind(name):  # no value until the call: None when compiled
        return sa.bindparam(name, required=False)

    counts = []
    for i, limit in enumerate(limits):
        where = [log.c.tool.in_(tools), log.c.at >= bind(f"since{i}")]
        if limit["kind"] == "rate":
            if limit.get("column"):
                where.append(log.c[limit["column"]] == bind(f"value{i}"))
            counts.append(sa.select(sa.func.count()).select_from(log).where(*where).scalar_subquery())
        else:
            where += [log.c.run_id == bind(f"run{i}"), log.c.digest == bind(f"digest{i}")]
            counts.append(sa.select(sa.func.count()).select_from(
                sa.select(log.c.id).where(*where).limit(1).subquery()).scalar_subquery())
    return sa.select(*counts)


def admit_sql(store, conn, tools, limits, entry):
    """Decide ``limits`` and record ``entry`` in the open transaction of the SQLAlchemy connection
    ``conn`` (see the module's docstring for the shapes): the count and the INSERT run on its DBAPI
    cursor, compiled once per shape (:mod:`flowctl.store.compiled`)."""
    tools = tuple(sorted(set(tools)))
    cur = cursor_of(conn)
    if store.pg:  # its own statement: a statement's snapshot is taken before its locks are
        cur.execute("SELECT pg_advisory_xact_lock(%(k)s)", {"k": lock_key(tools)})
    used = ()
    if limits:  # every limit in one round trip: a count per rate, a 0/1 per dedupe
        params = {}
        for i, limit in enumerate(limits):
            params[f"since{i}"] = limit["since"]
            if limit["kind"] == "rate":
                if limit.get("column"):
                    params[f"value{i}"] = limit["value"]
            else:
                params[f"run{i}"], params[f"digest{i}"] = limit["run_id"], limit["digest"]
        shape = (tools, tuple((lim["kind"], lim.get("column")) for lim in limits))
        used = cached(store, ("admit", shape), lambda: _admit_statement(store, tools, limits)).execute(
            cur, params).fetchone()
    for i, (limit, n) in enumerate(zip(limits, used)):
        if n >= (limit["max"] if limit["kind"] == "rate" else 1):
            return i, n
    if store.gate_hook is not None:
        store.gate_hook()
    if entry is not None:
        record_sql(store, cur, entry)
    return None


def record_sql(store, cur, entry: dict) -> None:
    """Insert the ``gate_log`` row ``entry`` (``{at, tool, flow, run_id, digest}``) on the DBAPI cursor ``cur``."""
    cached(store, ("gate_log", tuple(entry)), lambda: (store.t.gate_log.insert(), list(entry))).execute(cur, entry)


def admit_memory(store, tools, limits, entry):
    tools = set(tools)
    for i, limit in enumerate(limits):
        rows = [g for g in store._gate if g["tool"] in tools and g["at"] >= limit["since"]]
        if limit["kind"] == "rate":
            used = sum(1 for g in rows if not limit.get("column") or g[limit["column"]] == limit["value"])
            if used >= limit["max"]:
                return i, used
        elif any(g["run_id"] == limit["run_id"] and g["digest"] == limit["digest"] for g in rows):
            return i, 1
    if store.gate_hook is not None:
        store.gate_hook()
    if entry is not None:
        store._gate.append(dict(entry))
    return None
