"""``flowctl secrets keygen|rotate``: make a key; re-seal stored run fields under the first key."""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import open_project, open_store


def run(action, root, db) -> int:
    if action == "keygen":
        from flowctl.store.keyring import new_key

        click.echo(new_key())
        return EXIT_OK
    project = open_project(root)
    store = open_store(db, project.root)
    try:
        if not store.durable:
            click.echo("nothing to rotate: --db memory keeps nothing")
            return EXIT_OK
        counts = store.rekey()
        ring = store.keyring()
    finally:
        store.close()
    click.echo(f"{counts['resealed']} sealed field(s) re-sealed under key {ring.ids[0]}, "
               f"{counts['current']} already were ({ring.source})")
    return EXIT_OK
