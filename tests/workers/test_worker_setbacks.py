"""A run a worker cannot drive (its tool does not import here, its definition fails …) is released
with a delay that doubles each time in a row, so a worker does not claim it again every second
forever (new-user finding: 16 claims in 16 s, the fence climbing, visible only in the worker's log)."""
from __future__ import annotations

import sqlite3

import flowctl
from flowctl.store.sql import open_store
from flowctl.workers.worker import MAX_SETBACK_DELAY, Worker, enqueue
from support.helpers import write_project

FILES = {
    "contracts/gone.v1.0.0.yaml": "id: gone\nversion: 1.0.0\nentrypoint: no_such_module_here:call\n",
    "states/t.yaml": "id: t\ntype: task\ntool: gone@^1\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/f.yaml": "flow: f\nversion: 1\nstart: t\ntransitions:\n  - {from: t, to: done}\n",
}


def test_a_run_that_cannot_be_driven_here_is_released_for_longer_each_time(tmp_path):
    root = write_project(tmp_path / "p", FILES)
    path = tmp_path / "runs.db"
    store = open_store(f"sqlite:///{path}", create=True)
    project = flowctl.load_project(root)
    run_id = enqueue(flowctl.Engine(project, store, check=False), "f", {})
    worker = Worker(project, store, concurrency=1, lease=30, listen=False)
    waits, logged = [], []
    worker.log = lambda event, fields: logged.append((event, fields))
    for _ in range(3):
        (claim,) = store.claim(worker.id, 1, 30.0)
        worker.take(claim)  # held, as the worker's claim loop books it
        worker._drive(claim)  # then driven, as its slot does
        row = store.get_run(run_id)
        waits.append(round(row["available_at"] - store.now()))
        with sqlite3.connect(path) as db:  # due again now, as if that time had passed
            db.execute("UPDATE flowctl_runs SET available_at = 0 WHERE id = ?", (run_id,))
    assert waits[1] == 2 * waits[0] and waits[2] == 4 * waits[0], waits
    assert store.get_run(run_id)["status"] == "queued"  # given back as it was, never started
    outcomes = [f for e, f in logged if f.get("run") == run_id and "outcome" in f]
    assert [o["outcome"] for o in outcomes] == [outcomes[0]["outcome"]] * 3 and "time 3 here" in outcomes[2]["detail"]
    assert MAX_SETBACK_DELAY >= 60
    store.close()
