"""How many transactions a worker's run costs (issue 17, target 8), counted at the database driver
on a real store (:mod:`support.dbtrace`: SQLite's trace callback, libpq's own protocol trace), so
that a commit added back to the step path fails here instead of only slowing the benchmark.

The run is the one benchmarks/bench_workers.py times: three task states with a read-only tool,
then ``succeed``. A worker commits it in **four** transactions: the claim, then one per task
state — ``run_resumed`` goes with the first state's commit, and the last state's commit ends the
run with its ledger row and its summary (schema 9) in the same transaction. Each event is still
recorded, in order, in the run's hash chain, and the summary is what its events say.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

import flowctl
from flowctl.store import ledger
from flowctl.store.audit import seal_problem, verify_run
from flowctl.store.sql import open_store
from flowctl.store.summary import summary_text
from support.dbtrace import trace_pg, trace_sqlite
from support.pg import pg_url  # noqa: F401 - fixture

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from loop_flow import make_project  # noqa: E402

RUNS = 3
#: the claim, the first task state's commit (with run_resumed), the second's, the third's (the run's end)
COMMITS_PER_RUN = 4
#: a worker's own rows: registering it, and its last heartbeat ("stopped")
WORKER_COMMITS = 2
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _url(request, tmp_path, kind):
    return f"sqlite:///{tmp_path}/flowctl.db" if kind == "sqlite" else request.getfixturevalue("pg_url")


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_worker_commits_a_three_step_run_in_four_transactions(request, tmp_path, kind):
    from flowctl.workers.worker import Worker, enqueue

    url = _url(request, tmp_path, kind)
    project = flowctl.load_project(make_project(tmp_path / "p", 3))
    store = open_store(url, create=True)
    ids = [enqueue(flowctl.Engine(project, store, check=False), "loop", {}) for _ in range(RUNS)]
    store.close()
    with (trace_sqlite if kind == "sqlite" else trace_pg)() as counts:
        store = open_store(url)  # its connections are opened under the trace
        # one run at a time; heartbeat and cancel poll slower than the test: nothing else commits
        worker = Worker(project, store, concurrency=1, max_runs=RUNS, lease=600, poll=0.05, listen=False,
                        cancel_poll=600)
        stats = worker.run()
        store.close()
    assert stats["succeeded"] == RUNS, stats
    assert counts.commits == WORKER_COMMITS + COMMITS_PER_RUN * RUNS, counts.log
    # whether a cancel request came too late comes back with the commit that ends the run: no read of its own
    assert not [s for s in counts.log if "cancel_requested IS NOT NULL" in str(s)], counts.log
    # a store without limit rows is claimed from by the claim statement alone: no transaction locking them
    assert not [s for s in counts.log if str(s).startswith("SELECT scope, name FROM flowctl_limits")], counts.log

    store = open_store(url)
    try:
        for run_id in ids:
            row, events = store.get_run(run_id), store.events(run_id)
            assert verify_run(row, events) == [] and seal_problem(row) is None
            assert [e["type"] for e in events] == [
                "run_started", "run_resumed",
                *["state_entered", "tool_invoked", "tool_succeeded", "transition_taken"] * 3,
                "state_entered", "run_succeeded"]
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            # one packed row per commit: the submit's, then the worker's three
            assert len({tuple(e["packed"]) for e in events if "packed" in e}) == 4
            _, summary = _summary(store, run_id)
            assert summary == (row["last_seq"], summary_text(events))  # what its events say
        report = ledger.verify(store)  # each run's start and end, chained (the end hashed by the server on PostgreSQL)
        assert report.problems == [] and report.rows == 2 * RUNS
    finally:
        store.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_refused_run_end_writes_no_ledger_row_and_no_summary(request, tmp_path, kind):
    """The end's ledger row and summary ride the run's last commit: a commit the store refuses (a
    stale fencing token) writes neither."""
    from flowctl.errors import LeaseLost
    from flowctl.workers.worker import enqueue

    url = _url(request, tmp_path, kind)
    project = flowctl.load_project(make_project(tmp_path / "p", 3))
    store = open_store(url, create=True)
    run_id = enqueue(flowctl.Engine(project, store, check=False), "loop", {})
    claim = store.claim("w:1", 1, 30)[0]
    ended = {"seq": 2, "ts": time.time(), "type": "run_succeeded", "state": "done", "attempt": None, "data": {},
             "data_json": "{}", "prev_hash": claim["row"]["last_hash"], "hash": "h2"}
    with pytest.raises(LeaseLost):
        store.commit(run_id, 1, {"status": "succeeded", "last_seq": 2, "last_hash": "h2", "updated_at": time.time()},
                     [ended], fence=claim["fence"] + 1, lease=30)
    assert store.get_run(run_id)["status"] == "running" and _summary(store, run_id)[1] is None
    report = ledger.verify(store)
    assert report.problems == [] and report.rows == 1  # its start only
    store.close()


def _summary(store, run_id):
    p = "%s" if store.pg else "?"
    with store.engine.connect() as conn:
        found = conn.exec_driver_sql(f"SELECT last_seq, facts FROM flowctl_run_summaries WHERE run_id = {p}",
                                     (run_id,)).fetchone()
    return run_id, tuple(found) if found else None


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_worker_stopped_before_the_first_step_still_records_run_resumed(request, tmp_path, kind):
    """``run_resumed`` waits for the first step's commit; a worker told to stop before that step
    commits it on its own, so the log says who took the run, and releases the run to the next."""
    from flowctl.workers.worker import Worker, enqueue

    url = _url(request, tmp_path, kind)
    project = flowctl.load_project(make_project(tmp_path / "p", 3))
    store = open_store(url, create=True)
    run_id = enqueue(flowctl.Engine(project, store, check=False), "loop", {})
    worker = Worker(project, store, concurrency=1, max_runs=1, lease=30, poll=0.05, listen=False)
    halt = worker.halt

    def stop_at_first_checkpoint(rid):
        worker.stopping.set()  # as SIGTERM would, just as the runner reaches its first checkpoint
        return halt(rid)

    worker.engine.halt = stop_at_first_checkpoint
    claim = store.claim(worker.id, 1, 30)[0]
    worker.take(claim)
    worker._drive(claim)
    row, events = store.get_run(run_id), store.events(run_id)
    assert [e["type"] for e in events] == ["run_started", "run_resumed"]
    assert events[-1]["data"]["owner"] == worker.id and verify_run(row, events) == []
    assert row["status"] == "running" and row["steps"] == 0  # released: the next claim continues it
    store.close()
