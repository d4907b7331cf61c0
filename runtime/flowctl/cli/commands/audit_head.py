"""``flowctl audit head RUN``: the head of a run's hash chain, to keep outside the store."""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK
from flowctl.cli.commands._common import read_run_events


def run(run_id, root, db) -> int:
    """Print ``SEQ:HASH`` of the run's last event: keep it outside the store (a ticket, a log, a
    signed commit) and check later with ``flowctl audit verify RUN --expect-head SEQ:HASH``. The
    chain is checked as its events are read in batches."""
    from flowctl.store.audit import ChainCheck

    check, last = ChainCheck(), None
    with read_run_events(root, db, run_id) as (row, events, _tree, _steps, _store):
        for last in events:
            check.add(last)
    if last is None:
        click.echo(f"run {row['id']} has no events", err=True)
        return EXIT_FAILED
    problems = check.finish(row.get("last_seq"), row.get("last_hash"))
    if problems:  # never hand out a head of a chain that is already broken
        for p in problems:
            click.echo(f"run {row['id']}: {p}", err=True)
        return EXIT_FAILED
    click.echo(f"{last['seq']}:{last['hash']}")
    return EXIT_OK
