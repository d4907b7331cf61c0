"""``flowctl keys create NAME --scope S …`` · ``flowctl keys list`` · ``flowctl keys revoke NAME``:
the API keys of ``flowctl serve`` (:mod:`flowctl.store.apikeys`), kept hashed in the run store.

``create`` prints the key once (it is never shown again: only its SHA-256 is stored); ``list``
shows names, scopes and whether revoked, never a key; ``revoke`` stops a key at once."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import open_store, project_root


def run(action, name, scopes, root, db, fmt="text", by=None) -> int:
    from flowctl.engine.clock import iso
    from flowctl.errors import UsageError
    from flowctl.store.apikeys import keys_of
    from flowctl.store.protocol import QueueStore

    store = open_store(db, project_root(root), create=action == "create")
    try:
        if not isinstance(store, QueueStore):
            raise UsageError("API keys are kept in the run store: --db memory keeps none",
                             hint="use the project's store (the default) or --db sqlite:///… / postgresql://…")
        keys = keys_of(store)
        if action == "create":
            _known_tools(root, scopes)
            row, printed = keys.create(name, scopes, by=by)
            click.echo(f"key '{row['name']}' ({', '.join(row['scopes'])}), shown once — keep it now:", err=True)
            click.echo(printed)
            return EXIT_OK
        if action == "revoke":
            row = keys.revoke(name)
            click.echo(f"key '{row['name']}' revoked at {iso(row['revoked_at'])}")
            return EXIT_OK
        rows = keys.list()
    finally:
        store.close()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo("no API keys (create one: flowctl keys create NAME --scope gate)")
    for r in rows if fmt != "json" else ():
        state = f"revoked {iso(r['revoked_at'])[:19]}Z" if r["revoked_at"] else "live"
        click.echo(f"{r['name']:<24} {state:<28} {' '.join(r['scopes'])}")
    return EXIT_OK


def _known_tools(root, scopes) -> None:
    """Refuse (UsageError, exit 2) an ``invoke:<tool>`` scope naming no contract of the project: a
    misspelt tool would give a key that every invoke answers 403."""
    from difflib import get_close_matches

    from flowctl.cli.commands._common import open_project
    from flowctl.errors import UsageError

    wanted = [s[len("invoke:"):] for s in scopes if s.startswith("invoke:")]
    if not wanted:
        return
    known = sorted(open_project(project_root(root)).contracts)
    for tool in wanted:
        if tool not in known:
            near = get_close_matches(tool, known, n=1)
            raise UsageError(f"scope 'invoke:{tool}': the project has no contract '{tool}'",
                             hint=(f"did you mean invoke:{near[0]}? " if near else "")
                             + ("contracts: " + ", ".join(known[:20]) + (" …" if len(known) > 20 else "")
                                if known else "the project has no contracts"))
