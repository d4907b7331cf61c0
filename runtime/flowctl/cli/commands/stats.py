"""``flowctl stats``: success rate, steps, failure and retry rates per tool, step durations."""
from __future__ import annotations

import json
import statistics

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import open_project, open_store


def compute(store, limit: int = 1000, since: float | None = None, *, flow: str | None = None,
            children: bool = False) -> dict:
    """``{runs, by_status, success_rate, mean_steps, compensation_failures, step_ms: {p50, p99},
    tools: {tool: {calls, failures, retries, failure_rate, retry_rate}}}`` over the latest
    ``limit`` runs (of ``flow``; top-level runs only unless ``children``)."""
    rows = [r for r in store.list_runs(limit=limit, flow=flow, top_level=not children)
            if since is None or r["created_at"] >= since]
    by_status: dict = {}
    tools: dict = {}
    durations = []
    comp_failures = 0
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        last_failed = None
        for ev in store.events(r["id"]):
            d, t = ev["data"] or {}, ev["type"]
            if t in ("tool_succeeded", "tool_failed") and d.get("tool"):
                entry = tools.setdefault(d["tool"], {"calls": 0, "failures": 0, "retries": 0})
                entry["calls"] += 1
                entry["failures"] += t == "tool_failed"
                durations.append(d.get("duration_ms") or 0.0)
                last_failed = d["tool"] if t == "tool_failed" else None
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


def parse_since(text):
    """``--since``: an ISO-8601 time, or a duration ago (``1h``); epoch seconds, or None."""
    if not text:
        return None
    import time

    from flowctl.definition.durations import parse_duration
    from flowctl.errors import UsageError
    from flowctl.expr.expressions import _parse_time

    try:
        return time.time() - parse_duration(text)
    except ValueError:
        pass
    try:
        return _parse_time(text).timestamp()
    except ValueError:
        raise UsageError(f"--since {text!r} is neither a duration (1h) nor an ISO-8601 time") from None


def run(root, db, fmt, limit, since=None, flow=None, all_=False) -> int:
    project = open_project(root)
    store = open_store(db, project.root, empty_ok=True)
    try:
        s = compute(store, limit, parse_since(since), flow=flow, children=all_)
    finally:
        store.close()
    if fmt == "json":
        click.echo(json.dumps(s, indent=2))
        return EXIT_OK
    rate = "n/a" if s["success_rate"] is None else f"{s['success_rate']:.1%}"
    scope = (f"flow {flow}, " if flow else "") + ("all runs" if all_ else "top-level runs")
    click.echo(f"runs: {s['runs']} ({scope})  " + "  ".join(f"{k}: {v}" for k, v in sorted(s["by_status"].items())))
    click.echo(f"success rate: {rate}   mean steps: {s['mean_steps'] or 0:.1f}   compensation failures: {s['compensation_failures']}")
    click.echo(f"tool call ms: p50 {s['step_ms']['p50']:.1f}  p99 {s['step_ms']['p99']:.1f}")
    for tool, t in sorted(s["tools"].items()):
        click.echo(f"  {tool}: {t['calls']} calls, {t['failure_rate']:.0%} failed, {t['retry_rate']:.0%} retried")
    return EXIT_OK
