"""``flowctl stats``: success rate, steps, failure and retry rates per tool, step durations; with
``--check`` the defence rates against their thresholds (exit 1 when one is over); with
``--format prometheus`` the same figures in Prometheus' text exposition format. ``--flow`` naming
no flow of the project, and no stored run, is a usage error (exit 2, with the flow it may mean).

Thresholds: :data:`flowctl.store.health.THRESHOLDS`, overridden by ``thresholds:`` in
``orchestration/project.yaml`` (fractions 0-1)."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK
from flowctl.cli.commands._common import open_reader, project_root, unknown_flow
from flowctl.store.history import stats

#: rows shown per model table in text (json has them all)
TOP = 10


def compute(store, limit: int = 1000, since: float | None = None, *, flow: str | None = None,
            children: bool = False, bucket: float | None = None) -> dict:
    """``flowctl stats``' figures: :func:`flowctl.store.history.stats`."""
    return stats(store, limit, since, flow=flow, children=children, bucket=bucket)


def parse_bucket(text):
    """``--bucket``: a duration (``1h``, ``15m``); seconds, or None. Raises ``UsageError``."""
    if text is None:
        return None
    from flowctl.definition.durations import parse_duration
    from flowctl.errors import UsageError

    try:
        width = parse_duration(text)
    except ValueError:
        width = 0.0
    if width < 1.0:
        raise UsageError(f"--bucket {text!r} is not a duration of a second or more",
                         hint="give a width with its unit: --bucket 1h, --bucket 15m, --bucket 1d")
    return width


#: the longest duration ago ``--since``/``--until`` accept, in seconds (36500d, about a century):
#: past it the time no longer fits a date
SINCE_MAX = 36500 * 86400.0


def parse_since(text, option: str = "--since"):
    """``--since`` (or ``option``): an ISO-8601 time, or a duration ago (``1h``, at most
    :data:`SINCE_MAX` seconds); epoch seconds, or None. Raises ``UsageError``."""
    if not text:
        return None
    import time

    from flowctl.definition.durations import parse_duration
    from flowctl.errors import UsageError
    from flowctl.expr.expressions import _parse_time

    try:
        ago = parse_duration(text)
    except ValueError:
        ago = None
    if ago is not None:
        if not ago <= SINCE_MAX:
            raise UsageError(f"{option} {text[:40]!r} is more than {SINCE_MAX / 86400:.0f}d ago",
                             hint=f"give a shorter window ({option} 30d) or an ISO-8601 time")
        return time.time() - ago
    try:
        return _parse_time(text).timestamp()
    except (ValueError, OverflowError):
        raise UsageError(f"{option} {text[:60]!r} is neither a duration (1h) nor an ISO-8601 time",
                         hint=f"e.g. {option} 1h, {option} 7d or {option} 2026-12-01T00:00:00Z") from None


def project_thresholds(root) -> dict:
    """``thresholds:`` of ``orchestration/project.yaml`` (``{}`` when it has none). Raises
    ``ProjectError`` (located) when the file does not load or the value is not a mapping of
    numbers; ``validate`` checks the names against the project schema."""
    from flowctl.errors import ProjectError

    path = root / "orchestration" / "project.yaml"
    if not path.is_file():
        return {}
    from flowctl.definition.yamlio import loads

    try:
        data = loads(path.read_text(encoding="utf-8"), "orchestration/project.yaml")
    except (ValueError, OSError, UnicodeDecodeError) as exc:  # located: file:line:column: message
        raise ProjectError(str(exc), hint="flowctl validate orchestration/project.yaml") from None
    found = (data or {}).get("thresholds") if isinstance(data, dict) else None
    if found is None:
        return {}
    if not isinstance(found, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                              for v in found.values()):
        raise ProjectError("orchestration/project.yaml: thresholds must map rate names to fractions (0-1)",
                           hint="flowctl validate shows where")
    return found


def run(root, db, fmt, limit, since=None, flow=None, all_=False, check=False, bucket=None) -> int:
    width = parse_bucket(bucket)
    typo = unknown_flow(root, flow)
    where = project_root(root)
    store = open_reader(db, where, empty_ok=True)
    try:
        if check or fmt == "prometheus":
            from flowctl.store.health import health

            s = health(store, since=parse_since(since), limit=limit, flow=flow, thresholds=project_thresholds(where),
                       bucket=width)
        else:
            s = compute(store, limit, parse_since(since), flow=flow, children=all_, bucket=width)
    finally:
        store.close()
    if typo is not None and not s.get("runs"):  # no such flow file and no run of it: a typo (exit 2)
        raise typo
    over = [name for name, d in (s.get("defence") or {}).items() if d["over"]]
    if fmt == "json":
        click.echo(json.dumps(s, indent=2))
    elif fmt == "prometheus":
        from flowctl.telemetry.metrics import prometheus

        click.echo(prometheus(s, flow), nl=False)
    else:
        _text(s, flow, all_)
    if check:
        for name in over:
            d = s["defence"][name]
            click.echo(f"breached: {name} {d['rate']:.1%} > {d['threshold']:.1%} ({d['part']} of {d['whole']})",
                       err=True)
        return EXIT_FAILED if over else EXIT_OK
    return EXIT_OK


def _text(s, flow, all_) -> None:
    rate = "n/a" if s["success_rate"] is None else f"{s['success_rate']:.1%}"
    scope = (f"flow {flow}, " if flow else "") + ("all runs" if all_ else "top-level runs")
    click.echo(f"runs: {s['runs']} ({scope})  " + "  ".join(f"{k}: {v}" for k, v in sorted(s["by_status"].items())))
    click.echo(f"success rate: {rate}   mean steps: {s['mean_steps'] or 0:.1f}   compensation failures: {s['compensation_failures']}")
    click.echo(f"tool call ms: p50 {s['step_ms']['p50']:.1f}  p99 {s['step_ms']['p99']:.1f}")
    for tool, t in sorted(s["tools"].items()):
        click.echo(f"  {tool}: {t['calls']} calls, {t['failure_rate']:.0%} failed, {t['retry_rate']:.0%} retried")
    _models(s["models"])
    for tool, rows in (s.get("buckets") or {}).items():
        click.echo(f"  {tool} per bucket:")
        for b in rows:
            click.echo(f"    {_iso(b['start'])}  {b['calls']} calls, {b['failures']} failed, "
                       f"mean {b['mean_ms']:.1f} ms, p95 {b['p95_ms']:.1f} ms")
    for name, d in (s.get("defence") or {}).items():
        shown = "n/a" if d["rate"] is None else f"{d['rate']:.1%}"
        mark = "  OVER" if d["over"] else ""
        click.echo(f"{name}: {shown} (threshold {d['threshold']:.0%}; {d['part']} of {d['whole']}){mark}")


def _iso(ts: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _usage_line(u: dict) -> str:
    cost = "" if u["cost"] is None else f", cost {u['cost']:.4f}"
    reasks = f", {u['reasks']} re-asked" if u["reasks"] else ""
    return f"{u['calls']} calls{reasks}, tokens {u['input_tokens']} in / {u['output_tokens']} out{cost}"


def _models(m: dict) -> None:
    if not m["calls"]:
        return
    click.echo(f"model calls: {_usage_line(m)}   re-ask rate: {m['reask_rate']:.1%}")
    for title, key in (("per flow", "by_flow"), ("per state", "by_state"), ("per model", "by_model")):
        rows = sorted(m[key].items(), key=lambda kv: -(kv[1]["input_tokens"] + kv[1]["output_tokens"]))
        click.echo(f"  {title}:")
        for name, u in rows[:TOP]:
            click.echo(f"    {name or '(none)'}: {_usage_line(u)}")
        if len(rows) > TOP:
            click.echo(f"    ... {len(rows) - TOP} more (--format json lists them all)")
