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
Counted from the runs' facts (:mod:`flowctl.store.summary`), as ``stats`` reads them. Errors: :class:`~flowctl.errors.StoreError` from the store.
"""
from __future__ import annotations

from flowctl.store.events import iter_events
from flowctl.store.history import stats
from flowctl.store.summary import BLOCKS, TAKEOVER  # noqa: F401 - health.BLOCKS, health.TAKEOVER

#: rate name -> the fraction above which it is flagged
THRESHOLDS = {"validation_block_rate": 0.20, "pause_timeout_rate": 0.10, "rollback_failure_rate": 0.01,
              "human_takeover_rate": 0.05}


def _rate(part: int, whole: int):
    return part / whole if whole else None


def defence_counts(store, run_ids) -> dict:
    """``{tool_calls, blocked, reviews, review_timeouts, compensations, compensation_failures,
    takeovers}``: the counts behind the defence rates, over the events of ``run_ids`` (read one run
    at a time; :func:`health` has them from ``stats``' facts)."""
    from flowctl.store.summary import facts_of

    n = dict.fromkeys(("tool_calls", "blocked", "reviews", "review_timeouts", "compensations",
                       "compensation_failures", "takeovers"), 0)
    kinds = {"tool_invoked": "tool_calls", "review_requested": "reviews", "review_timed_out": "review_timeouts",
             "compensation_started": "compensations", "compensation_failed": "compensation_failures"}
    for run_id in run_ids:
        took_over = False
        for f in facts_of(iter_events(store, run_id)):
            t = f[0]
            if t in kinds:
                n[kinds[t]] += 1
            elif t == "error_caught" and f[3] in BLOCKS:
                n["blocked"] += 1
            elif t in TAKEOVER or (t == "run_cancelled" and not f[3]):
                took_over = True
        n["takeovers"] += took_over
    return n


def health(store, *, since: float | None = None, limit: int = 1000, flow: str | None = None,
           thresholds: dict | None = None, bucket: float | None = None) -> dict:
    """``stats(store, limit, since, flow=flow, bucket=bucket)`` plus ``defence: {rate name: {rate, threshold,
    over, part, whole}}`` and ``counts`` (:func:`defence_counts`). ``since``: epoch seconds;
    ``thresholds``: rate name -> fraction, over :data:`THRESHOLDS`. Raises ``UsageError`` for an
    unknown rate name."""
    from flowctl.errors import UsageError

    limits = dict(THRESHOLDS)
    for name, value in (thresholds or {}).items():
        if name not in THRESHOLDS:
            raise UsageError(f"unknown rate {name!r}", hint="rates: " + ", ".join(THRESHOLDS))
        limits[name] = float(value)
    out = stats(store, limit, since, flow=flow, bucket=bucket)
    n = out["counts"]
    parts = {"validation_block_rate": (n["blocked"], n["tool_calls"] + n["blocked"]),
             "pause_timeout_rate": (n["review_timeouts"], n["reviews"]),
             "rollback_failure_rate": (n["compensation_failures"], n["compensations"]),
             "human_takeover_rate": (n["takeovers"], out["runs"])}
    defence = {}
    for name, (part, whole) in parts.items():
        rate = _rate(part, whole)
        defence[name] = {"rate": rate, "threshold": limits[name], "over": rate is not None and rate > limits[name],
                         "part": part, "whole": whole}
    out["defence"] = defence
    return out


__all__ = ["BLOCKS", "THRESHOLDS", "defence_counts", "health"]
