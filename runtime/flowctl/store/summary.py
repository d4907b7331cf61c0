"""A run's *facts*: the few fields of its events that ``flowctl stats``, its health rates and the
Prometheus metrics count, kept per run once it has ended (schema 9, ``flowctl_run_summaries``).

``stats`` over the latest thousand of 100,000 runs must not take a thousand runs' events apart
(issue 17 target 4: packed rows, schema 7, would have to be unpacked, in SQL or in Python). So the
commit that ends a run (:meth:`flowctl.store.core.SqlStore.commit`) reads the run's events once
and writes their facts beside it (:func:`summary_text`), keyed by the run's ``last_seq`` at that
time: on SQLite inside the final commit's own transaction (:func:`write_sqlite`), on PostgreSQL
just after it, as a cache. A summary is used only while it describes the run as it stands — the
run has ended and its ``last_seq`` is the summary's — so a run redriven after it ended, or one
whose summary write failed or was lost to a crash, is read from its events (:func:`facts_of`), as
are runs that have not ended and runs that ended before schema 9.

A fact is a list ``[type, ts, state, name, *values]`` (``ts`` epoch seconds; absent trailing
values are not written):

==========================================  ==========================================================
``tool_invoked``                            ``name``: the tool
``tool_succeeded`` / ``tool_failed``        ``name``: the tool; ``duration_ms``
``retry_scheduled``                         —
``compensation_started|succeeded|failed``   ``name``: the tool undone, when named
``review_requested`` / ``review_timed_out`` —
``policy_decided``                          ``name``: the tool; ``outcome`` (allow|deny|review), the
                                            number of soft-rule warnings
``error_caught``                            ``name``: the error's type
``run_cancelled``                           ``name``: the reason (None: cancelled by someone)
``run_redriven`` / ``context_overridden``   —
``model_called``                            ``name``: the model; ``latency_ms``, ``input_tokens``,
                                            ``output_tokens``, ``cost`` (None when unpriced),
                                            ``reask`` (true: the call was a re-ask)
==========================================  ==========================================================

Summaries are derived data, not records: ``audit verify`` checks the events they come from.
"""
from __future__ import annotations

import json

#: The event types a run's facts keep, in the table above.
FACT_TYPES = frozenset({
    "tool_invoked", "tool_succeeded", "tool_failed", "retry_scheduled", "compensation_started",
    "compensation_succeeded", "compensation_failed", "review_requested", "review_timed_out", "policy_decided",
    "error_caught", "run_cancelled", "run_redriven", "context_overridden", "model_called"})
#: error types of a call blocked by a check (schema, boundary, the gate)
BLOCKS = frozenset({"SchemaMismatch", "BoundaryViolation", "PolicyDenied"})
#: events that mean an operator took the run over
TAKEOVER = frozenset({"run_redriven", "context_overridden"})


def _fact(ev: dict) -> list:
    t = ev["type"]
    d = ev.get("data") if isinstance(ev.get("data"), dict) else {}
    head = [t, ev.get("ts"), ev.get("state")]
    if t in ("tool_invoked", "compensation_started", "compensation_succeeded", "compensation_failed"):
        return head + [d.get("tool")]
    if t in ("tool_succeeded", "tool_failed"):
        return head + [d.get("tool"), d.get("duration_ms")]
    if t == "policy_decided":
        return head + [d.get("tool"), d.get("outcome"), len(d.get("warnings") or ())]
    if t == "error_caught":
        e = d.get("error")
        return head + [e.get("type") if isinstance(e, dict) else None]
    if t == "run_cancelled":
        return head + [d.get("reason")]
    if t == "model_called":
        usage = d.get("usage") if isinstance(d.get("usage"), dict) else {}
        return head + [d.get("model"), d.get("latency_ms"), usage.get("input_tokens") or 0,
                       usage.get("output_tokens") or 0, d.get("cost"), bool(d.get("reask"))]
    return head


def facts_of(events) -> list:
    """The facts (lists, see the module docstring) of ``events`` (event dicts, in ``seq`` order)."""
    return [_fact(ev) for ev in events if ev.get("type") in FACT_TYPES]


def summary_text(events) -> str:
    """The stored text of ``events``' facts: compact JSON."""
    return json.dumps(facts_of(events), separators=(",", ":"), default=str)


def read_summary(text):
    """The facts of a stored summary, or None when it is not a JSON list (then the run's events are read)."""
    try:
        found = json.loads(text)
    except (TypeError, ValueError):
        return None
    return found if read_summary_value(found) else None


def read_summaries(text):
    """Like :func:`read_summary`, for the texts of several summaries joined as one JSON list."""
    try:
        found = json.loads(text)
    except (TypeError, ValueError):
        return None
    return found if isinstance(found, list) and all(read_summary_value(x) for x in found) else None


def read_summary_value(value) -> bool:
    """Whether ``value`` (parsed) is a summary: a list of non-empty lists."""
    return isinstance(value, list) and all(isinstance(f, list) and f for f in value)


def upsert_sql(pg: bool) -> str:
    """The statement that writes a run's summary ``(run_id, last_seq, facts)`` over any older one."""
    p = "%s" if pg else "?"
    return (f"INSERT INTO flowctl_run_summaries (run_id, last_seq, facts) VALUES ({p}, {p}, {p}) "
            "ON CONFLICT (run_id) DO UPDATE SET last_seq = excluded.last_seq, facts = excluded.facts")


_EVENT_ROWS = ("SELECT seq, ts, type, state, attempt, data, prev_hash, hash, fence, n_events FROM flowctl_events "
               "WHERE run_id = ? ORDER BY seq")


def write_sqlite(cur, run_id: str) -> None:
    """Write the summary of ``run_id`` inside the caller's open SQLite transaction on ``cur`` (a
    ``sqlite3`` cursor; the transaction that ends the run), from its events as that transaction
    left them: no transaction of its own. In a savepoint: when reading or writing fails, only the
    summary is undone (the run is then counted from its events) and the caller's commit goes on."""
    import sqlite3

    from flowctl.store.records import stored_events

    cur.execute("SAVEPOINT flowctl_summary")
    try:
        rows = cur.execute(_EVENT_ROWS, (run_id,)).fetchall()
        events = [ev for row in rows for ev in stored_events(run_id, row)]
        if events:
            cur.execute(upsert_sql(False), (run_id, events[-1]["seq"], summary_text(events)))
    except sqlite3.Error:
        cur.execute("ROLLBACK TO flowctl_summary")
    cur.execute("RELEASE flowctl_summary")


__all__ = ["write_sqlite", "BLOCKS", "FACT_TYPES", "TAKEOVER", "facts_of", "read_summaries", "read_summary", "read_summary_value", "summary_text", "upsert_sql"]
