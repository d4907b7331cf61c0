"""``flowctl init [FOLDER] [--template NAME]``: scaffold a project (:mod:`flowctl.scaffold`).

Exit 0 written; 2 the folder already has orchestration/ or the template is unknown (nothing written)."""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_OK


def run(folder: str, template: str) -> int:
    from flowctl.scaffold import NEXT_STEPS, init

    written = init(folder, template)
    click.echo(f"created a flowctl project ({template} template) in {folder}: {len(written)} files")
    for rel in written:
        click.echo(f"  {rel.as_posix()}")
    steps = NEXT_STEPS.get(template, [])
    if steps:
        click.echo("\nnext:" + (f"\n  cd {folder}" if folder not in (".", "") else ""))
        for cmd, what in steps:
            click.echo(f"  # {what}\n  {cmd}")
    return EXIT_OK
