"""History queries: run listings, due runs, the figures of ``flowctl stats``, a run's steps.

Costs do not grow with the number of stored runs (issue 17): ``list_runs`` reads the newest rows
of an index on ``(created_at, id)`` (top-level runs: a partial index; ``status`` and ``flow``:
indexes on ``(status|flow, created_at, id)``); ``due_by`` reads paused runs from an index on
their due time; ``stats_rows`` (:class:`flowctl.store.reader.DbapiReads`) reads only the runs asked for and, of their
events, only the tool outcomes, retries and compensation failures, with the fields it needs
extracted in SQL. The indexes are in :mod:`flowctl.store.tables` (schema version 5).

:class:`HistoryMethods` is a part of :class:`flowctl.store.core.SqlStore` (a mix-in over its
``engine``, ``sa``, ``t`` and ``pg``; the DBAPI queries it shares with the SQLAlchemy-free
:class:`flowctl.store.reader.SqlReader` — batched events, stats — are in :class:`DbapiReads`); :func:`stats` and :func:`steps_of` work on any
:class:`flowctl.store.protocol.Store`.
"""
from __future__ import annotations

import contextlib

from flowctl.store.reader import STAT_EVENTS, DbapiReads, stat_events  # noqa: F401 - history.STAT_EVENTS, stat_events
from flowctl.store.records import run_dict


class HistoryMethods(DbapiReads):
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

    @contextlib.contextmanager
    def _cursor(self):
        """A DBAPI cursor on a pooled connection (the queries of :class:`DbapiReads`)."""
        with self.engine.connect() as conn:
            cur = conn.connection.dbapi_connection.cursor()
            try:
                yield cur
            finally:
                cur.close()

    @property
    def _dbapi_error(self):
        return self.engine.dialect.dbapi.Error


def stats(store, limit: int = 1000, since: float | None = None, *, flow: str | None = None,
          children: bool = False) -> dict:
    """``{runs, by_status, success_rate, mean_steps, compensation_failures, step_ms: {p50, p99},
    tools: {tool: {calls, failures, retries, failure_rate, retry_rate}}}`` over the latest
    ``limit`` runs created since ``since`` (epoch seconds; of ``flow``; top-level runs only unless
    ``children``). ``step_ms``: tool-call durations in milliseconds; rates are fractions (0-1)."""
    import statistics  # (imports decimal, fractions, random: not for the other read commands)

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
    error, policy, to}]``, one per state entered (an llm or agent step also has ``model_calls`` and
    ``reasks``, its ``tool`` the model; an agent's ``agent_tools`` the names its model called, in
    order, and ``duration_ms`` adds model latency); a step whose tool raised also has ``raised_at``
    (``file:line in function`` of the tool's code, from its ``tool_failed`` event). See
    :func:`iter_steps` to fold a long run's events as they are read."""
    return list(iter_steps(events))


def iter_steps(events):
    """:func:`steps_of` as a generator over any iterable of events in ``seq`` order: each step is
    given once the next state is entered (or the events end), so a long run is folded in constant
    memory."""
    current = None
    for ev in events:
        d, t = ev["data"] or {}, ev["type"]
        if t == "state_entered":
            if current is not None:
                yield _ended(current)
            current = {"step": d.get("step"), "state": ev["state"], "type": d.get("type"), "attempts": 1, "tool": None,
                       "duration_ms": 0.0, "outcome": "", "error": None, "policy": None, "to": None,
                       "started": ev["ts"], "ended": ev["ts"]}
            continue
        if current is None:
            continue
        current["ended"] = ev["ts"]
        if t == "model_called":  # llm and agent states: each model call, its re-asks, its latency
            current["model_calls"] = current.get("model_calls", 0) + 1
            current["reasks"] = current.get("reasks", 0) + (1 if d.get("reask") else 0)
            current["duration_ms"] += d.get("latency_ms") or 0
            current["tool"] = current["tool"] or d.get("model")
            current["outcome"] = current["outcome"] or "ok"
        elif t == "agent_tool_call":  # the tools an agent's model called, in order
            current.setdefault("agent_tools", []).append(d.get("name"))
        elif t == "agent_tool_result" and not d.get("ok"):  # refused or failed, and told to the model
            current.setdefault("agent_errors", []).append(f"{d.get('name')}: {d.get('error')}: {d.get('message')}")
        elif t in ("tool_invoked",) and current["type"] == "agent":
            pass  # an agent's tool calls are listed by name (agent_tools), its tries are its model's
        elif t in ("tool_invoked",) and d.get("purpose") != "notify":
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
        elif t == "policy_decided":  # after a gate review: who decided, then the gate's answer
            reviewed = current.pop("gate_review", None)
            current["policy"] = (f"review, {reviewed} → " if reviewed else "") + \
                f"{d.get('outcome')} ({d.get('policy') or d.get('rule')})"
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
            if current["type"] != "review":  # the gate sent a tool call to review (review_when)
                current["gate_review"] = current["outcome"]
        elif t == "review_timed_out":
            current["outcome"] = "review timed out"
        elif t == "fallback_used":
            current["tool"] = d.get("tool")
            current["outcome"] = "fallback"
    if current is not None:
        yield _ended(current)


def _ended(step: dict) -> dict:
    """A step as :func:`iter_steps` gives it: a fan-out still under way lasts as long as it has so far."""
    began = step.pop("fanout_at", None)
    if began is not None:
        step["duration_ms"] = (step["ended"] - began) * 1000.0
    return step
