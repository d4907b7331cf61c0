"""``flowctl stats``: success rate, steps, failure and retry rates per tool, step durations."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import note_unknown_flow, open_reader, project_root
from flowctl.store.history import stats


def compute(store, limit: int = 1000, since: float | None = None, *, flow: str | None = None,
            children: bool = False) -> dict:
    """``flowctl stats``' figures: :func:`flowctl.store.history.stats`."""
    return stats(store, limit, since, flow=flow, children=children)


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
    note_unknown_flow(root, flow)
    store = open_reader(db, project_root(root), empty_ok=True)
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
