"""``flowctl trace RUN``: the path in one line and the steps in a table (or JSON)."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import _events_for_json, child_tree, fetch_run, one_line_path
from flowctl.store.history import steps_of

__all__ = ["steps_of", "child_tree", "console", "kept_effects", "run"]


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
        run_info.update(started=iso(row["created_at"]), updated=iso(row["updated_at"]), kept=kept_effects(row))
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
            at = f" (raised at {s['raised_at']})" if s.get("raised_at") else ""
            notes.append(f"#{s['step']} {s['state']}: {s['error']}{at}")
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
    for entry in kept_effects(row):
        click.echo(f"kept (not compensated): {entry['tool']} of '{entry['state']}' (step {entry['step']}); "
                   f"the run ended {row['status']} without undoing it")
    return EXIT_OK


def kept_effects(row) -> list:
    """The completed side effects a failed or cancelled run still holds: the saga entries no
    compensation undid (a ``fail`` state or handler without ``compensate: true``, or ``cancel
    --no-compensate``), ``[{tool, state, step}]`` oldest first; ``[]`` for other runs."""
    cursor = row.get("cursor")
    if row.get("status") not in ("failed", "cancelled") or not isinstance(cursor, dict):
        return []
    return [{"tool": e.get("tool"), "state": e.get("state"), "step": e.get("step")}
            for e in cursor.get("saga") or () if isinstance(e, dict)]
