"""Events across runs (``flowctl events``, issue 21): filtered by tool, type, flow, state, time and
run, read in batches (never held whole), on the SQL store, its DBAPI reader and the memory store.

Since schema 7 a commit's events are one packed row (:func:`flowctl.store.audit.pack_text`), so a
filter on an event's ``type``, ``state`` or ``tool`` cannot be a plain column test. The query is in
two layers:

* **in SQL, a superset**: the time range on ``ts`` through the index of schema 8
  (``ix_flowctl_events_ts``: ``(ts, run_id, seq)``; a packed row's ``ts`` is its *last* event's,
  so ``ts >= since`` keeps every row holding an event since then), the run through the primary
  key, the flow through the runs' table, and text tests on the stored JSON that every matching
  row passes (``"tool":"refund"`` in the data; ``,"tool_succeeded",`` and ``,"check",`` in the head
  of a packed event, see :func:`flowctl.store.audit.pack_text`);
* **in Python, exact**: each row is unpacked (:func:`flowctl.store.records.stored_events`) and each
  event is kept only if its ``type`` / ``state`` equal the filter, ``data.tool`` is ``tool`` (or
  ``tool@version``) and
  its ``ts`` is in ``[since, until]``.

Order: commit order, oldest first: by the row's ``ts`` (its last event's time), then run id, then
``seq`` (the events of one commit in ``seq`` order); with ``run_id``, the run's ``seq`` order.
``limit``: the newest ``limit`` matching events, still oldest first.

Events are shown as stored: the engine redacts sensitive values before it records an event
(:mod:`flowctl.engine.sensitive`), as ``flowctl trace`` and ``audit log`` show them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

from flowctl.errors import StoreError, first_line
from flowctl.store.records import stored_events

#: rows per query (a packed row holds a commit's events: a few to a few dozen)
BATCH = 500
#: seconds after ``until`` within which a commit that began before ``until`` may have ended: its
#: row (keyed by its last event's time) is still read, and its events up to ``until`` kept
UNTIL_SLACK = 3600.0


@dataclass(frozen=True)
class EventFilter:
    """What :func:`query_events` keeps. Each field None means "any". ``tool``: a contract id (the
    events of every version of it: ``data.tool`` is ``refund_payment@3.2.0``) or an exact
    ``id@version``; ``since``/``until`` epoch seconds (inclusive); ``run_id`` an exact run id;
    ``limit`` the newest N (None: all)."""

    tool: str | None = None
    type: str | None = None
    flow: str | None = None
    state: str | None = None
    since: float | None = None
    until: float | None = None
    run_id: str | None = None
    limit: int | None = None

    def keeps(self, ev: dict) -> bool:
        """Whether one unpacked event passes the exact filter (the flow and run are the row's)."""
        if self.type is not None and ev["type"] != self.type:
            return False
        if self.state is not None and ev.get("state") != self.state:
            return False
        if self.tool is not None:
            data = ev.get("data")
            tool = data.get("tool") if isinstance(data, dict) else None
            if tool != self.tool and not (isinstance(tool, str) and tool.startswith(self.tool + "@")):
                return False
        ts = ev["ts"]
        return (self.since is None or ts >= self.since) and (self.until is None or ts <= self.until)


def query_events(store, flt: EventFilter, *, batch: int = BATCH) -> Iterator[dict]:
    """The events ``flt`` keeps, oldest first (module doc), as dicts ``{run_id, flow, seq, ts, type,
    state, attempt, data, prev_hash, hash, fence, data_json, packed?}`` (``flow`` the run's flow).
    A SQL store is read ``batch`` rows per query; a store without SQL (memory) run by run. Raises
    :class:`~flowctl.errors.StoreError` when the database fails."""
    if getattr(store, "_cursor", None) is None or not hasattr(store, "pg"):
        yield from _scan(store, flt)
        return
    if flt.limit is not None:
        newest = []
        for ev in _sql(store, flt, batch, descending=True):
            newest.append(ev)
            if len(newest) >= flt.limit:
                break
        yield from reversed(newest)
        return
    yield from _sql(store, flt, batch, descending=False)


def _like(text: str) -> str:
    """``text`` as a LIKE pattern matching it anywhere (``%``, ``_`` and ``\\`` escaped)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _jstr(value: str) -> str:
    """A string's JSON text as flowctl stores it (non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False)


def _where(flt: EventFilter, p: str) -> tuple:
    """The superset of ``flt`` in SQL: ``(clauses, params)``."""
    where, params = [], []
    if flt.run_id is not None:
        where.append(f"e.run_id = {p}")
        params.append(flt.run_id)
    if flt.flow is not None:
        where.append(f"r.flow = {p}")
        params.append(flt.flow)
    if flt.since is not None:
        where.append(f"e.ts >= {p}")
        params.append(float(flt.since))
    if flt.until is not None:
        where.append(f"e.ts <= {p}")
        params.append(float(flt.until) + UNTIL_SLACK)
    if flt.tool is not None:
        where.append(f"e.data LIKE {p} ESCAPE '\\'")
        params.append(_like(f'"tool":{_jstr(flt.tool)[:-1]}'))  # the id, or id@version
    for column, value in (("type", flt.type), ("state", flt.state)):
        if value is not None:  # a row of one event: its column; a packed row: the event heads in its text
            where.append(f"((e.n_events IS NULL AND e.{column} = {p}) OR "
                         f"(e.n_events IS NOT NULL AND e.data LIKE {p} ESCAPE '\\'))")
            params += [value, _like(f",{_jstr(value)},")]
    return where, params


def _sql(store, flt: EventFilter, batch: int, *, descending: bool) -> Iterator[dict]:
    """Keyset pages of rows in (ts, run_id, seq) order (or a run's seq order), unpacked and filtered."""
    p = "%s" if store.pg else "?"
    where, params = _where(flt, p)
    by_run = flt.run_id is not None
    op, order = ("<", "DESC") if descending else (">", "ASC")
    key = ("e.seq",) if by_run else ("e.ts", "e.run_id", "e.seq")
    sql_head = ("SELECT e.run_id, r.flow, e.seq, e.ts, e.type, e.state, e.attempt, e.data, e.prev_hash, e.hash, "
                "e.fence, e.n_events FROM flowctl_events e JOIN flowctl_runs r ON r.id = e.run_id")
    order_by = " ORDER BY " + ", ".join(f"{k} {order}" for k in key) + f" LIMIT {p}"
    after = None
    while True:
        clauses, args = list(where), list(params)
        if after is not None:
            if by_run:
                clauses.append(f"e.seq {op} {p}")
                args.append(after[2])
            else:  # the range on ts first (the index), then the tie-break
                ts, run_id, seq = after
                clauses.append(f"e.ts {op}= {p} AND (e.ts {op} {p} OR e.run_id {op} {p} OR (e.run_id = {p} AND e.seq {op} {p}))")
                args += [ts, ts, run_id, run_id, seq]
        sql = sql_head + (" WHERE " + " AND ".join(clauses) if clauses else "") + order_by
        args.append(int(batch))
        rows = _fetch(store, sql, args)
        for run_id, flow, *row in rows:
            events = stored_events(run_id, tuple(row))
            for ev in (reversed(events) if descending else events):
                if flt.keeps(ev):
                    ev["flow"] = flow
                    yield ev
        if len(rows) < batch:
            return
        after = (rows[-1][3], rows[-1][0], rows[-1][2])


def _fetch(store, sql: str, args: list) -> list:
    try:
        with store._cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    except StoreError:
        raise
    except store._dbapi_error as exc:
        raise StoreError(f"cannot read the events of {getattr(store, 'safe_url', 'the store')}: "
                         f"{type(exc).__name__}: {first_line(exc)}") from None


def _scan(store, flt: EventFilter) -> Iterator[dict]:
    """A store without SQL (the memory store): every run's events, filtered, in the same order."""
    from flowctl.store.events import iter_events

    if flt.run_id is not None:
        try:
            runs = [store.get_run(flt.run_id, exact=True)]
        except Exception:  # noqa: BLE001 - RunNotFound: nothing to show, as on SQL
            runs = []
        runs = [r for r in runs if flt.flow is None or r["flow"] == flt.flow]
    else:
        runs = store.list_runs(flow=flt.flow, limit=0)
    found = []
    for r in runs:
        events = list(iter_events(store, r["id"]))
        ended = {}  # a packed event sorts by its commit: the time of the commit's last event
        for ev in events:
            span = ev.get("packed")
            if span:
                ended[span[1]] = ev["ts"]
        for ev in events:
            if flt.keeps(ev):
                span = ev.get("packed")
                ev["flow"] = r["flow"]
                found.append(((ended.get(span[1], ev["ts"]) if span else ev["ts"]), r["id"], ev["seq"], ev))
    found.sort(key=lambda k: k[2] if flt.run_id is not None else k[:3])
    found = [k[3] for k in found]
    if flt.limit is not None:
        found = found[-flt.limit:] if flt.limit else []
    yield from found





def service_decisions(store, since: float | None = None) -> Iterator[dict]:
    """The gate decisions ``flowctl serve`` recorded (:mod:`flowctl.store.servicelog`, kind
    ``gate_check``) since ``since`` (epoch seconds), as ``{ts, outcome, policy, rule, tool}``;
    nothing when the store has no service log. Raises :class:`~flowctl.errors.StoreError` when the
    database fails."""
    if getattr(store, "_cursor", None) is None or not hasattr(store, "pg"):
        log = store.__dict__.get("_service_log")
        for rows in (list(getattr(log, "_rows", {}).values()) if log is not None else ()):
            for r in rows:
                if r.get("kind") == "gate_check" and (since is None or r["at"] >= since):
                    yield {"ts": r["at"], "outcome": r.get("outcome"), "policy": r.get("policy"),
                           "rule": r.get("rule"), "tool": r.get("tool")}
        return
    p = "%s" if store.pg else "?"
    probe = ("SELECT 1 FROM information_schema.tables WHERE table_name = 'flowctl_service_log'" if store.pg
             else "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'flowctl_service_log'")
    if not _fetch(store, probe, []):
        return
    where, args = "kind = 'gate_check'", []
    if since is not None:
        where += f" AND at >= {p}"
        args.append(float(since))
    for at, outcome, policy, rule, tool in _fetch(store, "SELECT at, outcome, policy, rule, tool FROM flowctl_service_log "
                                                  f"WHERE {where} ORDER BY at", args):
        yield {"ts": at, "outcome": outcome, "policy": policy, "rule": rule, "tool": tool}
__all__ = ["BATCH", "EventFilter", "UNTIL_SLACK", "query_events", "service_decisions"]
