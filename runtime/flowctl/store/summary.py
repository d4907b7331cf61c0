"""A run's *facts*: the few fields of its events that ``flowctl stats``, its health rates and the
Prometheus metrics count, kept per run once it has ended (schema 9, ``flowctl_run_summaries``).

``stats`` over the latest thousand of 100,000 runs must not take a thousand runs' events apart
(issue 17 target 4: packed rows, schema 7, would have to be unpacked, in SQL or in Python). So the
commit that ends a run (:meth:`flowctl.store.core.SqlStore.commit`) writes their facts beside it
(:func:`write_summary`), keyed by the run's ``last_seq`` at that time, **in the same
transaction** (issue 17 target 8: no commit of its own). The facts come from the events as the
store writes them: a :class:`Tally` keeps, per run, the facts of the events this store wrote for
it (contiguously, since its first commit of the run); only the events before those that may hold
facts are read, in that transaction (a claimed run's ``run_started`` alone, written by the process
that submitted it, holds none: :func:`reads_before`).
A summary is used only while it describes the run as it stands — the run has ended and its
``last_seq`` is the summary's — so a run redriven after it ended is read from its events
(:func:`facts_of`), as are runs that have not ended and runs that ended before schema 9.

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

A summary also keeps the run's *figures* (schema 12, column ``figures``): its facts folded as
``stats`` folds them (:func:`figures_of`), so that ``stats`` over the latest thousand runs decodes
and adds a thousand small lists instead of taking every fact apart (issue 17 target 4d). Figures
are ``[tools, invoked, other]``: ``tools`` ``{tool: [calls, failures, retries, [duration_ms, ...]]}``
(the ``tool_succeeded`` / ``tool_failed`` facts that name a tool, in order; ``retries``: the
``retry_scheduled`` facts that follow a failed call of that tool), ``invoked`` the number of
``tool_invoked`` facts, ``other`` every other fact as it is. A summary written before schema 12
has none: its figures are folded from its facts as they are read.

Summaries are derived data, not records: ``audit verify`` checks the events they come from, and
``audit verify RUN`` a run's summary against them (:func:`summary_problem`).
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


def figures_of(facts) -> list:
    """The figures ``[tools, invoked, other]`` of a run's ``facts`` (in ``seq`` order; see the
    module docstring): what :func:`flowctl.store.history.stats` adds up per run."""
    tools: dict = {}
    invoked = 0
    other = []
    last_failed = None
    for f in facts:
        t = f[0]
        if t == "tool_succeeded" or t == "tool_failed":
            name = f[3] if len(f) > 3 else None
            if name:
                ms = f[4] if len(f) > 4 and isinstance(f[4], (int, float)) else 0.0
                entry = tools.get(name)
                if entry is None:
                    entry = tools[name] = [0, 0, 0, []]
                entry[0] += 1
                entry[3].append(ms)
                if t == "tool_failed":
                    entry[1] += 1
                    last_failed = name
                else:
                    last_failed = None
                continue
        elif t == "retry_scheduled":
            if last_failed is not None:
                tools[last_failed][2] += 1
            continue
        elif t == "tool_invoked":
            invoked += 1
            continue
        other.append(f)
    return [tools, invoked, other]


def figures_text(facts) -> str:
    """The stored text of the figures of ``facts``: compact JSON."""
    return json.dumps(figures_of(facts), separators=(",", ":"), default=str)


def read_figures(value) -> bool:
    """Whether ``value`` (parsed) is a run's figures, as :func:`figures_of` makes them."""
    if type(value) is not list or len(value) != 3:
        return False
    tools, invoked, other = value
    if type(tools) is not dict or type(invoked) is not int or not read_summary_value(other):
        return False
    for entry in tools.values():
        if (type(entry) is not list or len(entry) != 4 or type(entry[3]) is not list
                or len(entry[3]) != entry[0]):
            return False
    return True


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


class Tally:
    """Per store: the facts of the events it wrote for each run, from its first commit of the run on
    (``run id -> [first seq, last seq, facts]``), so that the commit ending the run need not read
    them back. An entry is used only if the commit continues it (its ``expect_seq`` is the entry's
    last seq: no other process wrote the run in between); else the run's earlier events are read."""

    #: entries kept at most (a long-lived worker forgets them all: a miss only costs a read)
    MAX = 100_000

    def __init__(self):
        self.runs: dict = {}

    def started(self, run_id: str, events) -> None:
        """``events`` (from seq 1) were written with the new run ``run_id``."""
        if len(self.runs) >= self.MAX:
            self.runs.clear()
        self.runs[run_id] = [1, events[-1]["seq"] if events else 0, facts_of(events)]

    def written(self, run_id: str, expect_seq: int, events) -> None:
        """A commit of ``run_id`` at ``expect_seq`` wrote ``events`` (it succeeded)."""
        if not events:
            return
        entry = self.runs.get(run_id)
        if entry is None or entry[1] != expect_seq:
            if len(self.runs) >= self.MAX:
                self.runs.clear()
            self.runs[run_id] = [expect_seq + 1, events[-1]["seq"], facts_of(events)]
            return
        entry[1] = events[-1]["seq"]
        entry[2].extend(facts_of(events))

    def ending(self, run_id: str, expect_seq: int, events) -> tuple:
        """``(first_seq, facts, last_seq)`` for the commit at ``expect_seq`` that ends ``run_id``
        with ``events``: the facts of the run's events from ``first_seq`` on (the ones before it
        are read by :func:`write_summary`); the entry is dropped."""
        entry = self.runs.pop(run_id, None)
        last = events[-1]["seq"] if events else expect_seq
        if entry is None or entry[1] != expect_seq:
            return expect_seq + 1, facts_of(events), last
        return entry[0], entry[2] + facts_of(events), last


def reads_before(first_seq: int) -> bool:
    """Whether the summary of a run whose events this store wrote from ``first_seq`` on must read
    the events before it. Event 1 of every run is its ``run_started`` (written with the new run by
    :func:`flowctl.engine.lifecycle.create`, the one place runs are created), which is no fact: a
    run claimed right after it was submitted (``first_seq`` 2) has none to read — one read fewer
    per worker run (issue 17, target 8)."""
    return first_seq > 2


def write_summary(execute, pg: bool, run_id: str, first_seq: int, facts: list, last_seq: int) -> None:
    """Write the summary of ``run_id`` inside the caller's open transaction (the commit that ends
    it): ``facts`` those of its events from ``first_seq`` on, the events before ``first_seq`` read
    here (packed rows with ``seq < first_seq``: none for a run this store created). ``execute(sql,
    params)`` runs one DBAPI statement and returns a cursor (see :func:`flowctl.store.ledger.append`)."""
    rows = execute(before_sql(pg), (run_id, int(first_seq))).fetchall() if reads_before(first_seq) else ()
    execute(upsert_sql(pg), summary_row(run_id, facts, last_seq, rows))


def before_sql(pg: bool) -> str:
    """The read of a run's stored event rows before a seq (parameters: run id, that seq)."""
    p = "%s" if pg else "?"
    return (f"SELECT seq, ts, type, state, attempt, data, prev_hash, hash, fence, n_events "
            f"FROM flowctl_events WHERE run_id = {p} AND seq < {p} ORDER BY seq")


def summary_row(run_id: str, facts: list, last_seq: int, before=()) -> tuple:
    """The parameters of :func:`upsert_sql` ``(run_id, last_seq, facts text, figures text)``:
    ``facts`` after those of the stored rows ``before`` (rows of :func:`before_sql`)."""
    from flowctl.store.records import stored_events

    if before:
        events = []
        for row in before:
            events.extend(stored_events(run_id, tuple(row)))
        facts = facts_of(events) + facts
    return (run_id, int(last_seq), json.dumps(facts, separators=(",", ":"), default=str),
            json.dumps(figures_of(facts), separators=(",", ":"), default=str))


#: :func:`upsert_sql` on PostgreSQL as a common table expression of the statement of the commit that
#: ends the run, written only if ``{done}`` (the CTE its UPDATE returns from) has a row (parameters
#: ``s_run``, ``s_seq``, ``s_facts``, ``s_figures``: :func:`summary_row`'s)
UPSERT_CTE_PG = ("s AS (INSERT INTO flowctl_run_summaries (run_id, last_seq, facts, figures) "
                 "SELECT %(s_run)s::text, %(s_seq)s::integer, %(s_facts)s::text, %(s_figures)s::text FROM {done} "
                 "ON CONFLICT (run_id) DO UPDATE SET last_seq = excluded.last_seq, facts = excluded.facts, "
                 "figures = excluded.figures)")


def summary_problem(store, row: dict, events) -> str | None:
    """Why the summary stored for the ended run ``row`` is not what its verified ``events`` (those
    of :data:`FACT_TYPES` at least) say, or None (no summary, or one of an older head, which
    ``stats`` does not read). ``stats``, its ``--check`` alarm and the metrics count summaries, so
    an edited one would change what they say without touching the hash-chained log (breaker
    finding: deleting its policy_decided facts silenced ``stats --check``)."""
    reader = getattr(store, "summary_of", None)
    kept = reader(row["id"]) if reader is not None else None
    if kept is None or kept[0] != row.get("last_seq"):
        return None
    facts = read_summary(kept[1])
    if facts is None or facts != json.loads(json.dumps(facts_of(events))):
        return ("its summary (the facts flowctl stats and its --check count) is not what its events say: "
                "edited in the store")
    return None


def upsert_sql(pg: bool) -> str:
    """The statement that writes a run's summary ``(run_id, last_seq, facts, figures)`` over any older one."""
    p = "%s" if pg else "?"
    return (f"INSERT INTO flowctl_run_summaries (run_id, last_seq, facts, figures) VALUES ({p}, {p}, {p}, {p}) "
            "ON CONFLICT (run_id) DO UPDATE SET last_seq = excluded.last_seq, facts = excluded.facts, "
            "figures = excluded.figures")


__all__ = ["BLOCKS", "FACT_TYPES", "TAKEOVER", "Tally", "UPSERT_CTE_PG", "before_sql", "reads_before", "summary_problem",
           "summary_row", "write_summary",
           "facts_of", "figures_of", "figures_text", "read_figures", "read_summaries", "read_summary", "read_summary_value", "summary_text",
           "upsert_sql"]
