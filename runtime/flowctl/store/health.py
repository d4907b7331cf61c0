"""The health of a project's runs over a window: the figures of :func:`flowctl.store.history.stats`
plus the four defence rates, each against its threshold (the console's Health page; a CLI later).

The defence rates (fractions 0-1; None when their denominator is 0), counted from the events of the
same runs ``stats`` counts (the latest ``limit`` top-level runs created since ``since``):

* ``validation_block_rate``: tool calls blocked by a check — an ``error_caught`` whose error is
  ``SchemaMismatch`` (input or output schema), ``BoundaryViolation`` or ``PolicyDenied`` (the gate)
  — over the tool calls made (``tool_invoked``) plus those blocked before they were made.
* ``pause_timeout_rate``: ``review_timed_out`` over ``review_requested`` (reviews nobody decided in time).
* ``rollback_failure_rate``: ``compensation_failed`` over ``compensation_started`` (undos that
  failed for good, each left as residue).
* ``human_takeover_rate``: runs an operator took over — cancelled by someone, redriven
  (``run_redriven``) or whose context was edited (``context_overridden``) — over the runs.

:data:`THRESHOLDS` are the defaults (a rate *over* its threshold is flagged): 20%, 10%, 1%, 5%.
Events are read through the store (:func:`flowctl.store.events.iter_events`), never by SQL on the
events table. Errors: :class:`~flowctl.errors.StoreError` from the store.
"""
from __future__ import annotations

from flowctl.store.events import iter_events
from flowctl.store.history import stats

#: rate name -> the fraction above which it is flagged
THRESHOLDS = {"validation_block_rate": 0.20, "pause_timeout_rate": 0.10, "rollback_failure_rate": 0.01,
              "human_takeover_rate": 0.05}
#: error types of a call blocked by a check (schema, boundary, the gate)
BLOCKS = frozenset({"SchemaMismatch", "BoundaryViolation", "PolicyDenied"})
#: events that mean an operator took the run over
TAKEOVER = frozenset({"run_redriven", "context_overridden"})


def _rate(part: int, whole: int):
    return part / whole if whole else None


def defence_counts(store, run_ids) -> dict:
    """``{tool_calls, blocked, reviews, review_timeouts, compensations, compensation_failures,
    takeovers}``: the counts behind the defence rates, over the events of ``run_ids``."""
    n = dict.fromkeys(("tool_calls", "blocked", "reviews", "review_timeouts", "compensations",
                       "compensation_failures", "takeovers"), 0)
    for run_id in run_ids:
        took_over = False
        for ev in iter_events(store, run_id):
            t = ev["type"]
            data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
            if t == "tool_invoked":
                n["tool_calls"] += 1
            elif t == "error_caught" and ((data.get("error") or {}).get("type") in BLOCKS):
                n["blocked"] += 1
            elif t == "review_requested":
                n["reviews"] += 1
            elif t == "review_timed_out":
                n["review_timeouts"] += 1
            elif t == "compensation_started":
                n["compensations"] += 1
            elif t == "compensation_failed":
                n["compensation_failures"] += 1
            elif t in TAKEOVER or (t == "run_cancelled" and not data.get("reason")):
                took_over = True
        n["takeovers"] += took_over
    return n


def health(store, *, since: float | None = None, limit: int = 1000, flow: str | None = None,
           thresholds: dict | None = None) -> dict:
    """``stats(store, limit, since, flow=flow)`` plus ``defence: {rate name: {rate, threshold,
    over, part, whole}}`` and ``counts`` (:func:`defence_counts`). ``since``: epoch seconds;
    ``thresholds``: rate name -> fraction, over :data:`THRESHOLDS`. Raises ``UsageError`` for an
    unknown rate name."""
    from flowctl.errors import UsageError

    limits = dict(THRESHOLDS)
    for name, value in (thresholds or {}).items():
        if name not in THRESHOLDS:
            raise UsageError(f"unknown rate {name!r}", hint="rates: " + ", ".join(THRESHOLDS))
        limits[name] = float(value)
    out = stats(store, limit, since, flow=flow)
    rows, _ = store.stats_rows(limit, since, flow, True)
    n = defence_counts(store, [r["id"] for r in rows])
    parts = {"validation_block_rate": (n["blocked"], n["tool_calls"] + n["blocked"]),
             "pause_timeout_rate": (n["review_timeouts"], n["reviews"]),
             "rollback_failure_rate": (n["compensation_failures"], n["compensations"]),
             "human_takeover_rate": (n["takeovers"], len(rows))}
    defence = {}
    for name, (part, whole) in parts.items():
        rate = _rate(part, whole)
        defence[name] = {"rate": rate, "threshold": limits[name], "over": rate is not None and rate > limits[name],
                         "part": part, "whole": whole}
    out.update(defence=defence, counts=n)
    return out


__all__ = ["BLOCKS", "THRESHOLDS", "defence_counts", "health"]
