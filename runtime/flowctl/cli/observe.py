"""The click layer of the commands that query across runs (issue 21): ``flowctl events`` and
``flowctl policy report``, added to the command line by :func:`register` (kept out of
:mod:`flowctl.cli.main` for its size). Like main, options only; the work is in ``commands/``."""
from __future__ import annotations

import click

from flowctl.cli.invoke import call as _call

#: the most a ``--limit`` of the reading commands (``runs``, ``stats``, ``events``) accepts: far
#: past any store, and inside what a SQL ``LIMIT`` binds (a 64-bit integer)
LIMIT_MAX = 1_000_000_000


def register(main, policy, root_db) -> None:
    """Add ``events`` to ``main`` and ``report`` to the ``policy`` group (``root_db``: main's
    ``--root``/``--db`` options)."""

    @main.command()
    @click.option("--tool", metavar="TOOL", help="Only events of this tool (the event's data.tool, e.g. refund_payment).")
    @click.option("--type", "type_", metavar="TYPE", help="Only events of this type (tool_failed, policy_decided, …).")
    @click.option("--flow", help="Only events of runs of this flow.")
    @click.option("--state", help="Only events of this state.")
    @click.option("--since", metavar="TIME|DURATION", help="Only events since an ISO-8601 time or a duration ago (1h).")
    @click.option("--until", metavar="TIME|DURATION", help="Only events up to an ISO-8601 time or a duration ago.")
    @click.option("--run", "run_id", metavar="RUN", help="Only events of this run (an id or a unique prefix).")
    @click.option("--limit", type=click.IntRange(min=1, max=LIMIT_MAX), metavar="N", help="Only the newest N matching events (still oldest first).")
    @root_db
    @click.option("--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text", show_default=True,
                  help="jsonl: one JSON object per event (time, ts, run_id, flow, seq, type, state, attempt, data, hash).")
    def events(tool, type_, flow, state, since, until, run_id, limit, root, db, fmt):
        """Events across all runs (child runs too), oldest first, printed as they are read.

        Filters combine (all must hold). Events show as the audit log keeps them: sensitive
        values were redacted when recorded. The order is commit order: by the time each step
        was committed, then run id, then sequence number (with --run: the run's own order).

        \b
        Examples:
          flowctl events --tool refund_payment --since 1h
          flowctl events --type tool_failed --flow order_return --since 2026-12-01T00:00:00Z --format jsonl
          flowctl events --run 01a2 --type policy_decided
        """
        _call("events", root=root, db=db, fmt=fmt, tool=tool, type_=type_, flow=flow, state=state, since=since,
              until=until, run_id=run_id, limit=limit)

    @policy.command(name="report")
    @click.option("--since", default="7d", show_default=True, metavar="TIME|DURATION",
                  help="The window: an ISO-8601 time or a duration ago.")
    @click.option("--fail-on-never", is_flag=True, help="Exit 1 when some rule never triggered in the window (for CI).")
    @root_db
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
    def policy_report(since, fail_on_never, root, db, fmt):
        """Every rule of every policy with its hit counts (allow, deny, warn, review), last time it
        triggered and deny/warn rates over the window, flagging rules that never triggered.

        Counts come from the gate's recorded decisions: runs' policy_decided events and the
        decisions `flowctl serve` logged. A rule that never denies, warns or asks for a review
        may be broken (a field path that never matches, say). Exit 0; with --fail-on-never, 1
        when a rule never triggered.

        \b
        Example:
          flowctl policy report --since 30d --fail-on-never
        """
        _call("policy", action="report", root=root, db=db, fmt=fmt, since=since, fail_on_never=fail_on_never)
