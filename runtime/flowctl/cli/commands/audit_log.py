"""``flowctl audit log RUN``: a run's audit events, in order."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import _events_for_json, read_run_events


def run(run_id, root, db, fmt) -> int:
    from flowctl.engine.clock import iso

    with read_run_events(root, db, run_id) as (_row, events, _tree, _steps, _store):
        if fmt == "json":
            click.echo(json.dumps(_events_for_json(list(events)), indent=2, ensure_ascii=False, default=str))
            return EXIT_OK
        cut = 0
        for ev in events:  # read in batches: a long run's log is printed as it is read
            data = json.dumps(ev["data"], ensure_ascii=False, sort_keys=True, default=str)
            if len(data) > DATA_SHOWN:
                data, cut = data[:DATA_SHOWN - 1] + "…", cut + 1
            attempt = f" #{ev['attempt']}" if ev.get("attempt") else ""
            click.echo(f"{ev['seq']:>4} {iso(ev['ts'])} {ev['type']:<22} {ev['state'] or '-'}{attempt}  {data}")
        if cut:
            click.echo(f"({cut} event(s) with data over {DATA_SHOWN} characters cut short, marked …; "
                       "--format json shows every event whole)", err=True)
    return EXIT_OK


#: characters of an event's data a text line shows
DATA_SHOWN = 160
