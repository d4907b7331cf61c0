"""``flowctl prune --older-than 90d [--keep-types T,…] [--archive DIR] [--dry-run]``: move finished
runs' old events to an archive (:mod:`flowctl.store.prune`), exit 0 (also when there was nothing
to prune), 2 for a bad option or a store that cannot be pruned."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import open_store, project_root
from flowctl.errors import UsageError


def run(older_than, keep_types, archive, dry_run, root, db, fmt="text") -> int:
    from flowctl.definition.durations import parse_duration
    from flowctl.store.prune import keep_patterns, prune

    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise UsageError(f"--older-than: {exc}", hint="e.g. --older-than 90d") from None
    keep = keep_patterns(keep_types)
    home = project_root(root)
    folder = Path(archive) if archive else home / ".flowctl" / "archive"
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--archive: {folder} is a file, not a folder", hint="give a folder; one file is written per prune")
    now = time.time()
    store = open_store(db, home)
    try:
        result = prune(store, now - age, folder, keep=keep, dry_run=dry_run, now=now)
    finally:
        store.close()
    done = [p for p in result.runs if p.id not in result.skipped]
    if fmt == "json":
        click.echo(json.dumps({"dry_run": dry_run, "cutoff": now - age, "keep_types": list(keep) if keep else None,
                               "archive": str(result.path) if result.path else None, "sha256": result.sha256,
                               "runs": [{"id": p.id, "events": p.events, "rows": len(p.rows), "ranges": p.ranges}
                                        for p in done],
                               "skipped": result.skipped, "events": result.events, "rows": result.rows}, indent=2))
        return EXIT_OK
    if not result.runs:
        click.echo(f"nothing to prune: no finished run has events older than {older_than}")
        return EXIT_OK
    verb = "would prune" if dry_run else "pruned"
    what = " process events (keeping " + ", ".join(keep) + ")" if keep else " events"
    click.echo(f"{verb} {result.events}{what} in {result.rows} rows of {len(done)} finished runs older than {older_than}")
    if result.path:
        click.echo(f"archive: {result.path} (sha256 {result.sha256})")
        click.echo(f"check it with: flowctl audit verify --archive {result.path}")
    for rid in result.skipped:
        click.echo(f"skipped run {rid}: it changed while being pruned (left whole; its rows are also in the archive)")
    return EXIT_OK
