"""``flowctl run FLOW``: start a run and drive it. Exit 0 succeeded, 1 failed, 3 paused/waiting."""
from __future__ import annotations

import contextlib

from flowctl.cli.commands._common import open_engine, parse_json_arg, parse_params, print_result, tools_print_to_stderr
from flowctl.errors import UsageError


def run(flow, input, params, params_file, root, db, max_inline_wait, quiet, fmt) -> int:
    run_input = parse_json_arg(input, "--input")
    engine = open_engine(root, db, max_inline_wait=max_inline_wait, progress=not quiet and fmt == "text",
                         flow=flow)
    try:
        with tools_print_to_stderr(fmt):
            naming = getattr(engine.listener, "naming_runs", contextlib.nullcontext)
            with naming():  # timeouts that came due while nothing ran fire on the next run (their lines name their run)
                engine.fire_due_reviews()
            try:
                result = engine.run(flow, run_input, params=parse_params(params, params_file))
            except UsageError as exc:
                if getattr(exc, "field", None) == "input":  # say how to give it (new-user finding)
                    given = "no --input was given (the input is {})" if input is None else "pass --input JSON or @file"
                    exc.hint = f"{given}; {exc.hint}" if exc.hint else given
                raise
    finally:
        engine.store.close()
    return print_result(result, fmt=fmt, db=db)
