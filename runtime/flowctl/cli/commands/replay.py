"""``flowctl replay RUN [--definition PATH|REV] [--db URL]``: re-run a recorded run with its recorded
tool outputs (no tool is called) under another definition and report the first step where its
path diverges. Exit 0 same path and outcome, 1 diverged, 2 unusable (unknown run, a definition
that does not load or has errors)."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK
from flowctl.cli.commands._common import open_project, open_store


def load_definition(root, spec):
    """``(Project, label)``: the working tree (None), a folder holding orchestration/, or a git revision."""
    from flowctl.cli.commands.diff import Sides

    from pathlib import Path

    from flowctl.errors import UsageError

    if spec is None:
        return open_project(root), "the working tree"
    try:
        project, label = Sides(root).load(spec)
    except UsageError:
        if Path(spec).expanduser().exists():
            raise
        # neither reading of SPEC exists: say so, not how to run `flowctl diff`
        raise UsageError(f"--definition {spec} is neither a git revision nor a folder: no such folder exists",
                         hint="give a folder holding orchestration/, or a git revision of this repository: "
                              "flowctl replay RUN --definition origin/main") from None
    if not project.files:
        raise UsageError(f"{label} has no orchestration/ definition files")
    return project, label


def run(run_id, definition, root, db, fmt) -> int:
    from flowctl.testing.replay import load_recording, replay

    project, label = load_definition(root, definition)
    home = open_project(root) if definition is not None else project
    store = open_store(db, home.root)
    try:
        rec = load_recording(store, run_id)
    finally:
        store.close()
    result = replay(rec, project, label)
    if fmt == "json":
        click.echo(json.dumps(result.as_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        row = rec.row
        click.echo(f"replaying run {row['id']} ({row['flow']} v{row['flow_version']}, {row['status']}) "
                   f"under {label}")
        click.echo(result.text())
    return EXIT_FAILED if result.diverged else EXIT_OK
