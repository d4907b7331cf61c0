"""``flowctl audit head RUN``: the head of a run's hash chain, to keep outside the store; ``--ledger``:
the head ``N:HASH`` of the store-wide ledger of runs (:mod:`flowctl.store.ledger`)."""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK
from flowctl.cli.commands._common import read_run_events


def run(run_id, root, db, ledger=False) -> int:
    """Print ``SEQ:HASH`` of the run's last event: keep it outside the store (a ticket, a log, a
    signed commit) and check later with ``flowctl audit verify RUN --expect-head SEQ:HASH``. The
    chain is checked as its events are read in batches."""
    if ledger or run_id is None:
        return _ledger_head(run_id, root, db, ledger)
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


def _ledger_head(run_id, root, db, ledger: bool) -> int:
    """``audit head --ledger``: ``N:HASH`` of the ledger of runs, printed only when it verifies."""
    from flowctl.cli.commands.audit import ledger_report
    from flowctl.errors import UsageError

    if run_id is not None:
        raise UsageError("audit head --ledger prints the store's ledger head: it takes no RUN",
                         hint="flowctl audit head --ledger, or flowctl audit head RUN")
    if not ledger:
        raise UsageError("audit head needs RUN, or --ledger for the ledger of runs",
                         hint="flowctl audit head RUN, or flowctl audit head --ledger")
    report = ledger_report(root, db)
    if report.problems:  # never hand out a head of a ledger that is already broken
        for p in report.problems:
            click.echo(f"ledger: {p}", err=True)
        return EXIT_FAILED
    click.echo(report.head_text)
    return EXIT_OK
