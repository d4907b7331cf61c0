"""``flowctl pause RUN --reason TEXT``: ask a run to pause at its next checkpoint.

Exit 0 the request is recorded (or one stood already: the first request stands and is shown); 2
the run has ended, is already paused by an operator, is a server session, or bad input or store.
``flowctl resume RUN`` continues a paused run (:mod:`flowctl.engine.pause`)."""
from __future__ import annotations

import click

from flowctl.cli.commands._common import open_engine


def run(run_id, reason, by, root, db) -> int:
    engine = open_engine(root, db, check=False, create=False)
    try:
        asked = engine.pause(run_id, reason=reason, by=by)
    finally:
        engine.store.close()
    req, rid = asked["request"], asked["run_id"]
    who = f"by {req.get('by') or 'a user'}: {req.get('reason')}"
    if not asked["new"]:
        click.echo(f"run {rid}: a pause was already requested ({who}); that request stands")
    elif asked["status"] == "running":
        click.echo(f"run {rid}: pause requested ({who}); it pauses at its next checkpoint")
    else:
        click.echo(f"run {rid} is {asked['status']}: pause requested ({who}); it pauses when it next continues")
    click.echo(f"see: flowctl trace {rid}; continue it with: flowctl resume {rid}")
    return 0
