"""``flowctl audit verify RUN``: check a run's hash chain. Exit 0 intact, 1 tampered."""
from __future__ import annotations

import click

from . import EXIT_FAILED, EXIT_OK
from ._common import open_project, open_store


def run(run_id, root, db) -> int:
    from ..audit import verify_run

    project = open_project(root)
    store = open_store(db, project.root)
    try:
        row = store.get_run(run_id)
        events = store.events(row["id"])
    finally:
        store.close()
    problems = verify_run(row, events)
    if problems:
        for p in problems:
            click.echo(f"run {row['id']}: {p}", err=True)
        return EXIT_FAILED
    click.echo(f"run {row['id']}: {len(events)} events, hash chain intact")
    return EXIT_OK
