"""``flowctl runs``: the latest runs, newest first."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import note_unknown_flow, open_reader, project_root


def run(status, flow, limit, root, db, fmt, all_=False) -> int:
    from rich.table import Table

    from flowctl.cli.commands.trace import console

    from flowctl.engine.clock import iso
    from flowctl.errors import UsageError
    from flowctl.store.records import STATUSES

    if status and status not in STATUSES:
        raise UsageError(f"--status {status!r} is not one of {', '.join(STATUSES)}")
    note_unknown_flow(root, flow)
    store = open_reader(db, project_root(root), empty_ok=True)
    try:
        rows = store.list_runs(status=status, flow=flow, limit=limit, top_level=not all_)
        now = store.now()  # leases run on the database clock
    finally:
        store.close()
    if fmt == "json":
        keep = ("id", "flow", "flow_version", "status", "steps", "created_at", "updated_at", "available_at", "owner", "error",
                "parent_id", "queue", "priority", "lease_until", "fence")
        click.echo(json.dumps([{k: r.get(k) for k in keep} for r in rows], indent=2, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        click.echo("no runs" + (f" with status {status}" if status else "") + ("" if all_ else " (top-level; --all adds child runs)"))
        return EXIT_OK
    table = Table(box=None, header_style="bold")
    table.add_column("run", no_wrap=True, min_width=24)  # ids are never cut: every other command needs them
    for col in ("flow", "status", "steps", "started", "owner", "lease", "error"):
        table.add_column(col, no_wrap=col != "error", overflow="fold")
    for r in rows:
        err = (r.get("error") or {}).get("code", "")
        table.add_row(r["id"], r["flow"], r["status"], str(r["steps"]), iso(r["created_at"])[:19] + "Z",
                      r.get("owner") or "", _lease(r, now), err)
    console().print(table)
    return EXIT_OK


def _lease(r, now) -> str:
    """``12s`` left on a worker's lease, ``expired`` (its worker is gone; another takes it over), or blank."""
    until = r.get("lease_until")
    if until is None or r["status"] != "running":
        return ""
    left = until - now
    return f"{left:.0f}s" if left >= 0 else "expired"
