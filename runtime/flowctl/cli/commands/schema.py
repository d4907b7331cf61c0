"""``flowctl schema KIND``: print the JSON Schema of a kind of file, for editors."""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_OK


def run(kind: str) -> int:
    from flowctl.definition.kinds import schema_text

    click.echo(schema_text(kind), nl=False)
    return EXIT_OK
