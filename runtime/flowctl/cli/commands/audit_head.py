"""``flowctl audit head RUN``: the head of a run's hash chain, to keep outside the store."""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK
from flowctl.cli.commands.audit import read_run


def run(run_id, root, db) -> int:
    """Print ``SEQ:HASH`` of the run's last event: keep it outside the store (a ticket, a log, a
    signed commit) and check later with ``flowctl audit verify RUN --expect-head SEQ:HASH``."""
    from flowctl.store.audit import verify_chain

    row, events, _steps, _snapshot = read_run(root, db, run_id)
    if not events:
        click.echo(f"run {row['id']} has no events", err=True)
        return EXIT_FAILED
    problems = verify_chain(events, row.get("last_seq"), row.get("last_hash"))
    if problems:  # never hand out a head of a chain that is already broken
        for p in problems:
            click.echo(f"run {row['id']}: {p}", err=True)
        return EXIT_FAILED
    click.echo(f"{events[-1]['seq']}:{events[-1]['hash']}")
    return EXIT_OK
