"""flowctl.store.direct: a SQLite store at this schema opens without SQLAlchemy and keeps every
promise of the store — the same rows and events, the same conditioned writes (a stale token or a
live lease writes nothing), a child's end waking its parent, and a store it cannot serve (a
newer or older schema) left to SQLAlchemy."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from support.enginekit import Harness, build, contract, task
from flowctl.errors import LeaseLost, RunConflict, StoreError
from flowctl.store.audit import verify_run
from flowctl.store.sql import SCHEMA_VERSION, open_store

TOOLS = """
def step(input, call):
    return {"n": (input.get("n") or 0) + 1}
"""

LOOP = {
    **contract("step", "step"), **task("a", "step@1.0.0"), **task("b", "step@1.0.0"),
    "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n"
                          "  - {from: a, to: b}\n"
                          "  - {from: b, to: a, when: 'visits.b < `2`'}\n"
                          "  - {from: b, to: done}\n",
}


def _existing(tmp_path, name="flowctl.db"):
    """The URL of a store made (by SQLAlchemy) and closed: opening it again is direct mode."""
    url = f"sqlite:///{tmp_path}/{name}"
    open_store(url).close()
    return url


def _run_row(url, run_id):
    conn = sqlite3.connect(url[len("sqlite:///"):])
    conn.row_factory = sqlite3.Row
    try:
        row = dict(conn.execute("SELECT * FROM flowctl_runs WHERE id = ?", (run_id,)).fetchone())
        events = [dict(r) for r in conn.execute("SELECT * FROM flowctl_events WHERE run_id = ? ORDER BY seq", (run_id,))]
    finally:
        conn.close()
    return row, events


def test_an_existing_store_at_this_schema_opens_without_sqlalchemy(tmp_path):
    url = _existing(tmp_path)
    code = ("import json, sys; from flowctl.store.sql import open_store; s = open_store(sys.argv[1]); "
            "print(json.dumps([s.direct, 'sqlalchemy' in sys.modules])); s.close()")
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [True, False]
    fresh = open_store(f"sqlite:///{tmp_path}/new.db")  # a store to create: SQLAlchemy makes its tables
    try:
        assert not fresh.direct
    finally:
        fresh.close()


def test_a_run_in_direct_mode_writes_what_the_sqlalchemy_store_writes(tmp_path):
    root = build(tmp_path, LOOP, TOOLS)
    results = {}
    for mode, url in (("sqlalchemy", f"sqlite:///{tmp_path}/sa.db"), ("direct", _existing(tmp_path, "direct.db"))):
        store = open_store(url)
        assert store.direct is (mode == "direct")
        try:
            result = Harness(root, store=store).run(run_id="r1")
            assert result.status == "succeeded", result.error
            assert verify_run(store.get_run("r1"), store.events("r1")) == []
        finally:
            store.close()
        results[mode] = _run_row(url, "r1")
    (sa_row, sa_events), (direct_row, direct_events) = results["sqlalchemy"], results["direct"]
    assert direct_row.keys() == sa_row.keys()
    assert {k: direct_row[k] for k in ("status", "steps", "last_seq", "lease_until", "fence", "output", "error")} == \
           {k: sa_row[k] for k in ("status", "steps", "last_seq", "lease_until", "fence", "output", "error")}
    shape = lambda evs: [(e["seq"], e["type"], e["state"], e["attempt"], e["fence"]) for e in evs]  # noqa: E731
    assert shape(direct_events) == shape(sa_events)
    assert "sa" not in vars(open_store(_existing(tmp_path, "again.db")))  # nothing above opened SQLAlchemy for it


def _leased_run(store, run_id="r1", lease=30.0):
    """A running run row created leased (fence 1) as a worker's child run is, with no events."""
    row = {"id": run_id, "flow": "f", "flow_version": "1", "digest": "d" * 64, "parent_id": None, "status": "running",
           "input": {}, "params": {}, "output": None, "error": None, "cursor": {"state": "a"}, "created_at": 1.0,
           "updated_at": 1.0, "available_at": None, "owner": "w1", "last_seq": 0, "last_hash": "", "steps": 0}
    return store.create_run(row, [], lease=lease)


def test_direct_mode_commits_keep_the_fence_and_the_lease(tmp_path):
    store = open_store(_existing(tmp_path))
    try:
        assert store.direct
        assert _leased_run(store) == 1
        before = store.get_run("r1")["lease_until"]
        assert before is not None and before > store._reader.now()  # the database clock + 30 s
        store.commit("r1", 0, {"steps": 1}, fence=1, lease=60.0)  # the worker's own token: lease extended
        after = store.get_run("r1")
        assert after["steps"] == 1 and after["lease_until"] > before + 20
        assert "sa" not in vars(store)  # the step commits stayed on sqlite3
        with pytest.raises(LeaseLost):  # a stale token writes nothing
            store.commit("r1", 0, {"steps": 9}, fence=2, lease=60.0)
        with pytest.raises(RunConflict):  # no token while a live lease holds the run
            store.commit("r1", 0, {"steps": 9})
        assert store.get_run("r1")["steps"] == 1
        store.commit("r1", 0, {"status": "paused"}, fence=1)  # parks: the lease is released
        assert store.get_run("r1")["lease_until"] is None
    finally:
        store.close()


def test_a_queued_run_created_in_direct_mode_is_due_now_by_the_database_clock(tmp_path):
    store = open_store(_existing(tmp_path))
    try:
        row = {"id": "q1", "flow": "f", "flow_version": "1", "digest": "d" * 64, "parent_id": None,
               "status": "queued", "input": {}, "params": {}, "cursor": {"state": "a"}, "created_at": 1.0,
               "updated_at": 1.0, "available_at": None, "owner": None, "last_seq": 0, "last_hash": "", "steps": 0}
        store.create_run(row, [])
        due = store.get_run("q1")["available_at"]
        assert due is not None and abs(due - store._reader.now()) < 5
        claimed = store.claim("w1", 5, 30.0)  # claims are SQLAlchemy's: opened on first use
        assert [c["id"] for c in claimed] == ["q1"] and claimed[0]["row"]["status"] == "running"
    finally:
        store.close()


def test_a_child_ending_in_direct_mode_wakes_its_waiting_parent(tmp_path):
    store = open_store(_existing(tmp_path))
    try:
        base = {"flow": "f", "flow_version": "1", "digest": "d" * 64, "input": {}, "params": {},
                "cursor": {"state": "a"}, "created_at": 1.0, "updated_at": 1.0, "owner": None, "last_seq": 0,
                "last_hash": "", "steps": 0}
        store.create_run({**base, "id": "p1", "parent_id": None, "status": "waiting", "available_at": None}, [])
        store.create_run({**base, "id": "c1", "parent_id": "p1", "status": "running", "available_at": None}, [])
        store.commit("c1", 0, {"status": "succeeded", "output": {"ok": True}})
        assert store.get_run("c1")["status"] == "succeeded"
        assert store.get_run("p1")["available_at"] is not None  # made due in the child's own transaction
    finally:
        store.close()


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1])
def test_a_store_of_another_schema_is_not_opened_directly(tmp_path, version):
    url = _existing(tmp_path)
    conn = sqlite3.connect(url[len("sqlite:///"):])
    conn.execute("UPDATE flowctl_meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer flowctl"):
        open_store(url)


#: modules a plain `flowctl run` has no use for (issue 17's cold start): imported only where needed
#: (a failed WAL checkpoint's warning, a misspelt function's suggestion, a fan-out's thread pool)
NOT_ON_THE_RUN_PATH = ("sqlalchemy", "logging", "difflib", "concurrent.futures")


def test_a_second_flowctl_run_imports_no_sqlalchemy_and_its_record_verifies(tmp_path):
    root = build(tmp_path, LOOP, TOOLS)
    db = f"sqlite:///{tmp_path}/runs.db"
    probe = ("import json, sys\nfrom click.testing import CliRunner\nimport flowctl.cli.main\n"
             "r = CliRunner().invoke(flowctl.cli.main.main, sys.argv[1:])\n"
             f"print(json.dumps({{'exit': r.exit_code, 'out': r.output, 'sa': 'sqlalchemy' in sys.modules,\n"
             f"                  'loaded': [m for m in {NOT_ON_THE_RUN_PATH!r} if m in sys.modules]}}))\n")
    args = ["run", "f", "--root", str(root), "--db", db, "--format", "json"]
    outcomes = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        outcomes.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert [o["exit"] for o in outcomes] == [0, 0], outcomes
    assert outcomes[1]["sa"] is False  # the store existed at this schema: sqlite3 alone
    assert outcomes[1]["loaded"] == []
    store = open_store(db)
    try:
        runs = store.list_runs(limit=0)
        assert len(runs) == 2 and {r["status"] for r in runs} == {"succeeded"}
        for r in runs:
            assert verify_run(store.get_run(r["id"]), store.events(r["id"])) == []
    finally:
        store.close()


def test_threads_of_one_process_create_and_read_runs_at_once_in_direct_mode(tmp_path):
    import threading

    store = open_store(_existing(tmp_path))
    errors = []

    def work(i):
        try:
            for j in range(5):
                _leased_run(store, f"t{i}-{j}")
                store.commit(f"t{i}-{j}", 0, {"steps": 1}, fence=1, lease=30.0)
                assert store.get_run(f"t{i}-{j}")["steps"] == 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(store.list_runs(limit=0)) == 40
        assert "sa" not in vars(store)
    finally:
        store.close()
