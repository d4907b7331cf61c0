"""``flowctl submit FLOW``: queue a run for workers and print its id (exit 0)."""
from __future__ import annotations

import json

import click

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import open_engine, parse_json_arg, parse_params


def run(flow, input, params, params_file, root, db, queue, priority, delay, fmt) -> int:
    from flowctl.definition.durations import parse_duration
    from flowctl.errors import UsageError
    from flowctl.workers.worker import enqueue

    run_input = parse_json_arg(input, "--input")
    seconds = None
    if delay:
        try:
            seconds = parse_duration(delay)
        except ValueError as exc:
            raise UsageError(f"--delay: {exc}") from None
    engine = open_engine(root, db, progress=False)
    try:
        run_id = enqueue(engine, flow, run_input, params=parse_params(params, params_file), queue=queue,
                         priority=priority, delay=seconds)
    finally:
        engine.store.close()
    from flowctl.cli.commands.reviews import unnotified_reviews

    for fid, state in unnotified_reviews(engine.project, flow):  # stderr: stdout stays the run id
        click.echo(f"{state.where('type')}: note: review '{state.id}' (flow '{fid}') has no notify tool: when a worker "
                   f"pauses the run there, nobody sees its token (workers print none); flowctl reviews lists the run "
                   f"and 'flowctl reviews --reissue RUN' gives a new token", err=True)
    if fmt == "json":
        click.echo(json.dumps({"run_id": run_id, "flow": flow, "queue": queue, "priority": priority}))
    else:
        click.echo(run_id)
    return EXIT_OK
