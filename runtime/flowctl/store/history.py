"""History queries: run listings, due runs, the figures of ``flowctl stats``, a run's steps.

Costs do not grow with the number of stored runs (issue 17): ``list_runs`` reads the newest rows
of an index on ``(created_at, id)`` (top-level runs: a partial index; ``status`` and ``flow``:
indexes on ``(status|flow, created_at, id)``); ``due_by`` reads paused runs from an index on
their due time; ``stats_rows`` (:class:`flowctl.store.reader.DbapiReads`) reads only the runs asked for with the
facts of their events kept when they ended (schema 9, :mod:`flowctl.store.summary`): no event is
read for a run that ended with a summary. The indexes are in :mod:`flowctl.store.tables` (schema version 5).

:class:`HistoryMethods` is a part of :class:`flowctl.store.core.SqlStore` (a mix-in over its
``engine``, ``sa``, ``t`` and ``pg``; the DBAPI queries it shares with the SQLAlchemy-free
:class:`flowctl.store.reader.SqlReader` — batched events, stats — are in :class:`DbapiReads`); :func:`stats` and :func:`steps_of` work on any
:class:`flowctl.store.protocol.Store`.
"""
from __future__ import annotations

import contextlib

from flowctl.store.reader import DbapiReads
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
        with self._read() as conn:
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


#: Upper bounds (seconds) of the tool-call latency histogram (``flowctl_step_seconds``).
LATENCY_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _usage() -> dict:
    return {"calls": 0, "reasks": 0, "input_tokens": 0, "output_tokens": 0, "cost": None}


def _add_usage(entry: dict, fact: list) -> None:
    latency, tin, tout, cost, reask = (list(fact[4:9]) + [None] * 5)[:5]
    entry["calls"] += 1
    entry["reasks"] += bool(reask)
    entry["input_tokens"] += int(tin or 0)
    entry["output_tokens"] += int(tout or 0)
    if isinstance(cost, (int, float)):
        entry["cost"] = round((entry["cost"] or 0.0) + cost, 9)


def _quantile(values: list, q: float) -> float:
    """The ``q`` quantile (0-1) of ``values`` by linear interpolation between closest ranks; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _buckets(calls: list, width: float) -> dict:
    """``{tool: [{start, calls, failures, mean_ms, p95_ms}]}`` of ``calls`` ``(ts, tool, failed,
    duration_ms)``, the buckets ``width`` seconds wide (aligned on the epoch), oldest first."""
    grouped: dict = {}
    for ts, tool, failed, ms in calls:
        start = (ts // width) * width
        entry = grouped.setdefault(tool, {}).setdefault(start, [0, []])
        entry[0] += failed
        entry[1].append(ms)
    return {tool: [{"start": start, "calls": len(ms), "failures": failures,
                    "mean_ms": sum(ms) / len(ms), "p95_ms": _quantile(ms, 0.95)}
                   for start, (failures, ms) in sorted(per.items())] for tool, per in sorted(grouped.items())}


def stats(store, limit: int = 1000, since: float | None = None, *, flow: str | None = None,
          children: bool = False, bucket: float | None = None) -> dict:
    """The figures of the latest ``limit`` runs created since ``since`` (epoch seconds; of ``flow``;
    top-level runs only unless ``children``), from the runs' figures
    (:meth:`~flowctl.store.protocol.Store.stats_figures`: each run's facts folded, kept with its
    summary) or, with ``bucket``, their facts (:meth:`~flowctl.store.protocol.Store.stats_rows`,
    folded here alike):

    * ``runs``, ``by_status`` (status -> runs), ``by_flow`` (flow -> status -> runs),
      ``success_rate`` (succeeded over finished; None when none finished), ``mean_steps``;
    * ``step_ms: {p50, p99}`` (tool-call durations, milliseconds) and ``tools: {tool: {calls,
      failures, retries, failure_rate, retry_rate}}``; ``latency: {tool: {count, sum_s, le}}``
      (``le``: ``[[bound, calls]]``, the calls at or under each bound of :data:`LATENCY_BOUNDS`,
      seconds, cumulative);
    * ``compensation_failures``, ``compensations: {started, succeeded, failed}``, ``gate: {allow,
      deny, review, warn}`` (decisions; ``warn``: soft-rule warnings), ``reviews: {requested,
      timed_out, pending}`` (``pending``: counted runs paused now);
    * ``models: {calls, reasks, reask_rate, input_tokens, output_tokens, cost, by_flow, by_state,
      by_model}``: the ``model_called`` calls (``reask_rate``: re-asks over calls, None without
      calls; ``cost`` None when no call was priced); ``by_state`` is keyed ``flow/state``;
    * ``counts``: what the defence rates of :func:`flowctl.store.health.health` are made of;
    * with ``bucket`` (seconds): ``buckets`` per tool (:func:`_buckets`), of calls at or after ``since``.

    Rates are fractions (0-1)."""
    import bisect
    import statistics  # (imports decimal, fractions, random: not for the other read commands)

    from flowctl.store.summary import BLOCKS, TAKEOVER, figures_of

    calls = []
    if bucket:  # the calls' times: from the facts (the figures keep none)
        rows, facts = store.stats_rows(limit, since, flow, not children)
        per_run: dict = {r["id"]: [] for r in rows}
        for run_id, f in facts:
            per_run[run_id].append(f)
            if f[0] in ("tool_succeeded", "tool_failed") and len(f) > 3 and f[3] and isinstance(f[1], (int, float)) \
                    and (since is None or f[1] >= since):
                ms = f[4] if len(f) > 4 and isinstance(f[4], (int, float)) else 0.0
                calls.append((f[1], f[3], f[0] == "tool_failed", ms))
        figures = [(r["id"], figures_of(per_run[r["id"]])) for r in rows]
    elif hasattr(store, "stats_figures"):
        rows, figures = store.stats_figures(limit, since, flow, not children)
    else:  # a store of the protocol before stats_figures
        rows, facts = store.stats_rows(limit, since, flow, not children)
        per_run = {r["id"]: [] for r in rows}
        for run_id, f in facts:
            per_run[run_id].append(f)
        figures = [(r["id"], figures_of(per_run[r["id"]])) for r in rows]
    flow_of = {r["id"]: r.get("flow") for r in rows}
    by_status: dict = {}
    by_flow: dict = {}
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        per = by_flow.setdefault(r.get("flow") or "", {})
        per[r["status"]] = per.get(r["status"], 0) + 1
    tools: dict = {}
    latency: dict = {}
    durations = []
    gate = dict.fromkeys(("allow", "deny", "review", "warn"), 0)
    comp = dict.fromkeys(("started", "succeeded", "failed"), 0)
    n = dict.fromkeys(("tool_calls", "blocked", "reviews", "review_timeouts", "compensations",
                       "compensation_failures", "takeovers"), 0)
    models = _usage()
    by_model, by_state, by_flow_model = {}, {}, {}
    took_over = set()
    per_tool: dict = {}  # tool -> [calls, failures, retries, durations (ms, in call order)]
    invoked = 0
    for run_id, (run_tools, run_invoked, other) in figures:
        invoked += run_invoked
        for name, (count, failures, retries, ms_list) in run_tools.items():
            entry = per_tool.get(name)
            if entry is None:
                per_tool[name] = [count, failures, retries, list(ms_list)]
            else:
                entry[0] += count
                entry[1] += failures
                entry[2] += retries
                entry[3].extend(ms_list)
        for f in other:
            t = f[0]
            name = f[3] if len(f) > 3 else None
            if t.startswith("compensation_"):
                comp[t[len("compensation_"):]] += 1
            elif t == "review_requested":
                n["reviews"] += 1
            elif t == "review_timed_out":
                n["review_timeouts"] += 1
            elif t == "policy_decided":
                outcome = f[4] if len(f) > 4 else None
                if outcome in gate:
                    gate[outcome] += 1
                gate["warn"] += f[5] if len(f) > 5 and isinstance(f[5], int) else 0
            elif t == "error_caught" and name in BLOCKS:
                n["blocked"] += 1
            elif t in TAKEOVER or (t == "run_cancelled" and not name):
                took_over.add(run_id)
            elif t == "model_called":
                fl, state = flow_of.get(run_id) or "", f[2] or ""
                for entry in (models, by_model.setdefault(name or "", _usage()), by_flow_model.setdefault(fl, _usage()),
                              by_state.setdefault(f"{fl}/{state}", _usage())):
                    _add_usage(entry, f)
    n["tool_calls"] = invoked
    for name, (count, failures, retries, ms_list) in per_tool.items():
        tools[name] = {"calls": count, "failures": failures, "retries": retries}
        seconds = [ms / 1000.0 for ms in ms_list]
        ordered = sorted(seconds)
        # le: the calls at or under each bound (cumulative); sum_s added in call order
        latency[name] = {"count": count, "sum_s": sum(seconds, 0.0),
                         "le": [[bound, bisect.bisect_right(ordered, bound)] for bound in LATENCY_BOUNDS]}
        durations.extend(ms_list)
    n.update(compensations=comp["started"], compensation_failures=comp["failed"], takeovers=len(took_over))
    finished = sum(by_status.get(s, 0) for s in ("succeeded", "failed", "cancelled"))
    for entry in tools.values():
        entry["failure_rate"] = entry["failures"] / entry["calls"] if entry["calls"] else 0.0
        entry["retry_rate"] = entry["retries"] / entry["calls"] if entry["calls"] else 0.0
    q = statistics.quantiles(durations, n=100, method="inclusive") if len(durations) >= 2 else durations * 99 or [0.0] * 99
    models.update(reask_rate=models["reasks"] / models["calls"] if models["calls"] else None,
                  by_flow=by_flow_model, by_state=by_state, by_model=by_model)
    out = {"runs": len(rows), "by_status": by_status, "by_flow": by_flow,
           "success_rate": by_status.get("succeeded", 0) / finished if finished else None,
           "mean_steps": sum(r["steps"] for r in rows) / len(rows) if rows else None,
           "compensation_failures": comp["failed"], "compensations": comp, "gate": gate,
           "reviews": {"requested": n["reviews"], "timed_out": n["review_timeouts"],
                       "pending": by_status.get("paused", 0)},
           "step_ms": {"p50": q[49], "p99": q[98]}, "tools": tools,
           "latency": latency, "models": models, "counts": n}
    if bucket:
        out["buckets"] = _buckets(calls, float(bucket))
    return out


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
            current["attempts"] = max(current["attempts"], ev.get("attempt") or 1)  # a retried model call
            current["reasks"] = current.get("reasks", 0) + (1 if d.get("reask") else 0)
            current["duration_ms"] += d.get("latency_ms") or 0
            current["tool"] = current["tool"] or d.get("model")
            if not current["outcome"] or current["outcome"].startswith("retrying"):  # answered, this attempt
                current["outcome"] = "ok"
        elif t == "model_failed":  # a model call that raised (its state's retry rules decide what follows)
            current["model_calls"] = current.get("model_calls", 0) + 1
            current["attempts"] = max(current["attempts"], ev.get("attempt") or 1)
            current["duration_ms"] += d.get("latency_ms") or 0
            current["tool"] = current["tool"] or d.get("model")
            current["outcome"], current["error"] = "failed", f"{d.get('error')}: {d.get('message')}"
        elif t == "agent_tool_call":  # the tools an agent's model called, in order
            current.setdefault("agent_tools", []).append(d.get("name"))
        elif t == "agent_tool_result" and not d.get("ok"):  # refused or failed, and told to the model
            current.setdefault("agent_errors", []).append(f"{d.get('name')}: {d.get('error')}: {d.get('message')}")
        elif t in ("tool_invoked",) and current["type"] == "agent":
            pass  # an agent's tool calls are listed by name (agent_tools), its tries are its model's
        elif t in ("tool_invoked",) and d.get("purpose") != "notify":
            before, called = current.get("tool"), d.get("tool")  # a fallback after the primary: both, in order
            current["tool"] = _calls(before, called)
            current["attempts"] = max(current["attempts"], ev.get("attempt") or 1)
            current["recovered"] = False  # a new call: what verify said of an earlier one is not about it
        elif t == "step_recovered" and d.get("after") != "timeout":  # a call in flight when its process died
            current["recovered"] = bool(d.get("happened"))
        elif t == "tool_succeeded":
            current["duration_ms"] += d.get("duration_ms") or 0
            # a call recovered after a crash whose verify confirmed it but could not give its output
            current["outcome"] = ("ok (recovered, output unknown)" if d.get("output_unknown")
                                  else "ok (recovered: verify found it done)" if current.get("recovered") else "ok")
        elif t == "tool_failed":
            current["duration_ms"] += d.get("duration_ms") or 0
            current["outcome"] = "failed"
            current["error"] = f"{d.get('error')}: {d.get('message')}"
            current["raised_at"], current["raised_for"] = d.get("at"), d.get("error")  # its own place, or none
        elif t == "retry_scheduled":  # between attempts (its delay slept in process, or the run parked)
            current["outcome"] = f"retrying (attempt {d.get('next_attempt') or current['attempts'] + 1})"
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
            if e.get("type") != current.get("raised_for"):  # (new-user finding: a fallback's schema error
                current["raised_at"] = None               # showed the place the earlier tool error was raised)
        elif t == "transition_taken":
            current["to"] = d.get("to")
            # a step parked (a wait, an operator's pause) and then continued ended ok (new-user finding:
            # it kept saying 'waiting' after the run succeeded); a review's row keeps its decision
            current["outcome"] = (current.get("decided") or "ok" if current["outcome"] in ("", "waiting", "paused")
                                  or current["outcome"].startswith("retrying") else current["outcome"])
        elif t in ("run_succeeded",):
            current["outcome"] = "succeeded"
        elif t == "run_failed":
            current["outcome"] = "failed"
            e = d.get("error") or {}
            current["error"] = current["error"] or f"{e.get('type')}: {e.get('message')}"
        elif t == "run_cancelled":
            why = f" by {d['by']}" if d.get("by") else f" ({d['reason']})" if d.get("reason") else ""
            current["outcome"] = "cancelled" + why
        elif t == "run_paused":  # a retry delay parked ``waiting`` still says which attempt comes next
            if not current["outcome"].startswith("retrying"):
                current["outcome"] = d.get("status")
        elif t == "review_decided":  # kept through an operator's pause that comes after it (new-user finding)
            current["outcome"] = current["decided"] = f"{d.get('decision')}" + (f" by {d.get('by')}" if d.get("by") else "")
            if current["type"] != "review":  # the gate sent a tool call to review (review_when)
                current["gate_review"] = current["outcome"]
        elif t == "review_timed_out":
            current["outcome"] = "review timed out"
        elif t == "fallback_used":
            before, called = current.get("tool"), d.get("tool")
            current["tool"] = _calls(before, called)
            current["outcome"] = "fallback"
    if current is not None:
        yield _ended(current)


def _calls(before, called):
    """The tools a step called, in order: ``primary → fallback``; the same tool again is one name."""
    if not before or not called:
        return called or before
    return before if before.endswith(called) else f"{before} → {called}"


def _ended(step: dict) -> dict:
    """A step as :func:`iter_steps` gives it: a fan-out still under way lasts as long as it has so far."""
    step.pop("decided", None)  # (the decision is the outcome; kept apart only while the step went on)
    began = step.pop("fanout_at", None)
    if began is not None:
        step["duration_ms"] = (step["ended"] - began) * 1000.0
    return step
