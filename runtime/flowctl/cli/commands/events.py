"""``flowctl events``: events across runs, filtered by tool, type, flow, state, time and run, oldest
first, printed as they are read (:func:`flowctl.store.query.query_events`)."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import note_unknown_flow, open_reader, project_root
from flowctl.cli.commands.audit_log import DATA_SHOWN
from flowctl.cli.commands.stats import parse_since

#: the longest value of a text filter (``--tool``, ``--type``, ``--flow``, ``--state``): far past
#: any name, and short enough for the database's pattern matching
FILTER_MAX = 200

#: the fields of a JSON line, in this order
FIELDS = ("time", "ts", "run_id", "flow", "seq", "type", "state", "attempt", "data", "hash")


def run(root, db, fmt="text", tool=None, type_=None, flow=None, state=None, since=None, until=None,
        run_id=None, limit=None) -> int:
    from flowctl.errors import UsageError
    from flowctl.store.query import EventFilter, query_events

    for option, value in (("--tool", tool), ("--type", type_), ("--flow", flow), ("--state", state)):
        if value is not None and len(value) > FILTER_MAX:
            raise UsageError(f"{option} is {len(value)} characters long; a filter value has at most {FILTER_MAX}",
                             hint=f"give the exact name ({option} NAME), e.g. one shown by: flowctl events --limit 20")
    low, high = parse_since(since), parse_since(until, "--until")
    if low is not None and high is not None and high < low:
        raise UsageError(f"--until {until!r} is before --since {since!r}: no event can match",
                         hint="--since is the start of the window, --until its end (e.g. --since 2h --until 1h)")
    note_unknown_flow(root, flow)
    store = open_reader(db, project_root(root), empty_ok=True)
    try:
        if run_id is not None:
            run_id = store.get_run(run_id)["id"]  # a unique prefix, or RunNotFound (exit 2)
        flt = EventFilter(tool=tool, type=type_, flow=flow, state=state, since=low, until=high, run_id=run_id,
                          limit=limit)
        shown = _jsonl(query_events(store, flt)) if fmt == "jsonl" else _text(query_events(store, flt))
    finally:
        store.close()
    if shown == 0 and fmt == "text":
        click.echo("no events match", err=True)
    return EXIT_OK


def _jsonl(events) -> int:
    from flowctl.engine.clock import iso

    n = 0
    for ev in events:
        ev["time"] = iso(ev["ts"])
        click.echo(json.dumps({k: ev.get(k) for k in FIELDS}, ensure_ascii=False, default=str))
        n += 1
    return n


def _text(events) -> int:
    from flowctl.engine.clock import iso

    n = cut = 0
    for ev in events:
        data = json.dumps(ev["data"], ensure_ascii=False, sort_keys=True, default=str)
        if len(data) > DATA_SHOWN:
            data, cut = data[:DATA_SHOWN - 1] + "…", cut + 1
        attempt = f" #{ev['attempt']}" if ev.get("attempt") else ""
        click.echo(f"{iso(ev['ts'])} {ev['run_id']} {ev['flow']} {ev['seq']:>4} {ev['type']:<22} "
                   f"{ev['state'] or '-'}{attempt}  {data}")
        n += 1
    if cut:
        click.echo(f"({cut} event(s) with data over {DATA_SHOWN} characters cut short, marked …; "
                   "--format jsonl shows every event whole)", err=True)
    return n
