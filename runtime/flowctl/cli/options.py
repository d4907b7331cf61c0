"""Click options shared by :mod:`flowctl.cli.main` and the command modules split out of it
(:mod:`flowctl.cli.auditing`)."""
from __future__ import annotations

import click


def root_db(f):
    """``--db URL`` (env ``FLOWCTL_DB``) and ``--root DIR``: the run store and the project folder."""
    f = click.option("--db", envvar="FLOWCTL_DB", metavar="URL",
                     help="Run store: sqlite:///path.db (default .flowctl/flowctl.db), postgresql://…, or memory. Env: FLOWCTL_DB.")(f)
    return click.option("--root", type=click.Path(), help="Project folder (holding orchestration/).")(f)
