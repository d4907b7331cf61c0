"""``flowctl audit verify RUN`` (exit 0 intact, 1 tampered), also of pruned runs and their archives
(``--archive FILE|DIR [RUN]``).

The log is read in batches and every check is fed one event at a time
(:class:`flowctl.store.audit.RunCheck`, :class:`~flowctl.store.audit.StepsCheck`,
:class:`~flowctl.store.audit.HeadCheck`), so a 100,000-step run is verified without holding its log.
A run ``flowctl prune`` pruned is checked by :class:`flowctl.store.prune.RunAudit` (the console's
run page uses it too): each pruned range against the archive file with its recorded sha256, from
``--archive`` or else by name from the project's ``.flowctl/archive/``, its rows put back in the
stream; a range whose archive is not found is stepped over and said *not checked* (then an
``--expect-head`` at or past it fails: without the archive the chain through it is not proved)."""
from __future__ import annotations

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_OK
from flowctl.cli.commands._common import read_run_events
from flowctl.errors import UsageError


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


def run(run_id, root, db, expect_head=None, archive=None, all_runs=False) -> int:
    if all_runs and (run_id is not None or archive is not None):
        raise UsageError("audit verify --all checks the ledger of every run: it takes no RUN and no --archive",
                         hint="flowctl audit verify --all, or flowctl audit verify RUN")
    if run_id is None:
        if archive is None:
            return verify_ledger(root, db, expect_head)
        return _verify_archive(archive)
    from flowctl.cli.commands._common import project_root
    from flowctl.store.archive import default_folder
    from flowctl.store.prune import RunAudit

    from flowctl.store.summary import FACT_TYPES, summary_problem

    with read_run_events(root, db, run_id, steps=True) as (row, events, _tree, steps, store):
        audit = RunAudit(store, row, steps, archive=archive, expect_head=expect_head,
                         folder=None if archive is not None else default_folder(project_root(root)))
        seen, facts = 0, []
        for ev in audit.events(events):
            seen += 1
            if ev["type"] in FACT_TYPES:
                facts.append(ev)
        # a pruned run's summary was written from the events the store still held: not compared
        whole = seen == row.get("last_seq") and not audit.ranges
        result = audit.finish([snapshot_problem(store, row), summary_problem(store, row, facts) if whole else None])
    if result.problems:
        for p in result.problems:
            click.echo(f"run {row['id']}: {p}", err=True)
        return EXIT_FAILED
    anchored = f", head {expect_head.split(':')[0]} as anchored" if expect_head else ""
    n = result.archived
    where = (f" (with {n} archived range{'s' if n != 1 else ''})" if n and not result.unchecked else
             f" (with {n} archived, {len(result.unchecked)} not checked)" if n else
             " in the store" if result.unchecked else "")
    click.echo(f"run {row['id']}: {result.events} events{where}, hash chain intact; run row, "
               f"{result.steps} step record{'s' if result.steps != 1 else ''} (one per side-effecting call) and "
               f"definition snapshot match it{anchored}")
    for note in result.notes:
        click.echo(f"run {row['id']}: {note}")
    return EXIT_OK


def ledger_report(root, db, expect_head=None):
    """:func:`flowctl.store.ledger.verify` of the command's store (``expect_head``: ``N:HASH`` text)."""
    from flowctl.cli.commands._common import open_store, project_root
    from flowctl.store.ledger import verify

    anchor = None
    if expect_head is not None:
        n, value = expect_head.split(":")
        anchor = (int(n), value)
    store = open_store(db, project_root(root))
    try:
        return verify(store, anchor)
    finally:
        store.close()


def verify_ledger(root, db, expect_head=None) -> int:
    """``audit verify`` without RUN: the store-wide ledger of runs; prints its head ``N:HASH``."""
    from flowctl.errors import RecordTampered

    try:
        report = ledger_report(root, db, expect_head)
    except RecordTampered as exc:  # a finding (exit 1), not a usage error
        click.echo(f"error: [{exc.code}] {exc}", err=True)
        return EXIT_FAILED
    for p in report.problems:
        click.echo(f"ledger: {p}", err=True)
    status = "PROBLEMS" if report.problems else "intact"
    click.echo(f"ledger: {report.rows} rows, {report.runs} runs in the store, {status}; head {report.head_text}"
               + (" as anchored" if expect_head and not report.problems else ""))
    return EXIT_FAILED if report.problems else EXIT_OK


def _verify_archive(target) -> int:
    """``audit verify --archive FILE|DIR``: every run of the archives, from them alone."""
    from flowctl.store.archive import verify_archive

    checked, problems = verify_archive(target)
    for name, rid, text in problems:
        click.echo(f"{name}: {'run ' + rid + ': ' if rid else ''}{text}", err=True)
    if problems:
        return EXIT_FAILED
    files = sorted({c[0] for c in checked})
    for name, rid, count, ranges in checked:
        spans = ", ".join(f"{r[0]}-{r[1]}" for r in ranges)
        click.echo(f"{name}: run {rid}: {count} archived events ({spans}), hash chain intact")
    click.echo(f"{len(checked)} runs in {len(files)} archives verified")
    return EXIT_OK
