"""Workers: submit, the claim, leases and fencing, limits, due times, heartbeats during long tool
calls, SIGTERM, several processes on one SQLite file, child runs, the CLI, and the upgrade of a
version-1 store in place. Each backend-parametrised test runs on SQLite and on PostgreSQL (skipped
with the reason when no server answers). The multi-process chaos test is tests/test_chaos.py."""
from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support.helpers import FLOWCTL_EXE, load_sql_dump, write_project
from support.pg import pg_url  # noqa: F401 - fixture

TOOLS = '''
import os, sqlite3, time

def _db():
    conn = sqlite3.connect(os.environ["LEDGER_DB"], timeout=30)
    conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, pid INTEGER)")
    conn.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT, pid INTEGER, t0 REAL, t1 REAL)")
    return conn

def _gate(path):
    # blocks until the test opens the gate (creates the file): the test decides when the call ends
    deadline = time.time() + 120
    while path and not os.path.exists(path):
        if time.time() > deadline:
            raise RuntimeError("the gate was never opened: " + path)
        time.sleep(0.01)

def apply(input, call):
    t0 = time.time()
    with _db() as conn:
        conn.execute("INSERT INTO calls VALUES (?, ?, ?, NULL)", (call.idempotency_key, os.getpid(), t0))
    _gate(input.get("gate"))
    time.sleep(input.get("sleep") or 0)
    with _db() as conn:
        conn.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (call.idempotency_key, os.getpid()))
        conn.execute("UPDATE calls SET t1 = ? WHERE key = ? AND t0 = ?", (time.time(), call.idempotency_key, t0))
    _gate(input.get("gate_after"))  # the effect is applied; the call has not returned
    return {"key": call.idempotency_key}

def verify(input, output, call):
    with _db() as conn:
        row = conn.execute("SELECT key FROM effects WHERE key = ?", (call.idempotency_key,)).fetchone()
    return {"key": row[0]} if row else False

def undo(input, output, call):
    with _db() as conn:
        conn.execute("INSERT INTO calls VALUES (?, ?, ?, ?)", ("undo:" + call.idempotency_key, os.getpid(), time.time(), None))
    _gate(os.environ.get("UNDO_GATE"))
    with _db() as conn:
        conn.execute("DELETE FROM effects WHERE key = ?", (call.idempotency_key,))

def note(input, call):
    with _db() as conn:
        conn.execute("INSERT INTO calls VALUES (?, ?, ?, ?)", ("reminder" if input.get("reminder") else "notice",
                                                               os.getpid(), time.time(), time.time()))
    return {}
'''

FILES = {
    "contracts/apply.v1.0.0.yaml": """
        id: apply
        version: 1.0.0
        entrypoint: wk:apply
        verify: wk:verify
        compensate: wk:undo
        idempotency_key: "join('-', [run.id, input.leg])"
        side_effects:
          - {type: database_write, target: effects}
        timeout: 60s
        """,
    "policies/all.yaml": "policy: all\napplies_to: [apply]\nallow: []\n",
    "states/one.yaml": "id: one\ntype: task\ntool: apply@^1\ninput: {leg: \"'one'\", sleep: input.sleep, gate: input.gate, gate_after: input.gate_after}\n",
    "states/two.yaml": "id: two\ntype: task\ntool: apply@^1\ninput: {leg: \"'two'\", sleep: input.sleep, gate: input.gate}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/nap.yaml": "id: nap\ntype: wait\nduration: 1s\n",
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\ntimeout: 1s\non_timeout: {goto: done}\n",
    "contracts/note.v1.0.0.yaml": "id: note\nversion: 1.0.0\nentrypoint: wk:note\n",
    "states/nudge.yaml": "id: nudge\ntype: review\ndecisions: [approve]\nnotify: note@^1\nremind_after: 1s\ntimeout: 2500ms\n"
                         "on_timeout: {goto: done}\n",
    "transitions/nudger.yaml": "flow: nudger\nstart: nudge\ntransitions:\n  - {from: nudge, to: done}\n",
    "states/fan.yaml": "id: fan\ntype: parallel\nbranches: [f, f]\ninput: {sleep: input.sleep, gate: input.gate}\n",
    "transitions/f.yaml": "flow: f\nversion: 1\nstart: one\ntransitions:\n  - {from: one, to: two}\n  - {from: two, to: done}\n",
    "transitions/napper.yaml": "flow: napper\nstart: nap\ntransitions:\n  - {from: nap, to: done}\n",
    "transitions/asker.yaml": "flow: asker\nstart: ask\ntransitions:\n  - {from: ask, to: done}\n",
    "transitions/fanned.yaml": "flow: fanned\nstart: fan\ntransitions:\n  - {from: fan, to: done}\n",
    "tools/wk.py": TOOLS,
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/flowctl.db"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = write_project(tmp_path / "proj", FILES)
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "ledger.db"))
    return root


def _engine(root, url):
    import flowctl
    from flowctl.engine.engine import Engine
    from flowctl.store.sql import open_store

    return Engine(flowctl.load_project(root), open_store(url))


def _env(tmp_path):
    env = dict(os.environ, LEDGER_DB=str(tmp_path / "ledger.db"))
    env.pop("FLOWCTL_DEBUG", None)
    return env


def _flowctl(args, root, env, timeout=120):
    return subprocess.run([FLOWCTL_EXE, *args], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def _ledger(tmp_path, table="effects"):
    path = tmp_path / "ledger.db"
    if not path.exists():
        return []
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute(f"SELECT key FROM {table} ORDER BY rowid")]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _event(seq, prev="", type_="probe"):
    return {"seq": seq, "ts": time.time(), "type": type_, "state": None, "attempt": None, "data": {},
            "data_json": "{}", "prev_hash": prev, "hash": f"h{seq}"}


def _worker(engine, **kw):
    from flowctl.workers.worker import Worker

    kw.setdefault("lease", 5.0)
    kw.setdefault("poll", 0.1)
    return Worker(engine.project, engine.store, **kw)


def _run_in_thread(worker):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("stats", worker.run()), daemon=True)
    thread.start()
    return thread, out


def _with_workers(workers, predicate, timeout, what):
    """Run ``workers`` on threads until ``predicate()`` holds (or fail after ``timeout`` s), then stop them."""
    threads = [_run_in_thread(w)[0] for w in workers]
    try:
        _until(predicate, timeout, what)
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(30)


def _until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# ------------------------------------------------------------------------------------------ submit
def test_submit_queues_a_run_and_a_worker_process_drives_it(tmp_path, project, db_url):
    env = _env(tmp_path)
    sub = _flowctl(["submit", "f", "--input", '{"sleep": 0}', "--db", db_url, "--priority", "3"], project, env)
    assert sub.returncode == 0, sub.stderr
    run_id = sub.stdout.strip()
    listed = json.loads(_flowctl(["runs", "--db", db_url, "--status", "queued", "--format", "json"], project, env).stdout)
    assert [(r["id"], r["status"], r["priority"], r["queue"], r["owner"]) for r in listed] == \
        [(run_id, "queued", 3, "default", None)]
    worked = _flowctl(["worker", "--db", db_url, "--max-runs", "1", "--log-format", "json"], project, env)
    assert worked.returncode == 0, worked.stdout + worked.stderr
    log = [json.loads(line) for line in worked.stdout.splitlines()]
    assert [e["event"] for e in log] == ["worker_started", "claimed", "finished", "worker_stopped"]
    assert log[2]["outcome"] == "succeeded" and log[1]["fence"] == 1
    trace = json.loads(_flowctl(["trace", run_id, "--db", db_url, "--format", "json"], project, env).stdout)
    types = [e["type"] for e in trace["events"]]
    assert types[0] == "run_started" and types[1] == "run_resumed" and types[-1] == "run_succeeded"
    assert trace["events"][1]["data"]["owner"] == log[0]["worker"]  # who took it is in the audit log
    assert _flowctl(["audit", "verify", run_id, "--db", db_url], project, env).returncode == 0
    assert _ledger(tmp_path) == [f"{run_id}-one", f"{run_id}-two"]
    from flowctl.store.sql import open_store

    store = open_store(db_url)
    assert [e["fence"] for e in store.events(run_id)] == [None] + [1] * (len(types) - 1)
    row = store.get_run(run_id)
    assert (row["status"], row["fence"], row["lease_until"]) == ("succeeded", 1, None)


def test_submit_refuses_what_run_refuses(tmp_path, project):
    env = _env(tmp_path)
    db = f"sqlite:///{tmp_path}/s.db"
    bad = _flowctl(["submit", "nope", "--db", db], project, env)
    assert bad.returncode == 2 and "no flow 'nope'" in bad.stderr
    mem = _flowctl(["submit", "f", "--db", "memory"], project, env)
    assert mem.returncode == 2 and "shared store" in mem.stderr
    assert _flowctl(["worker", "--db", "memory"], project, env).returncode == 2
    limit = _flowctl(["worker", "--db", db, "--limit", "flows:f=2"], project, env)
    assert limit.returncode == 2 and "flow:NAME=N" in limit.stderr


# ------------------------------------------------------------------------------------------ claim
def test_claims_are_disjoint_and_ordered_by_priority_then_due_time(tmp_path, project, db_url):
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    store = engine.store
    low = [enqueue(engine, "f", {}) for _ in range(40)]
    high = [enqueue(engine, "f", {}, priority=5) for _ in range(4)]
    other = enqueue(engine, "f", {}, queue="other", priority=9)
    # priority, then age: the due time the store gave each (the database clock, to the millisecond;
    # runs submitted within one millisecond are in id order)
    due = {run_id: store.get_run(run_id)["available_at"] for run_id in high}
    oldest_first = sorted(high, key=lambda run_id: (due[run_id], run_id))
    assert [c["id"] for c in store.claim("w:0", 4, 30, queues=["default"])] == oldest_first
    taken, lock = [], threading.Lock()

    def claimer(n):
        for _ in range(40):
            got = store.claim(f"w:{n}", 3, 30, queues=["default"])
            if not got:
                return
            with lock:
                taken.extend(got)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(c["id"] for c in taken) == sorted(low)  # each run once, every run
    assert {c["fence"] for c in taken} == {1} and {c["prev_status"] for c in taken} == {"queued"}
    assert store.get_run(other)["status"] == "queued"  # another queue: untouched
    assert [c["id"] for c in store.claim("w:9", 5, 30)] == [other]


def test_a_claim_returns_each_run_as_the_store_then_holds_it(tmp_path, project, db_url):
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    store = engine.store
    ids = [enqueue(engine, "f", {"n": i}) for i in range(3)]
    claimed = store.claim("w:1", 5, 30)
    assert sorted(c["id"] for c in claimed) == sorted(ids)
    for c in claimed:  # the worker drives the row the claim returned, without reading it again
        assert c["row"] == store.get_run(c["id"])
        assert (c["row"]["status"], c["row"]["owner"], c["row"]["fence"]) == ("running", "w:1", c["fence"])
        assert c["prev_status"] == "queued" and c["row"]["lease_until"] == c["lease_until"]
    assert store.claim("w:2", 5, 30) == []


def test_a_stale_fencing_token_writes_nothing(tmp_path, project, db_url):
    from flowctl.errors import RunConflict
    from flowctl.store.sql import LeaseLost
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    store = engine.store
    run_id = enqueue(engine, "f", {})
    (a,) = store.claim("host-a:1", 1, 1.0)
    assert (a["id"], a["fence"], a["prev_status"], a["prev_owner"]) == (run_id, 1, "queued", None)
    store.commit(run_id, 1, {"steps": 1, "last_seq": 2}, [_event(2, type_="by_a")], fence=1, lease=1.0)
    with pytest.raises(RunConflict, match="leased by worker host-a:1"):  # a writer without a token
        store.commit(run_id, 2, {"steps": 9, "last_seq": 3}, [_event(3, type_="intruder")])
    time.sleep(1.3)  # a's lease ends (database clock); nobody has claimed the run yet
    with pytest.raises(LeaseLost, match="expired"):
        store.commit(run_id, 2, {"steps": 2, "last_seq": 3}, [_event(3, type_="late_a")], fence=1, lease=1.0)
    assert store.renew("host-a:1", {run_id: 1}, 1.0) == set()  # an expired lease is not renewed either
    (b,) = store.claim("host-b:2", 5, 30.0)  # the expired branch of the claim
    assert (b["id"], b["fence"], b["prev_status"], b["prev_owner"]) == (run_id, 2, "running", "host-a:1")
    with pytest.raises(LeaseLost, match="claimed by host-b:2"):
        store.commit(run_id, 2, {"steps": 2, "last_seq": 3}, [_event(3, type_="stale_a")], fence=1, lease=1.0)
    assert store.renew("host-b:2", {run_id: 2}, 30.0) == {run_id}
    store.commit(run_id, 2, {"steps": 3, "last_seq": 3, "status": "waiting", "available_at": time.time() + 3600},
                 [_event(3, type_="by_b")], fence=2, lease=30.0)
    assert [(e["seq"], e["type"], e["fence"]) for e in store.events(run_id)] == \
        [(1, "run_started", None), (2, "by_a", 1), (3, "by_b", 2)]
    row = store.get_run(run_id)
    assert (row["status"], row["fence"], row["lease_until"], row["steps"]) == ("waiting", 2, None, 3)
    store.commit(run_id, 3, {"steps": 4, "last_seq": 4}, [_event(4, type_="resume")])  # no lease now: others may write


def test_limits_per_flow_and_per_queue_hold_across_claimers(tmp_path, project, db_url):
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    store = engine.store
    store.set_limit("flow", "f", 2)
    store.set_limit("queue", "slow", 1)
    runs_f = [enqueue(engine, "f", {}) for _ in range(5)]
    runs_slow = [enqueue(engine, "napper", {}, queue="slow") for _ in range(3)]
    runs_free = [enqueue(engine, "asker", {}) for _ in range(3)]
    first = store.claim("a:1", 20, 30)
    second = store.claim("b:2", 20, 30)
    held = [c["id"] for c in first + second]
    assert len(set(held) & set(runs_f)) == 2 and len(set(held) & set(runs_slow)) == 1
    assert set(runs_free) <= set(held)  # no limit: all of them
    assert store.claim("c:3", 20, 30) == []
    done = next(c for c in first + second if c["id"] in runs_f)
    store.commit(done["id"], 1, {"status": "succeeded"}, [], fence=done["fence"])
    (again,) = store.claim("c:3", 20, 30)
    assert again["id"] in runs_f and again["id"] not in held
    assert store.limits() == {("flow", "f"): 2, ("queue", "slow"): 1}
    store.set_limit("flow", "f", None)
    assert len(store.claim("c:3", 20, 30)) == 2


# ------------------------------------------------------------------------------------------ in process
def test_waits_and_review_timeouts_are_due_times_for_workers(tmp_path, project, db_url):
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    napper = enqueue(engine, "napper", {})
    asker = enqueue(engine, "asker", {})
    worker = _worker(engine, concurrency=2, max_inline_wait=0.0, max_runs=4)
    thread, out = _run_in_thread(worker)
    thread.join(30)
    assert not thread.is_alive()
    for run_id, parked in ((napper, "waiting"), (asker, "paused")):
        row = engine.store.get_run(run_id)
        assert row["status"] == "succeeded", row
        assert row["fence"] == 2  # claimed when queued, then again when due
        types = [e["type"] for e in engine.store.events(run_id)]
        assert "run_paused" in types
    asked = [e["type"] for e in engine.store.events(asker)]
    assert "review_timed_out" in asked
    assert out["stats"]["claimed"] == 4 and out["stats"]["succeeded"] == 2


def test_a_worker_sends_review_reminders_then_times_the_review_out(tmp_path, project, db_url):
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    run_id = enqueue(engine, "nudger", {})
    worker = _worker(engine, max_inline_wait=0.0, max_runs=3)
    thread, out = _run_in_thread(worker)
    thread.join(30)
    assert not thread.is_alive()
    row = engine.store.get_run(run_id)
    assert row["status"] == "succeeded" and row["fence"] == 3  # queued, reminder due, deadline due
    assert _ledger(tmp_path, "calls") == ["notice", "reminder"]
    types = [e["type"] for e in engine.store.events(run_id)]
    assert types.index("review_reminded") < types.index("review_timed_out")
    assert out["stats"]["reminded"] == 1


def test_the_heartbeat_keeps_a_run_through_a_tool_call_longer_than_the_lease(tmp_path, project, db_url):
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    # the tool outlasts the lease 2.5 times over; the lease leaves the heartbeat 2 s of slack on a
    # loaded machine (a 1 s lease was lost once to a starved heartbeat thread on a shared 2-core box)
    run_id = enqueue(engine, "f", {"sleep": 5.0})
    first = _worker(engine, worker_id="first:1", lease=2.0)
    thread1, _ = _run_in_thread(first)
    _until(lambda: engine.store.get_run(run_id)["status"] == "running", 10, "the first worker's claim")
    second = _worker(engine, worker_id="second:2", lease=2.0)
    thread2, out2 = _run_in_thread(second)
    _until(lambda: engine.store.get_run(run_id)["status"] == "succeeded", 60, "the run to finish")
    first.stop()
    second.stop()
    thread1.join(10)
    thread2.join(10)
    row = engine.store.get_run(run_id)
    assert row["fence"] == 1 and row["owner"] == "first:1"  # never taken over
    assert _ledger(tmp_path, "calls") == [f"{run_id}-one", f"{run_id}-two"]  # each tool called once
    assert out2["stats"]["claimed"] == 0


def test_child_runs_are_queued_for_any_worker_and_leased_and_fenced(tmp_path, project, db_url):
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    run_id = enqueue(engine, "fanned", {"sleep": 0.4})
    workers = [_worker(engine, concurrency=1, worker_id=name) for name in ("w1", "w2")]
    _with_workers(workers, lambda: engine.store.get_run(run_id)["status"] == "succeeded", 60, "the parent to finish")
    children = engine.store.list_runs(parent_id=run_id, limit=0)
    assert len(children) == 2 and {c["status"] for c in children} == {"succeeded"}
    # one thread each: the parent parked instead of holding it, and the two children ran side by side
    assert {c["owner"] for c in children} == {"w1", "w2"}
    for child in children:
        assert child["fence"] >= 1 and child["lease_until"] is None
        assert None not in {e["fence"] for e in engine.store.events(child["id"])[1:]}  # all but the queued start
    parent = engine.store.get_run(run_id)
    assert parent["output"] is not None and len(_ledger(tmp_path)) == 4
    kinds = [e["type"] for e in engine.store.events(run_id)]
    assert kinds.count("child_finished") == 2 and "run_paused" in kinds


def test_a_single_worker_thread_runs_a_map_of_many_children_within_max_concurrency(tmp_path, project, db_url):
    import textwrap

    from flowctl.workers.worker import enqueue
    from support.helpers import write_project

    files = dict(FILES)
    files["states/many.yaml"] = textwrap.dedent("""\
        id: many
        type: map
        items: input.items
        flow: f
        item_input: {sleep: "`0`"}
        max_concurrency: 2
        tolerated_failures: {count: 0}
        """)
    files["transitions/mapped.yaml"] = ("flow: mapped\nstart: many\ntransitions:\n"
                                        "  - {from: many, to: done, set: {outs: response}}\n")
    root = write_project(tmp_path / "proj2", files)
    engine = _engine(root, db_url)
    run_id = enqueue(engine, "mapped", {"items": list(range(5))})
    _with_workers([_worker(engine, concurrency=1)], lambda: engine.store.get_run(run_id)["status"] == "succeeded",
                  90, "the map to finish")
    children = engine.store.list_runs(parent_id=run_id, limit=0)
    assert len(children) == 5 and {c["status"] for c in children} == {"succeeded"}
    # never more than max_concurrency children queued or running at once: each child was queued
    # (its run_started) only after all but one of the previously queued had finished
    starts = sorted((engine.store.events(c["id"])[0]["ts"], c["id"]) for c in children)
    ends = {c["id"]: engine.store.events(c["id"])[-1]["ts"] for c in children}
    for i, (started, _) in enumerate(starts):
        still_open = [cid for ts, cid in starts[:i] if ends[cid] > started]
        assert len(still_open) < 2, (i, still_open)
    assert len(engine.store.get_run(run_id)["output"]["outs"]) == 5  # one output per item, in item order


# ------------------------------------------------------------------------------------------ processes
def _spawn_worker(root, db, env, log_path, *args):
    log = open(log_path, "w")
    proc = subprocess.Popen([FLOWCTL_EXE, "worker", "--db", db, "--log-format", "json", *args], cwd=root, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


def _log(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith("{")]


def test_sigterm_finishes_the_step_releases_the_run_and_another_worker_continues(tmp_path, project, db_url):
    from flowctl.store.sql import open_store
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    gate = tmp_path / "gate"
    run_id = enqueue(engine, "f", {"gate": str(gate)})
    env = _env(tmp_path)
    proc = _spawn_worker(project, db_url, env, tmp_path / "a.log", "--lease", "30s")
    try:
        _until(lambda: len(_ledger(tmp_path, "calls")) == 1, 60, "the first tool call")
        proc.send_signal(signal.SIGTERM)
        _until(lambda: "worker_stopping" in (tmp_path / "a.log").read_text(), 60, "the worker to see SIGTERM")
        gate.touch()  # only now does step one's call return
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    store = open_store(db_url)
    row = store.get_run(run_id)
    assert row["status"] == "running" and row["lease_until"] <= store.now()  # released: claimable at once
    assert _ledger(tmp_path) == [f"{run_id}-one"]  # step one finished, step two never started
    events = [e["event"] for e in _log(tmp_path / "a.log")]
    assert events[-3:] == ["worker_stopping", "finished", "worker_stopped"]
    again = _flowctl(["worker", "--db", db_url, "--max-runs", "1", "--log-format", "json"], project, env)
    assert again.returncode == 0, again.stdout
    row = store.get_run(run_id)
    assert (row["status"], row["fence"]) == ("succeeded", 2)
    assert _ledger(tmp_path) == [f"{run_id}-one", f"{run_id}-two"]
    resumed = [e for e in store.events(run_id) if e["type"] == "run_resumed"]
    assert resumed[-1]["data"]["reason"] == "orphaned" and resumed[-1]["data"]["previous_owner"].endswith(f":{proc.pid}")


def test_a_killed_workers_parent_and_child_runs_are_taken_over(tmp_path, project, db_url):
    from flowctl.store.audit import verify_chain
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    gate = tmp_path / "gate"
    run_id = enqueue(engine, "fanned", {"gate": str(gate)})
    env = _env(tmp_path)
    first = _spawn_worker(project, db_url, env, tmp_path / "a.log", "--lease", "2s")
    try:
        _until(lambda: len(_ledger(tmp_path, "calls")) >= 2, 60, "both children inside a tool call")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    gate.touch()  # the calls the dead worker was in never return; the ones after it do at once
    store = engine.store
    children = store.list_runs(parent_id=run_id, limit=0)
    assert len(children) == 2 and {c["status"] for c in children} == {"running"}  # left leased by the dead
    second = _spawn_worker(project, db_url, env, tmp_path / "b.log", "--lease", "2s", "--poll", "200ms")
    try:
        _until(lambda: store.get_run(run_id)["status"] == "succeeded", 90, "the parent to finish")
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    children = store.list_runs(parent_id=run_id, limit=0)
    assert {c["status"] for c in children} == {"succeeded"}
    keys = _ledger(tmp_path)
    assert sorted(keys) == sorted(f"{c['id']}-{leg}" for c in children for leg in ("one", "two"))  # each once
    for rid in [run_id] + [c["id"] for c in children]:
        row = store.get_run(rid)
        assert row["fence"] >= 2 and verify_chain(store.events(rid), row["last_seq"], row["last_hash"]) == []


def test_several_worker_processes_share_one_sqlite_file(tmp_path, project):
    from flowctl.store.audit import verify_chain
    from flowctl.workers.worker import enqueue

    db = f"sqlite:///{tmp_path}/shared.db"
    engine = _engine(project, db)
    runs = [enqueue(engine, "f", {"sleep": 0.2}) for _ in range(30)]
    env = _env(tmp_path)
    procs = [_spawn_worker(project, db, env, tmp_path / f"w{i}.log", "--concurrency", "2", "--poll", "200ms")
             for i in range(3)]
    try:
        store = engine.store
        _until(lambda: all(store.get_run(r)["status"] == "succeeded" for r in runs), 120, "all runs")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=30) for proc in procs]
    assert codes == [0, 0, 0]
    assert sorted(_ledger(tmp_path)) == sorted(f"{r}-{leg}" for r in runs for leg in ("one", "two"))
    assert len(_ledger(tmp_path, "calls")) == 60  # no step ran twice
    claimed_by = {json.loads(line)["pid"] for i in range(3) for line in (tmp_path / f"w{i}.log").read_text().splitlines()
                  if '"claimed"' in line}
    assert len(claimed_by) >= 2  # the work really was shared
    for r in runs:
        row = store.get_run(r)
        assert row["fence"] == 1 and verify_chain(store.events(r), row["last_seq"], row["last_hash"]) == []


def test_a_flow_limit_holds_across_worker_processes(tmp_path, project, db_url):
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    runs = [enqueue(engine, "f", {"sleep": 0.3}) for _ in range(8)]
    env = _env(tmp_path)
    procs = [_spawn_worker(project, db_url, env, tmp_path / f"w{i}.log", "--concurrency", "3", "--poll", "100ms",
                           "--limit", "flow:f=2") for i in range(3)]
    try:
        _until(lambda: all(engine.store.get_run(r)["status"] == "succeeded" for r in runs), 120, "all runs")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=30) for proc in procs]
    assert codes == [0, 0, 0]
    conn = sqlite3.connect(tmp_path / "ledger.db")
    spans = conn.execute("SELECT t0, t1 FROM calls").fetchall()
    assert len(spans) == 16
    edges = sorted([(t0, 1) for t0, _ in spans] + [(t1, -1) for _, t1 in spans])
    running, peak = 0, 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert peak <= 2  # never more than two runs of f at once, whichever worker held them
    claimed_by = {json.loads(line)["pid"] for i in range(3) for line in (tmp_path / f"w{i}.log").read_text().splitlines()
                  if '"claimed"' in line}
    assert engine.store.limits() == {("flow", "f"): 2} and len(claimed_by) >= 1


def test_workers_runs_resume_and_recover_see_a_held_run(tmp_path, project, db_url):
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    gate = tmp_path / "gate"
    run_id = enqueue(engine, "f", {"gate": str(gate)})  # held inside step one until the gate opens
    env = _env(tmp_path)
    proc = _spawn_worker(project, db_url, env, tmp_path / "w.log", "--queues", "default,other")
    try:
        _until(lambda: len(_ledger(tmp_path, "calls")) == 1, 60, "the worker to hold the run")
        listed = json.loads(_flowctl(["workers", "--db", db_url, "--format", "json"], project, env).stdout)
        (w,) = listed["workers"]
        assert w["id"].endswith(f":{proc.pid}") and w["live"] and w["queues"] == ["default", "other"]
        assert [r["id"] for r in w["runs"]] == [run_id]
        text = _flowctl(["workers", "--db", db_url], project, env).stdout
        assert run_id in text and "1/4" in text
        runs = _flowctl(["runs", "--db", db_url], project, env).stdout
        line = next(x for x in runs.splitlines() if run_id in x)
        assert w["id"] in line and "running" in line and re.search(r" \d+s ", line)  # owner, seconds of lease left
        resumed = _flowctl(["resume", run_id, "--db", db_url], project, env)
        assert resumed.returncode == 1 and "leased by worker" in resumed.stderr
        recovered = _flowctl(["recover", "--db", db_url], project, env)
        assert recovered.returncode == 0 and "nothing to recover" in recovered.stdout
        # ... and it says which run is held, by whom, until when (new-user finding: after a kill -9 of
        # the worker, the run left under its lease was not mentioned)
        assert f"{run_id} " in recovered.stdout and f"leased by {w['id']} for" in recovered.stdout
    finally:
        gate.touch()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    gone = json.loads(_flowctl(["workers", "--db", db_url, "--format", "json"], project, env).stdout)
    assert gone["workers"] == []
    every = json.loads(_flowctl(["workers", "--db", db_url, "--all", "--format", "json"], project, env).stdout)
    assert [w["status"] for w in every["workers"]] == ["stopped"]


# ------------------------------------------------------------------------------------------ upgrade
V1_DUMP = Path(__file__).resolve().parents[1] / "data" / "store_v1.sql"
V1_RUNS = {"01a22a5c115d33678038eb17": "succeeded", "01a22a5c173b3d8cc896f8b8": "waiting"}
V1_PROJECT = {
    "contracts/echo.v1.0.0.yaml": "id: echo\nversion: 1.0.0\nentrypoint: tk:echo\n",
    "tools/tk.py": "def echo(input, call):\n    return {'echo': input}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
}


def _load_v1(db_url):
    load_sql_dump(V1_DUMP, db_url)


def test_a_version_1_store_upgrades_in_place_and_its_runs_go_on(tmp_path, db_url, monkeypatch):
    from flowctl.store.audit import verify_chain
    from flowctl.store.sql import SCHEMA_VERSION, open_store

    assert SCHEMA_VERSION == 12  # store schema 8: events indexed by time, the pruned ranges; 9: run summaries; 10: pause requests; 11: the ledger of runs; 12: the summaries' figures
    _load_v1(db_url)
    store = open_store(db_url)  # upgrades
    for run_id, status in V1_RUNS.items():
        row = store.get_run(run_id)
        assert (row["status"], row["queue"], row["priority"], row["fence"], row["lease_until"]) == \
            (status, "default", 0, 0, None)
        assert row["cancel_requested"] is None and row["pause_requested"] is None  # versions 3 and 8
        assert bool(row["seal"]) == (status not in ("succeeded", "failed", "cancelled"))  # version 4: live runs sealed
        events = store.events(run_id)
        assert verify_chain(events, row["last_seq"], row["last_hash"]) == []
        assert {e["fence"] for e in events} == {None}
    with store.engine.connect() as conn:
        version = conn.exec_driver_sql("SELECT value FROM flowctl_meta WHERE key = 'schema_version'").scalar()
    assert version == "12"
    open_store(db_url).close()  # a second open finds it current
    # the waiting run of the old store goes on under the new code, by a worker, from its checkpoint
    root = write_project(tmp_path / "v1proj", V1_PROJECT)
    import flowctl
    from flowctl.engine.engine import Engine

    waiting = "01a22a5c173b3d8cc896f8b8"
    row = store.get_run(waiting)  # its hour is up (as if an hour passed)
    row["cursor"]["pending"]["due"] = 0
    from flowctl.store.audit import encode_data, row_identity, run_seal

    resealed = run_seal(waiting, row["last_seq"], row["last_hash"], row["status"], row["error"], encode_data(row["cursor"]),
                        row_identity(row))
    store.commit(waiting, row["last_seq"], {"cursor": row["cursor"], "available_at": 0, "seal": resealed})
    engine = Engine(flowctl.load_project(root), store)
    worker = _worker(engine, max_runs=1)
    thread, _ = _run_in_thread(worker)
    thread.join(30)
    row = store.get_run(waiting)
    assert row["status"] == "succeeded" and row["fence"] == 1
    assert verify_chain(store.events(waiting), row["last_seq"], row["last_hash"]) == []
    assert [e["type"] for e in store.events(waiting)][-3:] == ["transition_taken", "state_entered", "run_succeeded"]


def test_a_version_2_store_gains_cancel_requests_in_place(tmp_path, project, db_url):
    from flowctl.store.sql import open_store
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    run_id = enqueue(engine, "f", {"sleep": 0})
    with engine.store.engine.begin() as conn:  # back to what a version-2 flowctl wrote
        conn.exec_driver_sql("ALTER TABLE flowctl_runs DROP COLUMN cancel_requested")
        conn.exec_driver_sql("ALTER TABLE flowctl_runs DROP COLUMN seal")  # version 4's
        conn.exec_driver_sql("UPDATE flowctl_meta SET value = '2' WHERE key = 'schema_version'")
    engine.store.close()
    store = open_store(db_url)
    assert store.get_run(run_id)["cancel_requested"] is None and store.get_run(run_id)["status"] == "queued"
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT value FROM flowctl_meta WHERE key = 'schema_version'").scalar() == "12"
    store.close()


def test_cancel_of_a_run_a_worker_holds_is_done_by_that_worker_at_its_next_step(tmp_path, project, db_url):
    from click.testing import CliRunner

    from flowctl.cli.main import main
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    gate = tmp_path / "gate"
    run_id = enqueue(engine, "f", {"gate": str(gate)})
    worker = _worker(engine, lease=30.0)  # the lease heartbeat comes every 10 s; cancel requests are polled every 1 s
    assert worker.heartbeat_every == 10.0 and worker.cancel_poll_every == 1.0
    thread, _ = _run_in_thread(worker)
    try:
        _until(lambda: len(_ledger(tmp_path, "calls")) == 1, 60, "the first tool call")
        out = CliRunner().invoke(main, ["cancel", run_id, "--db", db_url, "--root", str(project), "--by", "ops"])
        assert out.exit_code == 3, out.output
        assert "cancel requested" in out.output and f"flowctl trace {run_id}" in out.output
        _until(lambda: run_id in worker.cancel_wanted, 5, "the cancel poll to see the request (well before a heartbeat)")
        gate.touch()  # step one's call returns only now
        _until(lambda: engine.store.get_run(run_id)["status"] == "cancelled", 60, "the worker to cancel the run")
    finally:
        worker.stop()
        thread.join(30)
    row = engine.store.get_run(run_id)
    assert row["cancel_requested"]["by"] == "ops" and row["lease_until"] is None
    types = [e["type"] for e in engine.store.events(run_id)]
    # step one finished (never cut inside its side effect), then was undone; step two never ran
    assert types.count("tool_succeeded") == 1 and "run_cancelled" in types and "compensation_succeeded" in types
    assert _ledger(tmp_path, "calls") == [f"{run_id}-one", f"undo:{run_id}-one"] and _ledger(tmp_path) == []  # undone


def test_pause_of_a_run_a_worker_holds_stops_it_at_its_next_checkpoint_and_resume_goes_on(tmp_path, project, db_url):
    from click.testing import CliRunner

    from flowctl.cli.main import main
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    gate = tmp_path / "gate"
    run_id = enqueue(engine, "f", {"gate": str(gate)})
    worker = _worker(engine, lease=30.0)
    thread, _ = _run_in_thread(worker)
    try:
        _until(lambda: len(_ledger(tmp_path, "calls")) == 1, 60, "the first tool call")
        out = CliRunner().invoke(main, ["pause", run_id, "--reason", "check the ledger", "--db", db_url,
                                        "--root", str(project), "--by", "ops"])
        assert out.exit_code == 0, out.output
        assert "pauses at its next checkpoint" in out.output
        gate.touch()  # step one's call returns only now: the commit after it hands the request back
        _until(lambda: engine.store.get_run(run_id)["status"] == "paused", 60, "the worker to pause the run")
    finally:
        worker.stop()
        thread.join(30)
    row = engine.store.get_run(run_id)
    assert row["lease_until"] is None and row["pause_requested"] is None  # released; the request honoured
    assert row["cursor"]["pending"]["by"] == "ops"
    types = [e["type"] for e in engine.store.events(run_id)]
    assert types.count("tool_succeeded") == 1 and types[-1] == "run_paused"  # step one finished, step two not begun
    again = CliRunner().invoke(main, ["pause", run_id, "--reason", "again", "--db", db_url, "--root", str(project)])
    assert again.exit_code == 2 and "already paused (by ops: check the ledger)" in again.output
    out = CliRunner().invoke(main, ["resume", run_id, "--db", db_url, "--root", str(project), "--by", "ann", "-q"])
    assert out.exit_code == 0, out.output
    assert engine.store.get_run(run_id)["status"] == "succeeded"
    assert _ledger(tmp_path, "calls")[0] == f"{run_id}-one" and len(_ledger(tmp_path, "calls")) == 2  # each once


def _fan_project(tmp_path, monkeypatch):
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "ledger.db"))
    files = dict(FILES)
    files["states/hold.yaml"] = "id: hold\ntype: review\ndecisions: [approve]\ntimeout: 1h\non_timeout: {goto: done}\n"
    files["transitions/holder.yaml"] = "flow: holder\nstart: hold\ntransitions:\n  - {from: hold, to: done}\n"
    files["states/fan2.yaml"] = "id: fan2\ntype: parallel\nbranches: [holder, f]\ninput: {sleep: input.sleep}\n"
    files["transitions/fanned2.yaml"] = "flow: fanned2\nstart: fan2\ntransitions:\n  - {from: fan2, to: done}\n"
    files["states/many2.yaml"] = ("id: many2\ntype: map\nitems: input.items\nflow: f\nitem_input: {sleep: \"`0`\"}\n"
                                  "max_concurrency: 2\n")
    files["transitions/mapped2.yaml"] = "flow: mapped2\nstart: many2\ntransitions:\n  - {from: many2, to: done}\n"
    return write_project(tmp_path / "proj3", files)


def test_a_child_resumed_from_the_cli_hands_its_queued_parent_back_to_the_workers(tmp_path, db_url, monkeypatch):
    from flowctl.engine import runner
    from flowctl.workers.worker import enqueue

    root = _fan_project(tmp_path, monkeypatch)
    engine = _engine(root, db_url)  # as `flowctl resume` has it: no workers in this process
    run_id = enqueue(engine, "fanned2", {"sleep": 0})
    worker = _worker(_engine(root, db_url), concurrency=2)
    thread, _ = _run_in_thread(worker)
    try:
        def paused_child():
            kids = engine.store.list_runs(parent_id=run_id, limit=0)
            return next((k for k in kids if k["status"] == "paused"), None)

        _until(lambda: paused_child() is not None and engine.store.get_run(run_id)["status"] == "waiting", 60,
               "the review child to pause and the parent to wait")
        child = paused_child()
        token = runner.reissue_token(engine, child)
        assert engine.resume(child["id"], token=token, decision="approve").status == "succeeded"
        _until(lambda: engine.store.get_run(run_id)["status"] == "succeeded", 60, "a worker to finish the parent")
    finally:
        worker.stop()
        thread.join(30)
    parent = engine.store.get_run(run_id)
    assert parent["lease_until"] is None and parent["owner"] == worker.id  # finished by the worker, not the CLI


def test_recover_from_the_cli_re_checks_a_queued_fan_out_without_running_its_children(tmp_path, db_url, monkeypatch):
    from flowctl.workers.worker import enqueue

    root = _fan_project(tmp_path, monkeypatch)
    engine = _engine(root, db_url)
    run_id = enqueue(engine, "mapped2", {"items": [1, 2, 3, 4]})
    first = _worker(_engine(root, db_url), max_runs=1)  # takes the parent only: queues 2 children, parks
    thread, _ = _run_in_thread(first)
    thread.join(30)
    kids = engine.store.list_runs(parent_id=run_id, limit=0)
    assert [k["status"] for k in kids] == ["queued", "queued"]
    engine.recover()  # `flowctl recover` while no worker runs: re-checks, queues nothing more, runs nothing
    kids = engine.store.list_runs(parent_id=run_id, limit=0)
    assert [k["status"] for k in kids] == ["queued", "queued"]
    assert engine.store.get_run(run_id)["status"] == "waiting"
    _with_workers([_worker(_engine(root, db_url), concurrency=2)],
                  lambda: engine.store.get_run(run_id)["status"] == "succeeded", 60, "the workers to finish the map")
    assert len(engine.store.list_runs(parent_id=run_id, limit=0)) == 4


def _held_in_step_one(tmp_path, project, db_url, **worker_kw):
    """``(engine, gate, run id, worker, thread)``: a worker on a thread holds a run of ``f`` whose
    first call is blocked until the test creates ``gate``."""
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    gate = tmp_path / "gate"
    run_id = enqueue(engine, "f", {"gate": str(gate)})
    worker = _worker(engine, **worker_kw)
    thread, _ = _run_in_thread(worker)
    _until(lambda: len(_ledger(tmp_path, "calls")) == 1, 60, "the first tool call")
    return engine, gate, run_id, worker, thread


def test_a_run_that_ends_before_its_cancel_request_is_seen_says_so_in_its_log(tmp_path, project, db_url):
    """Interleaving injected: no poll runs (cancel_poll and heartbeat far away) while the request is
    made during the last call; the run ends succeeded. The worker then records that in the run's
    chained log and clears the request, so the finished row does not look like an honoured cancel."""
    from flowctl.store.audit import seal_problem, verify_run
    engine, gate, run_id, worker, thread = _held_in_step_one(tmp_path, project, db_url, lease=600.0,
                                                            heartbeat=300.0, cancel_poll=300.0)
    try:
        assert engine.cancel(run_id, by="ops").cancel_requested
        gate.touch()
        _until(lambda: any(e["type"] == "cancel_request_unseen" for e in engine.store.events(run_id)), 60,
               "the worker to note the unseen request")
    finally:
        worker.stop()
        thread.join(30)
    row = engine.store.get_run(run_id)
    assert row["status"] == "succeeded" and row["cancel_requested"] is None
    events = engine.store.events(run_id)
    note = events[-1]
    assert note["type"] == "cancel_request_unseen" and note["data"]["by"] == "ops"
    assert note["data"]["outcome"] == "succeeded" and "nothing was cancelled" in note["data"]["note"]
    assert verify_run(row, events) == [] and seal_problem(row) is None  # the record stays intact
    from flowctl.store import ledger
    # ... the store-wide ledger too: it records the run's head after the note (new-user finding:
    # `audit verify --all` reported the note's run as PROBLEMS on a store nobody had touched)
    assert ledger.verify(engine.store).problems == []
    assert _ledger(tmp_path) == [f"{run_id}-one", f"{run_id}-two"]  # it ran to the end; nothing was undone
