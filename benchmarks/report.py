"""Targets and verdicts of issue 17, and the table of them at the top of BENCHMARKS.md.

A *target* is ``{value, limit, met, higher_is_better, unit, ratios}``: ``value`` is measured in
this run, ``limit`` is the issue's bound, ``met`` the verdict. ``value`` may be None when the
measurement did not finish (a time-boxed size that ran out of time); then ``lower_bound`` says
what is known (the value is at least that) and the verdict follows from it.

:func:`collect` gathers every part's targets into issue-17 order; :func:`render_targets` writes
the rows (value, limit, verdict, same-run ratios).
"""
from __future__ import annotations

import math

#: issue 17's targets, in its order: (number, text). Each part's ``targets`` keys start with the number.
ISSUE_17 = (
    ("1", "In-memory step <= 0.8x one `transitions` transition (compiled conditions, hash chain included)"),
    ("2a", "SQLite durable step <= 1.5x the raw sqlite3 floor"),
    ("2b", "Group commit: >= 2x steps/s at 8 concurrent runs (vs the same runs one at a time)"),
    ("3a", "Map over 10,000 items on SQLite <= 2 ms per item"),
    ("3b", "Map flat in the item count: ms per item at 10,000 <= 1.25x at 1,000"),
    ("4a", "100,000 stored runs: `runs` (list_runs, 50 newest) <= 20 ms"),
    ("4b", "100,000 stored runs: `runs --status failed` <= 20 ms"),
    ("4c", "100,000 stored runs: run-id prefix lookup <= 20 ms"),
    ("4d", "100,000 stored runs: `stats` <= 20 ms"),
    ("4e", "Starting a run with 10,000 paused runs <= 1.15x with none"),
    ("4f", "The gate's rate count uses an index on (tool, scope, at)"),
    ("5a", "`trace` of a 100,000-step run <= 10 s"),
    ("5b", "`trace` of a 100,000-step run <= 200 MB peak RSS"),
    ("5c", "`audit verify` of a 100,000-step run <= 10 s"),
    ("5d", "`audit verify` of a 100,000-step run <= 200 MB peak RSS"),
    ("6a", "10,000-state project: `flowctl runs` <= 0.5 s"),
    ("6b", "10,000-state project: a 10-step `flowctl run` <= 1.5 s"),
    ("7a", "Cold start `flowctl run` (3-step flow, SQLite) <= 200 ms"),
    ("7b", "Cold start `flowctl trace RUN` <= 200 ms"),
    ("7c", "Cold start `flowctl runs` <= 200 ms"),
    ("8a", "One worker process >= 1.5x the runs/s before issue 17 (same machine)"),
    ("8b", "p99 step commit < 10 ms at 4 worker processes"),
)


def met(value, limit, higher_is_better: bool = False) -> bool:
    """The verdict: ``value`` within ``limit`` (a bool ``limit``: ``value`` is it). ``value`` None
    (a time-boxed measurement that ran out of time, the value at least ``lower_bound``, or one that
    did not run): not met — nothing shows it within the limit."""
    if isinstance(limit, bool):
        return value is limit
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return value >= limit if higher_is_better else value <= limit


def target(value, limit: float, *, higher_is_better: bool = False, unit: str = "", ratios: dict | None = None,
           lower_bound=None, note: str = "") -> dict:
    """One target's row (see the module docstring); ``ratios``: other same-run ratios to show."""
    out = {"value": value, "limit": limit, "higher_is_better": higher_is_better, "unit": unit,
           "met": met(value, limit, higher_is_better), "ratios": dict(ratios or {})}
    if lower_bound is not None:
        out["lower_bound"] = lower_bound
    if note:
        out["note"] = note
    return out


def collect(results: dict) -> list:
    """``[(number, text, part, target or None)]`` for every issue-17 target, in the issue's order;
    None where no part of this run measured it."""
    found: dict = {}
    for part, data in results.items():
        if isinstance(data, dict):
            for name, t in (data.get("targets") or {}).items():
                number = name.split(" ", 1)[0].rstrip(".")
                if any(number == n for n, _ in ISSUE_17):
                    found[number] = (part, t)
    return [(n, text, *found.get(n, (None, None))) for n, text in ISSUE_17]


def fmt_value(t: dict) -> str:
    unit = t.get("unit", "")
    if t.get("value") is None:
        return f"> {t['lower_bound']:.3g} {unit}".strip() if t.get("lower_bound") is not None else "not measured"
    v = t["value"]
    if isinstance(v, bool):
        return "yes" if v else "no"
    return f"{v:.3g} {unit}".strip()


def verdict(t: dict | None) -> str:
    if t is None:
        return "not measured"
    word = "met" if t["met"] else "**not met**"
    v = t.get("value")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and t["limit"] and abs(v / t["limit"] - 1) < 0.1:
        word += " (within 10%)"
    return word


def render_targets(results: dict) -> list:
    """Markdown lines: one row per issue-17 target."""
    lines = ["| # | target (issue 17) | value | limit | verdict | same-run ratios / notes |",
             "| --- | --- | ---: | ---: | --- | --- |"]
    for number, text, part, t in collect(results):
        if t is None:
            lines.append(f"| {number} | {text} | – | – | not measured | part not run |")
            continue
        limit = "yes" if isinstance(t["limit"], bool) else f"{'≥' if t.get('higher_is_better') else '≤'} {t['limit']:g}"
        extra = "; ".join(f"{k} {v:.3g}" if isinstance(v, (int, float)) else f"{k} {v}"
                          for k, v in t.get("ratios", {}).items())
        if t.get("note"):
            extra = f"{extra}; {t['note']}" if extra else t["note"]
        lines.append(f"| {number} | {text} | {fmt_value(t)} | {limit} | {verdict(t)} | {extra} |")
    return lines
