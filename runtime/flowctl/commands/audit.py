"""``flowctl audit verify RUN``: check a run's hash chain. Exit 0 intact, 1 tampered."""
from __future__ import annotations

import click

from . import EXIT_FAILED, EXIT_OK
from ._common import fetch_run


def run(run_id, root, db) -> int:
    from ..audit import verify_run

    row, events = fetch_run(root, db, run_id)
    problems = verify_run(row, events)
    if problems:
        for p in problems:
            click.echo(f"run {row['id']}: {p}", err=True)
        return EXIT_FAILED
    click.echo(f"run {row['id']}: {len(events)} events, hash chain intact")
    return EXIT_OK
