"""``flowctl trace RUN``: the path in one line and the steps in a table (or JSON). The events are read
in batches and folded as they come (:func:`flowctl.store.history.iter_steps`), so a 100,000-step run
is traced in seconds and bounded memory; past :data:`PLAIN_PAST` steps the table is plain lines."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import _events_for_json, child_tree, one_line_path, read_run_events
from flowctl.store.history import iter_steps, steps_of

__all__ = ["steps_of", "child_tree", "console", "kept_effects", "run"]


def console():
    """A rich console that does not wrap tables to 80 columns when writing to a pipe or file."""
    import sys

    from rich.console import Console

    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 240)


#: steps past which the table is printed as plain aligned lines (a rich table of a 100,000-step run
#: takes minutes to lay out)
PLAIN_PAST = 1000
COLUMNS = ("#", "state", "type", "tool", "tries", "tool ms", "policy", "outcome", "next")  # tool ms: time in tool calls


def run(run_id, root, db, fmt, last=None) -> int:
    """Print the run (``--last N``: only its last N steps, saying how many earlier ones were left out)."""
    from flowctl.store.prune import pruned_ranges

    with read_run_events(root, db, run_id, with_children=True) as (row, events, tree, _steps, store):
        pruned = pruned_ranges(store, row["id"])
        if fmt == "json":
            return _json(row, list(events), last, pruned)
        return _text(row, events, tree, last, pruned)


def _pruned_note(pruned: list) -> str | None:
    """What a reader of a pruned run must know first: which events are not in the store any more."""
    if not pruned:
        return None
    from flowctl.engine.clock import iso

    n = sum(r["n_events"] for r in pruned)
    spans = ", ".join(f"{r['first_seq']}–{r['last_seq']}" for r in pruned)
    archives = ", ".join(sorted({r["archive"] for r in pruned}))
    return (f"pruned: {n} event{'s' if n != 1 else ''} (seq {spans}) were moved to {archives} on "
            f"{iso(max(r['pruned_at'] for r in pruned))}: the path and steps below are only what the store still holds "
            "(flowctl audit verify RUN checks them against the archive)")


def _json(row, events, last, pruned=()) -> int:
    from flowctl.engine.clock import iso

    steps = steps_of(events)
    path = [s["state"] for s in steps]
    _events_for_json(events)
    run_info = {k: row.get(k) for k in ("id", "flow", "flow_version", "digest", "status", "output", "error",
                                        "created_at", "updated_at")}
    run_info.update(started=iso(row["created_at"]), updated=iso(row["updated_at"]), kept=kept_effects(row))
    out = {"run": run_info, "path": path, "steps": steps, "events": events,
           "pruned": [{k: r[k] for k in ("first_seq", "last_seq", "n_events", "archive", "pruned_at")} for r in pruned]}
    if last is not None and len(steps) > last:
        out.update(steps=steps[-last:], earlier_steps_left_out=len(steps) - last)
    click.echo(json.dumps(out, indent=2, ensure_ascii=False, default=str))
    return EXIT_OK


def _text(row, events, tree, last, pruned=()) -> int:
    """The header, the path, the steps' table (plain lines past :data:`PLAIN_PAST` rows), the
    errors, child runs, compensations and kept effects; the events are folded as they are read."""
    import collections

    from flowctl.engine.clock import iso

    path, comp = [], []
    rows = collections.deque(maxlen=last) if last else []  # (cells, note or None)
    same: dict = {}  # one string object per repeated cell text (a long run repeats a few states)
    total = 0

    def watched():
        for ev in events:
            if ev["type"].startswith("compensation_"):
                comp.append(ev)
            yield ev

    for s in iter_steps(watched()):
        total += 1
        label = s["state"]
        if s.get("reasks"):  # a model step: `classify (re-asked ×1)`, an agent's tools `[get_order, refund]`
            label += f" (re-asked ×{s['reasks']})"
        if s.get("agent_tools"):
            label += " [" + ", ".join(dict.fromkeys(str(n) for n in s["agent_tools"])) + "]"
        path.append(same.setdefault(label, label))
        cells = (str(s["step"]),) + tuple(same.setdefault(c, c) for c in (
            s["state"], s["type"] or "", s["tool"] or "", str(s["attempts"]), f"{s['duration_ms']:.1f}",
            (s["policy"] or "").split(" (")[0], s["outcome"], s["to"] or ""))
        notes = [f"#{s['step']} {s['state']}: {e} (sent back to the model)" for e in s.get("agent_errors") or ()]
        if s["error"]:
            at = f" (raised at {s['raised_at']})" if s.get("raised_at") else ""
            notes.append(f"#{s['step']} {s['state']}: {s['error']}{at}")
        note = "\n".join(notes) or None
        rows.append((cells, note))
    click.echo(f"run {row['id']} ({row['flow']} v{row['flow_version']}): {row['status']}")
    note = _pruned_note(pruned)
    if note:
        click.echo(note)
    click.echo(one_line_path(path))
    if total > len(rows):
        left = total - len(rows)
        click.echo(f"({left} earlier step{'s' if left != 1 else ''} left out: the last {len(rows)} of {total} steps follow)")
    if len(rows) <= PLAIN_PAST:
        from rich.table import Table

        table = Table(box=None, header_style="bold")
        for col in COLUMNS:
            table.add_column(col, no_wrap=True)
        for cells, _note in rows:
            table.add_row(*cells)
        console().print(table)
    else:
        _plain(rows)
    for _cells, note in rows:
        if note:
            click.echo(note)
    if tree:
        click.echo("child runs:")
        for line in tree:
            click.echo(line)
    for e in comp:
        click.echo(f"{iso(e['ts'])} {e['type']}: {(e['data'] or {}).get('tool')} of '{e['state']}'")
    for entry in kept_effects(row):
        click.echo(f"kept (not compensated): {entry['tool']} of '{entry['state']}' (step {entry['step']}); "
                   f"the run ended {row['status']} without undoing it")
    return EXIT_OK


def _plain(rows) -> None:
    """The steps' table as plain lines, columns aligned as the rich table aligns them, written
    :data:`PLAIN_PAST` lines at a time."""
    widths = [len(c) for c in COLUMNS]
    for cells, _note in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, cells)]

    def line(cells) -> str:
        return (" " + "  ".join(c.ljust(w) for c, w in zip(cells, widths))).rstrip()

    chunk = [line(COLUMNS)]
    for cells, _note in rows:
        chunk.append(line(cells))
        if len(chunk) >= PLAIN_PAST:
            click.echo("\n".join(chunk))
            chunk = []
    if chunk:
        click.echo("\n".join(chunk))


def kept_effects(row) -> list:
    """The completed side effects a failed or cancelled run still holds: the saga entries no
    compensation undid (a ``fail`` state or handler without ``compensate: true``, or ``cancel
    --no-compensate``), ``[{tool, state, step}]`` oldest first; ``[]`` for other runs."""
    cursor = row.get("cursor")
    if row.get("status") not in ("failed", "cancelled") or not isinstance(cursor, dict):
        return []
    return [{"tool": e.get("tool"), "state": e.get("state"), "step": e.get("step")}
            for e in cursor.get("saga") or () if isinstance(e, dict)]
