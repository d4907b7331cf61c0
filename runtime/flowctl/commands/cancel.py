"""``flowctl cancel RUN``: stop a run and (unless --no-compensate) undo its side effects.

Exit 0 cancelled here; 3 when a live worker holds the run: the request is recorded and that
worker cancels it at its next step (``flowctl runs`` shows when it has)."""
from __future__ import annotations

from ._common import open_engine, print_result


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
                   f"see: flowctl runs --status cancelled")
        return 3
    print_result(result, db=db)
    return 0 if result.status == "cancelled" else 1
