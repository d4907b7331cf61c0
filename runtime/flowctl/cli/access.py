"""The click commands of ``flowctl keys`` (API keys of ``flowctl serve``), registered by
:mod:`flowctl.cli.main` (kept here so the main module stays within its size). Each calls
:func:`flowctl.cli.commands.keys.run` through :func:`flowctl.cli.invoke.call`."""
from __future__ import annotations

import click

from flowctl.cli.invoke import call as _call


def register(main, _root_db, _login) -> None:
    """Add the ``keys`` group to ``main``; ``_root_db`` is main's --root/--db decorator, ``_login``
    the caller's name for ``by``."""
    @main.group()
    def keys():
        """API keys of flowctl serve: stored hashed in the run store, scoped, revocable."""

    @keys.command(name="create")
    @click.argument("name")
    @click.option("--scope", "scopes", multiple=True, required=True, metavar="SCOPE",
                  help="gate, runs:read, runs:write, reviews, invoke:<tool>, admin (repeatable).")
    @_root_db
    def keys_create(name, scopes, root, db):
        """Create key NAME and print it once (only its hash is kept)."""
        _call("keys", action="create", name=name, scopes=scopes, root=root, db=db, by=_login())

    @keys.command(name="list")
    @_root_db
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
    def keys_list(root, db, fmt):
        """List keys: name, scopes, live or revoked (never a key)."""
        _call("keys", action="list", name=None, scopes=(), root=root, db=db, fmt=fmt)

    @keys.command(name="revoke")
    @click.argument("name")
    @_root_db
    def keys_revoke(name, root, db):
        """Revoke key NAME at once."""
        _call("keys", action="revoke", name=name, scopes=(), root=root, db=db)
