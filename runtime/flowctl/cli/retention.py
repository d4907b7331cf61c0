"""The click layer of ``flowctl prune`` (registered by :mod:`flowctl.cli.main`; kept here so the
main module stays within its size). Parses options and calls
:func:`flowctl.cli.commands.prune.run` through :func:`flowctl.cli.invoke.call`."""
from __future__ import annotations

import click

from flowctl.cli.invoke import call as _call


@click.command()
@click.option("--older-than", required=True, metavar="DURATION", help="Prune events older than this (e.g. 90d, 12h).")
@click.option("--keep-types", metavar="T,…",
              help="Prune only process events: keep these types (* a wildcard; 'default' = run_*, policy_decided, "
                   "review_*, compensation_*). A stored commit holding a kept event stays whole.")
@click.option("--archive", type=click.Path(file_okay=False), metavar="DIR",
              help="Folder of the archive written first (default .flowctl/archive/ of the project).")
@click.option("--dry-run", is_flag=True, help="Only say what would be pruned; write nothing.")
@click.option("--db", envvar="FLOWCTL_DB", metavar="URL", help="Run store: sqlite:///path.db (default .flowctl/flowctl.db) or postgresql://…. Env: FLOWCTL_DB.")
@click.option("--root", type=click.Path(), help="Project folder (holding orchestration/).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def prune(older_than, keep_types, archive, dry_run, root, db, fmt):
    """Move finished runs' events older than --older-than to an archive (gzip JSON Lines, one file per
    prune), then delete them from the store in one transaction. Running, waiting and paused runs are
    never touched. `flowctl audit verify RUN` still checks a pruned run; `flowctl audit verify
    --archive DIR` checks the archive.

    \b
    Examples:
      flowctl prune --older-than 90d --dry-run
      flowctl prune --older-than 30d --keep-types default --archive /backups/flowctl
    """
    _call("prune", older_than=older_than, keep_types=keep_types, archive=archive, dry_run=dry_run,
          root=root, db=db, fmt=fmt)
