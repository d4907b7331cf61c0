"""``flowctl audit verify RUN`` (exit 0 intact, 1 tampered) and ``flowctl audit head RUN``.

The log is read in batches and every check is fed one event at a time
(:class:`flowctl.store.audit.RunCheck`, :class:`~flowctl.store.audit.StepsCheck`,
:class:`~flowctl.store.audit.HeadCheck`), so a 100,000-step run is verified without holding its log."""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK
from flowctl.cli.commands._common import read_run_events


def snapshot_problem(store, row) -> str | None:
    """Why the run's definition snapshot is not the one it is pinned to (edited, missing), or None."""
    from flowctl.definition.model import files_digest

    try:
        if files_digest(store.load_definition(row["digest"])) != row["digest"]:
            return f"the definition snapshot {row['digest'][:12]} does not hash to its digest (edited in the store)"
    except Exception as exc:  # noqa: BLE001 - missing or unreadable snapshot
        return f"the definition snapshot {row['digest'][:12]} cannot be read ({exc})"
    return None


def read_run(root, db, run_id):
    """``(row, events, steps, snapshot problem or None)`` of ``run_id``, read-only (the whole log:
    :func:`run` reads it in batches instead)."""
    with read_run_events(root, db, run_id, steps=True) as (row, events, _tree, steps, store):
        return row, list(events), steps, snapshot_problem(store, row)


def run(run_id, root, db, expect_head=None) -> int:
    from flowctl.store.audit import HeadCheck, RunCheck, StepsCheck, seal_problem

    with read_run_events(root, db, run_id, steps=True) as (row, events, _tree, steps, store):
        checks = [RunCheck(row), StepsCheck(steps)]
        head = HeadCheck(expect_head) if expect_head else None
        adds = [c.add for c in checks] + ([head.add] if head and not head.malformed else [])
        for ev in events:
            for add in adds:
                add(ev)
        snapshot = snapshot_problem(store, row)
    problems = checks[0].finish() + checks[1].finish()
    sealed = seal_problem(row)
    if sealed:
        problems.append(sealed)
    if snapshot:
        problems.append(snapshot)
    if head:
        problems += head.finish()
    if problems:
        for p in problems:
            click.echo(f"run {row['id']}: {p}", err=True)
        return EXIT_FAILED
    anchored = f", head {expect_head.split(':')[0]} as anchored" if expect_head else ""
    click.echo(f"run {row['id']}: {checks[0].chain.count} events, hash chain intact; run row, {len(steps)} step records "
               f"and definition snapshot match it{anchored}")
    return EXIT_OK
