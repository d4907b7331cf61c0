"""``flowctl cancel RUN``: stop a run and (unless --no-compensate) undo its side effects.

Exit 0 cancelled here with every completed side effect undone; 1 cancelled, but some side effect
could not be undone (its residue is listed: it is still in place); 2 the run had already ended, a
live process executes it, or bad input or store; 3 when a live worker holds the run: the request
is recorded and that worker cancels it at its next step (``flowctl trace RUN`` shows whether it
did, or that the run ended before the request was seen: ``cancel_request_unseen``)."""
from __future__ import annotations

from flowctl.cli.commands._common import open_engine, print_result


def run(run_id, no_compensate, by, root, db) -> int:
    engine = open_engine(root, db, progress=True, check=False, create=False)
    try:
        result = engine.cancel(run_id, compensate=not no_compensate, by=by)
    finally:
        engine.store.close()
    if result.cancel_requested:
        import click

        click.echo(f"run {result.run_id} ({result.flow}): cancel requested — the worker holding it cancels it at "
                   f"its next step{' and undoes its side effects' if not no_compensate else ''}; "
                   f"see: flowctl trace {result.run_id} (a run that ends first records cancel_request_unseen)")
        return 3
    print_result(result, db=db)
    if result.status == "cancelled" and result.residue:
        import click

        click.echo(f"{len(result.residue)} side effect(s) could not be undone and are still in place "
                   f"(see: flowctl audit log {result.run_id})", err=True)
        return 1
    return 0 if result.status == "cancelled" else 1
