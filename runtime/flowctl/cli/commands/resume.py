"""``flowctl resume RUN``: decide a review, continue a due wait, or take over an orphaned run."""
from __future__ import annotations

import click

from flowctl.cli.commands._common import open_engine, parse_json_arg, print_result, tools_print_to_stderr


def run(run_id, token, decision, data, by, root, db, max_inline_wait, quiet, fmt) -> int:
    from flowctl.errors import UsageError

    if (token is None) != (decision is None):
        raise UsageError("--token and --decision go together", hint="flowctl reviews shows what is pending")
    engine = open_engine(root, db, max_inline_wait=max_inline_wait, progress=not quiet and fmt == "text", check=False, create=False)
    try:
        with tools_print_to_stderr(fmt):
            result = engine.resume(run_id, token=token, decision=decision, data=parse_json_arg(data, "--data"), by=by)
        parents = _parents(engine.store, result.run_id) if fmt == "text" else []
    finally:
        engine.store.close()
    code = print_result(result, fmt=fmt, db=db)
    for row in parents:  # a child's end may have ended (or moved) its parents in this process too
        error = row.get("error") or {}
        why = f" [{error.get('code') or error.get('type')}]: {error.get('message')}" if error else ""
        click.echo(f"parent run {row['id']} ({row['flow']}): {row['status']}{why}")
    return code


def _parents(store, run_id: str) -> list:
    """The run's parent, grandparent, … rows (nearest first; at most 8 levels)."""
    out = []
    row = store.get_run(run_id)
    while row.get("parent_id") and len(out) < 8:
        row = store.get_run(row["parent_id"])
        out.append(row)
    return out
