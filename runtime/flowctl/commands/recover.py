"""``flowctl recover``: continue every orphaned or due run in the store."""
from __future__ import annotations

import click

from . import EXIT_FAILED, EXIT_OK
from ._common import open_engine, one_line_path


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
        click.echo(f"{r.run_id} {r.flow}: {r.status}  {one_line_path(r.path)}")
    return EXIT_FAILED if any(r.status == "failed" for r in results) else EXIT_OK
