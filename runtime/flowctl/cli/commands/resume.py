"""``flowctl resume RUN``: decide a review, continue a due wait, or take over an orphaned run."""
from __future__ import annotations

from flowctl.cli.commands._common import open_engine, parse_json_arg, print_result, tools_print_to_stderr


def run(run_id, token, decision, data, by, root, db, max_inline_wait, quiet, fmt) -> int:
    from flowctl.errors import UsageError

    if (token is None) != (decision is None):
        raise UsageError("--token and --decision go together", hint="flowctl reviews shows what is pending")
    engine = open_engine(root, db, max_inline_wait=max_inline_wait, progress=not quiet and fmt == "text", check=False, create=False)
    try:
        with tools_print_to_stderr(fmt):
            result = engine.resume(run_id, token=token, decision=decision, data=parse_json_arg(data, "--data"), by=by)
    finally:
        engine.store.close()
    return print_result(result, fmt=fmt, db=db)
