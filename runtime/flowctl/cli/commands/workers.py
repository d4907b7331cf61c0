"""``flowctl workers``: the live workers of a store, their heartbeats and the runs they hold."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import open_project, open_store


def run(root, db, show_all, fmt) -> int:
    from rich.table import Table

    from flowctl.errors import UsageError
    from flowctl.store.protocol import QueueStore
    from flowctl.cli.commands.trace import console

    project = open_project(root)
    store = open_store(db, project.root)
    try:
        if not isinstance(store, QueueStore):
            raise UsageError("the memory store has no workers")
        workers = store.list_workers(live_only=not show_all)
        limits = store.limits()
    finally:
        store.close()
    if fmt == "json":
        click.echo(json.dumps({"workers": workers,
                               "limits": [{"scope": s, "name": n, "max_running": m} for (s, n), m in sorted(limits.items())]},
                              indent=2, default=str))
        return EXIT_OK
    if not workers:
        click.echo("no live workers" + ("" if show_all else " (flowctl workers --all lists stopped ones too)"))
    else:
        table = Table(box=None, header_style="bold")
        for col in ("worker", "status", "heartbeat", "queues", "slots", "done", "runs"):
            table.add_column(col, no_wrap=col != "runs", overflow="fold")
        for w in workers:
            status = w["status"] if w["live"] else ("stopped" if w["status"] == "stopped" else "silent")
            runs = ", ".join(r["id"] for r in w["runs"]) or "-"
            table.add_row(w["id"], status, f"{w['age_s']:.1f}s ago", ",".join(w["queues"] or ["*"]),
                          f"{len(w['runs'])}/{w['concurrency']}", str(w["runs_done"]), runs)
        console().print(table)
    for (scope, name), max_running in sorted(limits.items()):
        click.echo(f"limit: {scope} {name}: at most {max_running} running")
    return EXIT_OK
