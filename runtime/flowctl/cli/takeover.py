"""The takeover commands kept out of :mod:`flowctl.cli.main` (its size limit): ``flowctl pause``.

:func:`register` adds them to the ``main`` group with main's own ``--root``/``--db`` options and
login default, so they read and behave as the other commands."""
from __future__ import annotations

import click

from flowctl.cli.invoke import call as _call


def register(main, root_db, login) -> None:
    """Add ``pause`` to ``main``. ``root_db``: main's decorator of the store options; ``login``:
    who is at the keyboard (the default of ``--by``)."""

    @main.command()
    @click.argument("run_id", metavar="RUN")
    @click.option("--reason", required=True, metavar="TEXT", help="Why (required; recorded with who paused it).")
    @click.option("--by", metavar="NAME", help="Who paused (recorded; default: your login name).")
    @root_db
    def pause(run_id, reason, by, root, db):
        """Pause RUN at its next checkpoint: after the step in progress (a tool call finishes and is
        recorded first), before the next state. Whatever drives it — `flowctl run`, a worker, the
        server — stops it there with status paused; `flowctl resume RUN` continues it from there.

        \b
        A run that is waiting, queued or paused for review pauses when it next continues; one that
        ends first never pauses. Child runs of a parallel/map state are not paused: the parent
        pauses after that state. Exit 0 requested (or already requested: the first request
        stands), 2 the run has ended or is already paused, or bad input or store.
          flowctl pause 01a2b3 --reason "refund amounts look wrong"
          flowctl resume 01a2b3
        """
        _call("pause", run_id=run_id, reason=reason, by=by or login(), root=root, db=db)


__all__ = ["register"]
