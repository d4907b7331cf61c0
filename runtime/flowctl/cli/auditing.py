"""The click layer of ``flowctl audit verify`` and ``flowctl audit head`` (registered on the ``audit``
group by :mod:`flowctl.cli.main`; kept here so the main module stays within its size). Parses
options and calls :mod:`flowctl.cli.commands.audit` / :mod:`~flowctl.cli.commands.audit_head`
through :func:`flowctl.cli.invoke.call`."""
from __future__ import annotations

import click

from flowctl.cli.invoke import call as _call
from flowctl.cli.options import root_db as _root_db


def _seq_hash(value):
    """``SEQ:HASH`` as ``flowctl audit head`` prints it (an event or ledger row number, 64 hex
    digits), lower-cased; None stays None. Anything else is a usage error (exit 2)."""
    import re

    if value is None:
        return None
    if not re.fullmatch(r"[0-9]{1,19}:[0-9a-fA-F]{64}", value.strip()):
        raise click.BadParameter(f"{value!r} is not SEQ:HASH (a number, a colon, 64 hex digits) as "
                                 "`flowctl audit head RUN` (or `--ledger`) prints it")
    return value.strip().lower()


@click.command(name="verify")
@click.argument("run_id", metavar="[RUN]", required=False)
@_root_db
@click.option("--expect-head", metavar="SEQ:HASH", callback=lambda ctx, param, value: _seq_hash(value),
              help="Also require the chain to hold this head, as `flowctl audit head` printed it earlier (kept "
                   "outside the store); without RUN, the ledger's N:HASH from `flowctl audit head --ledger`.")
@click.option("--archive", type=click.Path(), metavar="FILE|DIR", help="Prune archives: alone, check every run in them; "
              "with RUN, check RUN's whole log with its archived events put back.")
@click.option("--all", "all_runs", is_flag=True, help="Check the store-wide ledger of runs (the default without RUN "
              "and --archive): a run deleted, inserted or set back, a ledger row edited or removed.")
def audit_verify(run_id, root, db, expect_head, archive, all_runs):
    """Check RUN's record: exit 0 when intact, 1 when any event was edited, removed or added, or the
    run row (status, checkpoint, error), a step record or the definition snapshot differs from it
    (of a pruned run, each pruned range against its archive, from --archive or else the project's
    .flowctl/archive/; a range whose archive is not found is printed as not checked, and then
    --expect-head at or past it exits 1: the archive is needed).

    Without RUN (or with --all): check the ledger of runs — its hash chain, that every run it names
    is in the store with the head it recorded, that every run in the store is in it — and print its
    head N:HASH. Only an anchored --expect-head detects the ledger's last rows cut off.

    \b
    Examples:
      flowctl audit verify 3f2a9c
      flowctl audit verify --all --expect-head 1042:9be1…
    """
    _call("audit", run_id=run_id, root=root, db=db, expect_head=expect_head, archive=archive, all_runs=all_runs)


@click.command(name="head")
@click.argument("run_id", metavar="[RUN]", required=False)
@_root_db
@click.option("--ledger", is_flag=True, help="Print the ledger of runs' head N:HASH instead (after checking it).")
def audit_head(run_id, root, db, ledger):
    """Print SEQ:HASH of RUN's last event (or with --ledger, N:HASH of the store's ledger of runs).
    Keep it outside the store; `audit verify RUN --expect-head SEQ:HASH` (`audit verify --all
    --expect-head N:HASH`) then detects a rewrite up to it, even a re-hashed one, or a cut tail."""
    _call("audit_head", run_id=run_id, root=root, db=db, ledger=ledger)
