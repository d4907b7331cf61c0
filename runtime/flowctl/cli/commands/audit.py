"""``flowctl audit verify RUN`` (exit 0 intact, 1 tampered), also of pruned runs and their archives
(``--archive FILE|DIR [RUN]``).

The log is read in batches and every check is fed one event at a time
(:class:`flowctl.store.audit.RunCheck`, :class:`~flowctl.store.audit.StepsCheck`,
:class:`~flowctl.store.audit.HeadCheck`), so a 100,000-step run is verified without holding its log.
A run ``flowctl prune`` pruned is checked through the ranges the store keeps
(:class:`flowctl.store.prune.PrunedChain`); with ``--archive`` the archived rows are put back in
the stream and the whole log is checked as if it had never left."""
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


def run(run_id, root, db, expect_head=None, archive=None) -> int:
    if run_id is None:
        if archive is None:
            raise UsageError("audit verify needs RUN, or --archive FILE|DIR to check archives alone",
                             hint="flowctl audit verify RUN, or flowctl audit verify --archive .flowctl/archive")
        return _verify_archive(archive)
    from flowctl.store.archive import archived_rows, merge_events, range_events
    from flowctl.store.audit import HeadCheck, RunCheck, StepsCheck, seal_problem
    from flowctl.store.prune import PrunedChain, pruned_ranges

    problems, notes = [], []
    with read_run_events(root, db, run_id, steps=True) as (row, events, _tree, steps, store):
        ranges = pruned_ranges(store, row["id"])
        covered = archived_rows(archive, row["id"]) if archive is not None and ranges else {}
        extra, left = [], []
        for rng in ranges:
            found = covered.get(rng["first_seq"])
            if found is None:
                left.append(rng)
                continue
            name, digest, rows = found
            if name == rng["archive"] and digest != rng["archive_sha256"]:
                problems.append(f"archive {name} is not the file the events {rng['first_seq']}-{rng['last_seq']} "
                                "were pruned into (its sha256 differs)")
            extra.append(range_events(row["id"], rows, rng["first_seq"], rng["last_seq"]))
        if archive is not None and ranges and left:
            problems += [f"events {r['first_seq']}-{r['last_seq']} (pruned into {r['archive']}) are not in {archive}"
                         for r in left]
        chain = PrunedChain(left) if left else None
        checks = [RunCheck(row, chain), StepsCheck(steps)]
        head = HeadCheck(expect_head) if expect_head else None
        adds = [c.add for c in checks] + ([head.add] if head and not head.malformed else [])
        seen = {"tool_invoked": set(), "tool_succeeded": set()}  # (state, attempt, tool) in the store
        for ev in merge_events(events, extra):
            for add in adds:
                add(ev)
            if ev["type"] in seen:
                seen[ev["type"]].add((ev.get("state"), ev.get("attempt"), (ev.get("data") or {}).get("tool")))
        snapshot = snapshot_problem(store, row)
    if left:  # step records whose events left the store are checked with --archive
        checks[1].steps = [s for s in steps if _in_store(s, seen)]
        if len(checks[1].steps) < len(steps):
            notes.append(f"{len(steps) - len(checks[1].steps)} step records not checked (their events are archived)")
        notes += [f"events {r['first_seq']}-{r['last_seq']} pruned into {r['archive']} (head {r['hash'][:16]}…)"
                  for r in left]
    if head and not head.found and not head.malformed:
        at = next((r for r in left if r["last_seq"] == head.seq), None)
        if at is not None:
            head.found, head.hash = True, at["hash"]
    problems += checks[0].finish() + checks[1].finish()
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
    where = (f" (with {len(extra)} archived range{'s' if len(extra) != 1 else ''})" if extra else
             " in the store" if left else "")
    click.echo(f"run {row['id']}: {checks[0].chain.count} events{where}, hash chain intact; run row, "
               f"{len(checks[1].steps)} step records and definition snapshot match it{anchored}")
    for note in notes:
        click.echo(f"run {row['id']}: pruned: {note}")
    return EXIT_OK


def _in_store(step: dict, seen: dict) -> bool:
    """Whether the events a step record is checked against are all in the store (not pruned)."""
    key = (step.get("state"), step.get("attempt"), step.get("tool"))
    return key in seen["tool_invoked"] and (step.get("status") != "succeeded" or step.get("output") in (None, {})
                                            or key in seen["tool_succeeded"])


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
