"""``flowctl worker``: claim queued, due and orphaned runs from the store and drive them until
stopped (SIGTERM/Ctrl-C: finish the current steps, release the leases, exit 0)."""
from __future__ import annotations

import os
from pathlib import Path

from flowctl.cli.commands import EXIT_OK
from flowctl.cli.commands._common import open_project


def parse_limit(text: str):
    """``flow:NAME=N`` / ``queue:NAME=N`` (``N`` = ``none`` removes the limit)."""
    from flowctl.errors import UsageError

    scope, sep, rest = text.partition(":")
    name, eq, value = rest.rpartition("=")
    if not sep or not eq or not name or scope not in ("flow", "queue"):
        raise UsageError(f"--limit {text!r}: write flow:NAME=N or queue:NAME=N (N = none removes it)")
    if value == "none":
        return scope, name, None
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"--limit {text!r}: N must be a positive whole number or none")
    return scope, name, int(value)


def run(root, db, concurrency, queues, lease, poll, max_inline_wait, limits, max_runs, quiet, log_format) -> int:
    from flowctl.definition.durations import parse_duration
    from flowctl.errors import UsageError
    import signal

    from flowctl.store.protocol import QueueStore
    from flowctl.store.sql import open_store
    from flowctl.workers.worker import Worker, json_logger, text_logger

    # SIGTERM/Ctrl-C while still starting (loading, connecting): nothing is held yet, so stop with 0
    stopped, built = [], []

    def _early_stop(signum, _frame):
        stopped.append(signum)
        if built:
            built[0].stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _early_stop)
    durations = {}
    for flag, value in (("--lease", lease), ("--poll", poll), ("--max-inline-wait", max_inline_wait)):
        try:
            durations[flag] = parse_duration(value)
        except ValueError as exc:
            raise UsageError(f"{flag}: {exc}") from None
    wanted = sorted({q.strip() for item in queues for q in item.split(",") if q.strip()}) or None
    parsed = [parse_limit(text) for text in limits]
    project = open_project(root)
    store = open_store(db or os.environ.get("FLOWCTL_DB"), Path(project.root), create=True,
                       pool_size=concurrency * 2 + 4)  # a connection per run, the heartbeat, the claims
    if not isinstance(store, QueueStore):
        raise UsageError("flowctl worker needs a shared store: --db postgresql://… or sqlite:///path.db, not memory")
    if any(c.sensitive for versions_ in project.contracts.values() for c in versions_):
        try:  # runs with sensitive fields are sealed: a worker without the shared key could run none of them
            store.keyring()
        except Exception:
            store.close()
            raise
    try:
        for scope, name, value in parsed:
            store.set_limit(scope, name, value)
        log = json_logger() if log_format == "json" else text_logger(quiet=quiet)
        worker = Worker(project, store, concurrency=concurrency, queues=wanted, lease=durations["--lease"],
                        poll=durations["--poll"], max_inline_wait=durations["--max-inline-wait"], max_runs=max_runs,
                        log=log)
        built.append(worker)
        if not stopped:
            worker.run()
    finally:
        store.close()
    return EXIT_OK
