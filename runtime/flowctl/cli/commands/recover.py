"""``flowctl recover``: continue every orphaned or due run in the store.

Exit 0 all continued to an end, 1 a run failed or was cancelled, or one was refused and not
continued (a tampered record, RECORD_TAMPERED; named on stderr), 3 one is paused or waiting.
"""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK, EXIT_PAUSED
from flowctl.cli.commands._common import open_engine, result_path


def run(root, db, max_inline_wait, quiet) -> int:
    engine = open_engine(root, db, max_inline_wait=max_inline_wait, progress=not quiet, check=False)
    try:
        results = engine.recover()
        held = [] if results else _leased(engine)
    finally:
        engine.store.close()
    if not results:
        click.echo("nothing to recover: no orphaned or due runs")
        for row, left in held:  # (new-user finding: a run whose worker was killed was not mentioned)
            click.echo(f"    {row['id']} {row['flow']}: running, leased by {row.get('owner') or '?'} for {left:.0f}s "
                       "more; once the lease ends a worker or flowctl recover takes it over")
        return EXIT_OK
    for r in results:
        click.echo(f"{r.run_id} {r.flow}: {r.status}  {result_path(r)}")
        if r.review and r.review.get("token"):
            click.echo(f"    paused for review at '{r.review['state']}'; resume with: flowctl resume {r.run_id} "
                       f"--token {r.review['token']} --decision {'|'.join(r.review.get('decisions') or [])}")
        elif r.error and r.status not in ("succeeded",):
            click.echo(f"    {r.error.get('type')}: {r.error.get('message')}")
    refused = [r for r in results if (r.error or {}).get("refused")]
    for r in refused:
        click.echo(f"error: [{r.error.get('code')}] run {r.run_id} was not continued: {r.error.get('message')}", err=True)
    if refused and any(r.error.get("code") == "RECORD_TAMPERED" for r in refused):
        click.echo("hint: flowctl audit verify RUN says what differs; restore the store from a backup", err=True)
    if refused or any(r.status in ("failed", "cancelled") for r in results):
        return EXIT_FAILED
    return EXIT_PAUSED if any(r.status in ("paused", "waiting") for r in results) else EXIT_OK


def _leased(engine) -> list:
    """``[(row, seconds left)]`` of the running runs held under a lease that has not ended (a
    worker's, live or killed): recover leaves them to their holder until then."""
    now = engine.store.now()
    return [(row, row["lease_until"] - now) for row in engine.store.list_runs(status="running", limit=0)
            if (row.get("lease_until") or 0) > now][:20]
