"""History queries: run listings, due runs, the figures of ``flowctl stats``, a run's steps.

Costs do not grow with the number of stored runs (issue 17): ``list_runs`` reads the newest rows
of an index on ``(created_at, id)`` (top-level runs: a partial index; ``status`` and ``flow``:
indexes on ``(status|flow, created_at, id)``); ``due_by`` reads paused runs from an index on
their due time; :meth:`HistoryMethods.stats_rows` reads only the runs asked for and, of their
events, only the tool outcomes, retries and compensation failures, with the fields it needs
extracted in SQL. The indexes are in :mod:`flowctl.store.tables` (schema version 5).

:class:`HistoryMethods` is a part of :class:`flowctl.store.core.SqlStore` (a mix-in over its
``engine``, ``sa``, ``t`` and ``pg``); :func:`stats` and :func:`steps_of` work on any
:class:`flowctl.store.protocol.Store`.
"""
from __future__ import annotations

import statistics

from flowctl.store.records import run_dict

#: The event types ``flowctl stats`` counts.
STAT_EVENTS = ("tool_succeeded", "tool_failed", "retry_scheduled", "compensation_failed")


class HistoryMethods:
    def list_runs(self, status: str | None = None, flow: str | None = None, limit: int = 50,
                  parent_id: str | None = None, top_level: bool = False, *, due_by: float | None = None) -> list:
        """Runs (dicts as :meth:`get_run` returns), newest first (``created_at``, then ``id``), at
        most ``limit`` (0: all). ``top_level``: only runs that are no other run's child;
        ``due_by`` (epoch seconds): only runs due by then (``available_at <= due_by``; for a paused
        review, its reminder or deadline)."""
        sa, r = self.sa, self.t.runs
        q = sa.select(r).order_by(r.c.created_at.desc(), r.c.id.desc())
        if top_level:
            q = q.where(r.c.parent_id.is_(None))
        if status:
            q = q.where(r.c.status == status)
        if flow:
            q = q.where(r.c.flow == flow)
        if parent_id:
            q = q.where(r.c.parent_id == parent_id)
        if due_by is not None:
            q = q.where(r.c.available_at <= float(due_by))
        if limit:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            return [run_dict(row, self) for row in conn.execute(q).mappings()]

    def stats_rows(self, limit: int = 1000, since: float | None = None, flow: str | None = None,
                   top_level: bool = True) -> tuple:
        """See :meth:`flowctl.store.protocol.Store.stats_rows`: two queries, whatever the store
        holds, on the DBAPI cursor (a thousand runs and their events are rows SQLAlchemy would
        wrap one by one). The runs: the newest of an index (``since`` is a prefix of that order,
        the same as filtering after the limit). Their events: a primary-key range per run;
        PostgreSQL gets the ids as one array parameter and gives the duration as JSON's number
        text, SQLite reads them through the runs' query as a subquery with ``json_extract``
        (malformed data gives NULL there: no fields)."""
        p = "%s" if self.pg else "?"
        where, params = [], []
        if top_level:
            where.append("parent_id IS NULL")
        if flow:
            where.append(f"flow = {p}")
            params.append(flow)
        if since is not None:
            where.append(f"created_at >= {p}")
            params.append(float(since))
        params.append(int(limit))
        runs_sql = ("SELECT id, status, steps, created_at FROM flowctl_runs" + (" WHERE " + " AND ".join(where) if where else "")
                    + f" ORDER BY created_at DESC, id DESC LIMIT {p}")
        types = ", ".join(f"'{t}'" for t in STAT_EVENTS)
        with self.engine.connect() as conn:
            cur = conn.connection.dbapi_connection.cursor()
            try:
                cur.execute(runs_sql, params)
                runs = [{"id": i, "status": st, "steps": n, "created_at": at} for i, st, n, at in cur.fetchall()]
                if not runs:
                    return runs, []
                try:
                    if self.pg:
                        cur.execute("SELECT run_id, type, d ->> 'tool', d ->> 'duration_ms' FROM (SELECT run_id, seq, type, "
                                    f"CAST(data AS jsonb) AS d FROM flowctl_events WHERE run_id = ANY(%s) AND type IN ({types})) "
                                    "AS e ORDER BY run_id, seq", ([r["id"] for r in runs],))
                        found = [(i, t, tool, _number(d)) for i, t, tool, d in cur.fetchall()]
                    else:
                        cur.execute("SELECT run_id, type, CASE WHEN json_valid(data) THEN json_extract(data, '$.tool') END, "
                                    "CASE WHEN json_valid(data) THEN json_extract(data, '$.duration_ms') END "
                                    f"FROM flowctl_events WHERE run_id IN (SELECT id FROM ({runs_sql})) AND type IN ({types}) "
                                    "ORDER BY run_id, seq", params)
                        found = cur.fetchall()
                except self.engine.dialect.dbapi.Error:  # PostgreSQL: an event whose data is not JSON
                    found = None
            finally:
                cur.close()
        return runs, (stat_events(self, runs) if found is None else found)


def _number(text):
    """A JSON number's text as :func:`json.loads` gives it (``5`` -> 5, ``5.0`` -> 5.0); None otherwise."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def stat_events(store, runs: list) -> list:
    """``[(run_id, type, tool, duration_ms)]`` of the :data:`STAT_EVENTS` of ``runs``, read event by
    event through ``store.events`` (a store without SQL, or data SQL cannot parse)."""
    out = []
    for r in runs:
        for ev in store.events(r["id"]):
            if ev["type"] in STAT_EVENTS:
                d = ev["data"] if isinstance(ev["data"], dict) else {}
                out.append((r["id"], ev["type"], d.get("tool"), d.get("duration_ms")))
    return out


def stats(store, limit: int = 1000, since: float | None = None, *, flow: str | None = None,
          children: bool = False) -> dict:
    """``{runs, by_status, success_rate, mean_steps, compensation_failures, step_ms: {p50, p99},
    tools: {tool: {calls, failures, retries, failure_rate, retry_rate}}}`` over the latest
    ``limit`` runs created since ``since`` (epoch seconds; of ``flow``; top-level runs only unless
    ``children``). ``step_ms``: tool-call durations in milliseconds; rates are fractions (0-1)."""
    rows, events = store.stats_rows(limit, since, flow, not children)
    by_run: dict = {}
    for run_id, typ, tool, duration in events:
        by_run.setdefault(run_id, []).append((typ, tool, duration))
    by_status: dict = {}
    tools: dict = {}
    durations = []
    comp_failures = 0
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        last_failed = None
        for t, tool, duration in by_run.get(r["id"], ()):
            if t in ("tool_succeeded", "tool_failed") and tool:
                entry = tools.setdefault(tool, {"calls": 0, "failures": 0, "retries": 0})
                entry["calls"] += 1
                entry["failures"] += t == "tool_failed"
                durations.append(duration or 0.0)
                last_failed = tool if t == "tool_failed" else None
            elif t == "retry_scheduled" and last_failed in tools:
                tools[last_failed]["retries"] += 1
            elif t == "compensation_failed":
                comp_failures += 1
    finished = sum(by_status.get(s, 0) for s in ("succeeded", "failed", "cancelled"))
    for entry in tools.values():
        entry["failure_rate"] = entry["failures"] / entry["calls"] if entry["calls"] else 0.0
        entry["retry_rate"] = entry["retries"] / entry["calls"] if entry["calls"] else 0.0
    q = statistics.quantiles(durations, n=100) if len(durations) >= 2 else durations * 99 or [0.0] * 99
    return {"runs": len(rows), "by_status": by_status,
            "success_rate": by_status.get("succeeded", 0) / finished if finished else None,
            "mean_steps": statistics.fmean([r["steps"] for r in rows]) if rows else None,
            "compensation_failures": comp_failures, "step_ms": {"p50": q[49], "p99": q[98]}, "tools": tools}


def steps_of(events) -> list:
    """Fold a run's events into steps: ``[{step, state, type, attempts, tool, duration_ms, outcome,
    error, policy, to}]``, one per state entered; a step whose tool raised also has ``raised_at``
    (``file:line in function`` of the tool's code, from its ``tool_failed`` event)."""
    steps = []
    current = None
    for ev in events:
        d, t = ev["data"] or {}, ev["type"]
        if t == "state_entered":
            current = {"step": d.get("step"), "state": ev["state"], "type": d.get("type"), "attempts": 1, "tool": None,
                       "duration_ms": 0.0, "outcome": "", "error": None, "policy": None, "to": None,
                       "started": ev["ts"], "ended": ev["ts"]}
            steps.append(current)
            continue
        if current is None:
            continue
        current["ended"] = ev["ts"]
        if t in ("tool_invoked",) and d.get("purpose") != "notify":
            current["tool"] = d.get("tool")
            current["attempts"] = max(current["attempts"], ev.get("attempt") or 1)
        elif t == "tool_succeeded":
            current["duration_ms"] += d.get("duration_ms") or 0
            # a call recovered after a crash whose verify confirmed it but could not give its output
            current["outcome"] = "ok (recovered, output unknown)" if d.get("output_unknown") else "ok"
        elif t == "tool_failed":
            current["duration_ms"] += d.get("duration_ms") or 0
            current["outcome"] = "failed"
            current["error"] = f"{d.get('error')}: {d.get('message')}"
            current["raised_at"] = d.get("at") or current.get("raised_at")
        elif t == "fanout_started":  # a parallel/map/subflow step lasts from its fan-out to its end
            current["fanout_at"] = ev["ts"]
        elif t == "fanout_finished" and current.get("fanout_at") is not None:
            current["duration_ms"] = (ev["ts"] - current.pop("fanout_at")) * 1000.0
        elif t == "policy_decided":
            current["policy"] = f"{d.get('outcome')} ({d.get('policy') or d.get('rule')})"
        elif t == "error_caught":
            e = d.get("error") or {}
            current["error"] = f"{e.get('type')}: {e.get('message')}"
            current["outcome"] = f"caught ({d.get('layer')})"
        elif t == "transition_taken":
            current["to"] = d.get("to")
            current["outcome"] = current["outcome"] or "ok"
        elif t in ("run_succeeded",):
            current["outcome"] = "succeeded"
        elif t == "run_failed":
            current["outcome"] = "failed"
            e = d.get("error") or {}
            current["error"] = current["error"] or f"{e.get('type')}: {e.get('message')}"
        elif t == "run_cancelled":
            why = f" by {d['by']}" if d.get("by") else f" ({d['reason']})" if d.get("reason") else ""
            current["outcome"] = "cancelled" + why
        elif t == "run_paused":
            current["outcome"] = d.get("status")
        elif t == "review_decided":
            current["outcome"] = f"{d.get('decision')}" + (f" by {d.get('by')}" if d.get("by") else "")
        elif t == "review_timed_out":
            current["outcome"] = "review timed out"
        elif t == "fallback_used":
            current["tool"] = d.get("tool")
            current["outcome"] = "fallback"
    for step in steps:  # a fan-out still under way: as long as it has lasted so far
        began = step.pop("fanout_at", None)
        if began is not None:
            step["duration_ms"] = (step["ended"] - began) * 1000.0
    return steps
