"""``flowctl audit verify RUN`` (exit 0 intact, 1 tampered) and ``flowctl audit head RUN``."""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK
from flowctl.cli.commands._common import open_store, project_root


def read_run(root, db, run_id):
    """``(row, events, steps, snapshot problem or None)`` of ``run_id``, read-only."""
    from flowctl.definition.model import files_digest

    store = open_store(db, project_root(root))
    try:
        row = store.get_run(run_id)
        events = store.events(row["id"])
        steps = store.steps(row["id"])
        snapshot = None
        try:
            if files_digest(store.load_definition(row["digest"])) != row["digest"]:
                snapshot = f"the definition snapshot {row['digest'][:12]} does not hash to its digest (edited in the store)"
        except Exception as exc:  # noqa: BLE001 - missing or unreadable snapshot
            snapshot = f"the definition snapshot {row['digest'][:12]} cannot be read ({exc})"
        return row, events, steps, snapshot
    finally:
        store.close()


def run(run_id, root, db, expect_head=None) -> int:
    from flowctl.store.audit import seal_problem, verify_head, verify_run, verify_steps

    row, events, steps, snapshot = read_run(root, db, run_id)
    problems = verify_run(row, events)
    problems += verify_steps(steps, events)
    sealed = seal_problem(row)
    if sealed:
        problems.append(sealed)
    if snapshot:
        problems.append(snapshot)
    if expect_head:
        problems += verify_head(events, expect_head)
    if problems:
        for p in problems:
            click.echo(f"run {row['id']}: {p}", err=True)
        return EXIT_FAILED
    anchored = f", head {expect_head.split(':')[0]} as anchored" if expect_head else ""
    click.echo(f"run {row['id']}: {len(events)} events, hash chain intact; run row, {len(steps)} step records "
               f"and definition snapshot match it{anchored}")
    return EXIT_OK
