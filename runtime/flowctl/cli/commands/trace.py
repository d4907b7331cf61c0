"""``flowctl trace RUN``: the path in one line and the steps in a table (or JSON)."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import _events_for_json, child_tree, fetch_run, one_line_path  # noqa: F401 - child_tree: trace.child_tree


def steps_of(events) -> list:
    """Fold a run's events into steps: ``[{step, state, type, attempts, tool, duration_ms, outcome,
    error, policy, to}]``, one per state entered."""
    steps = []
    current = None
    for ev in events:
        d, t = ev["data"] or {}, ev["type"]
        if t == "state_entered":
            current = {"step": d.get("step"), "state": ev["state"], "type": d.get("type"), "attempts": 1, "tool": None,
                       "duration_ms": 0.0, "outcome": "", "error": None, "policy": None, "to": None,
                       "started": ev["ts"], "ended": ev["ts"]}
            steps.append(current)
            continue
        if current is None:
            continue
        current["ended"] = ev["ts"]
        if t in ("tool_invoked",) and d.get("purpose") != "notify":
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
        elif t == "fanout_started":  # a parallel/map/subflow step lasts from its fan-out to its end
            current["fanout_at"] = ev["ts"]
        elif t == "fanout_finished" and current.get("fanout_at") is not None:
            current["duration_ms"] = (ev["ts"] - current.pop("fanout_at")) * 1000.0
        elif t == "policy_decided":
            current["policy"] = f"{d.get('outcome')} ({d.get('policy') or d.get('rule')})"
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
        elif t == "run_paused":
            current["outcome"] = d.get("status")
        elif t == "review_decided":
            current["outcome"] = f"{d.get('decision')}" + (f" by {d.get('by')}" if d.get("by") else "")
        elif t == "review_timed_out":
            current["outcome"] = "review timed out"
        elif t == "fallback_used":
            current["tool"] = d.get("tool")
            current["outcome"] = "fallback"
    for step in steps:  # a fan-out still under way: as long as it has lasted so far
        began = step.pop("fanout_at", None)
        if began is not None:
            step["duration_ms"] = (step["ended"] - began) * 1000.0
    return steps


def console():
    """A rich console that does not wrap tables to 80 columns when writing to a pipe or file."""
    import sys

    from rich.console import Console

    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 240)


def run(run_id, root, db, fmt) -> int:
    from rich.table import Table

    from flowctl.engine.clock import iso

    row, events, tree = fetch_run(root, db, run_id, with_children=True)
    steps = steps_of(events)
    path = [s["state"] for s in steps]
    if fmt == "json":
        _events_for_json(events)
        run_info = {k: row.get(k) for k in ("id", "flow", "flow_version", "digest", "status", "output", "error",
                                            "created_at", "updated_at")}
        run_info.update(started=iso(row["created_at"]), updated=iso(row["updated_at"]))
        click.echo(json.dumps({"run": run_info, "path": path, "steps": steps, "events": events},
                              indent=2, ensure_ascii=False, default=str))
        return EXIT_OK
    click.echo(f"run {row['id']} ({row['flow']} v{row['flow_version']}): {row['status']}")
    click.echo(one_line_path(path))
    table = Table(box=None, header_style="bold")
    for col in ("#", "state", "type", "tool", "tries", "tool ms", "policy", "outcome", "next"):  # time in tool calls (retry delays are not)
        table.add_column(col, no_wrap=True)
    notes = []
    for s in steps:
        table.add_row(str(s["step"]), s["state"], s["type"] or "", s["tool"] or "", str(s["attempts"]),
                      f"{s['duration_ms']:.1f}", (s["policy"] or "").split(" (")[0], s["outcome"], s["to"] or "")
        if s["error"]:
            notes.append(f"#{s['step']} {s['state']}: {s['error']}")
    console().print(table)
    for note in notes:
        click.echo(note)
    if tree:
        click.echo("child runs:")
        for line in tree:
            click.echo(line)
    comp = [e for e in events if e["type"].startswith("compensation_")]
    for e in comp:
        click.echo(f"{iso(e['ts'])} {e['type']}: {e['data'].get('tool')} of '{e['state']}'")
    return EXIT_OK
