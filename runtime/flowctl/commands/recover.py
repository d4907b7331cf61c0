"""``flowctl recover``: continue every orphaned or due run in the store."""
from __future__ import annotations

import click

from . import EXIT_FAILED, EXIT_OK, EXIT_PAUSED
from ._common import open_engine, result_path


def run(root, db, max_inline_wait, quiet) -> int:
    engine = open_engine(root, db, max_inline_wait=max_inline_wait, progress=not quiet, check=False)
    try:
        results = engine.recover()
    finally:
        engine.store.close()
    if not results:
        click.echo("nothing to recover: no orphaned or due runs")
        return EXIT_OK
    for r in results:
        click.echo(f"{r.run_id} {r.flow}: {r.status}  {result_path(r)}")
        if r.review and r.review.get("token"):
            click.echo(f"    paused for review at '{r.review['state']}'; resume with: flowctl resume {r.run_id} "
                       f"--token {r.review['token']} --decision {'|'.join(r.review.get('decisions') or [])}")
        elif r.error and r.status not in ("succeeded",):
            click.echo(f"    {r.error.get('type')}: {r.error.get('message')}")
    if any(r.status in ("failed", "cancelled") for r in results):
        return EXIT_FAILED
    return EXIT_PAUSED if any(r.status in ("paused", "waiting") for r in results) else EXIT_OK
