"""flowctl.store.hot: the per-step commit on a held connection keeps the store's promises —
all of a step or none of it, a stale writer writes nothing, a database failure is a StoreError
(never a step error the flow's handlers would swallow), and the audit chain verifies."""
from __future__ import annotations

import sqlite3

import pytest

import flowctl

from support.enginekit import Harness, build, contract, sqlite_store, task
from flowctl.store.audit import verify_run
from flowctl.errors import StoreError
from flowctl.store.sql import MemoryStore, open_store
from support.pg import pg_url  # noqa: F401 - fixture

TOOLS = """
SHARED = {"n": 0}
NESTED = {"items": [0]}

def bump(input, call):
    SHARED["n"] += 1          # returns the same dict every time and keeps changing it
    return SHARED

def grow(input, call):
    NESTED["items"].append(len(NESTED["items"]))
    return NESTED
"""

LOOP = {
    **contract("bump", "bump"), **contract("grow", "grow"),
    **task("a", "bump@1.0.0"), **task("b", "grow@1.0.0"),
    "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n"
                          "  - {from: a, to: b}\n"
                          "  - {from: b, to: a, when: 'visits.b < `3`'}\n"
                          "  - {from: b, to: done}\n",
}


def _outputs(store, run_id, tool):
    return [e["data"]["output"] for e in store.events(run_id)
            if e["type"] == "tool_succeeded" and e["data"]["tool"].startswith(tool)]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_events_keep_each_output_as_it_was_returned(tmp_path, kind):
    store = MemoryStore() if kind == "memory" else sqlite_store(tmp_path)
    result = Harness(build(tmp_path, LOOP, TOOLS), store=store).run()
    assert result.status == "succeeded", result.error
    assert _outputs(store, result.run_id, "bump") == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert _outputs(store, result.run_id, "grow") == [{"items": [0, 1]}, {"items": [0, 1, 2]}, {"items": [0, 1, 2, 3]}]
    row = store.get_run(result.run_id)
    assert verify_run(row, store.events(result.run_id)) == []


def test_memory_store_seals_the_chain_when_read_and_detects_edits(tmp_path):
    store = MemoryStore()
    result = Harness(build(tmp_path, LOOP, TOOLS), store=store).run()
    events = store.events(result.run_id)
    assert all(len(e["hash"]) == 64 and e["data_json"] for e in events)
    assert store.get_run(result.run_id)["last_hash"] == events[-1]["hash"]
    events[2]["data_json"] = events[2]["data_json"].replace("1", "7")
    assert any("modified" in p for p in verify_run(store.get_run(result.run_id), events))


def _refuse_events_sqlite(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TRIGGER no_more BEFORE INSERT ON flowctl_events "
               "WHEN instr(NEW.data, '\"transition_taken\"') > 0 BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
    db.commit()
    db.close()


def test_a_failing_sqlite_commit_is_a_store_error_and_writes_nothing(tmp_path):
    store = sqlite_store(tmp_path)
    root = build(tmp_path, LOOP, TOOLS)
    _refuse_events_sqlite(tmp_path / "flowctl.db")
    with pytest.raises(StoreError, match="cannot commit the step .*disk says no"):
        Harness(root, store=store).run()
    (row,) = store.list_runs()
    assert row["status"] == "running" and row["last_seq"] == 1  # run_started only: the step left no trace
    assert [e["type"] for e in store.events(row["id"])] == ["run_started"]
    assert verify_run(row, store.events(row["id"])) == []


@pytest.mark.postgres
def test_a_failing_postgresql_commit_is_a_store_error_and_writes_nothing(tmp_path, pg_url):  # noqa: F811
    import psycopg

    store = open_store(pg_url)
    root = build(tmp_path, LOOP, TOOLS)
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute("CREATE FUNCTION no_more() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                   "IF position('\"transition_taken\"' in NEW.data) > 0 THEN RAISE EXCEPTION 'disk says no'; END IF; RETURN NEW; END $$")
        db.execute("CREATE TRIGGER no_more BEFORE INSERT ON flowctl_events FOR EACH ROW EXECUTE FUNCTION no_more()")
    with pytest.raises(StoreError, match="disk says no"):
        Harness(root, store=store).run()
    (row,) = store.list_runs()
    assert row["status"] == "running" and row["last_seq"] == 1
    assert [e["type"] for e in store.events(row["id"])] == ["run_started"]  # the run-row update was undone too
    store.close()


@pytest.mark.postgres
def test_postgresql_runs_commit_each_step_in_one_statement_and_verify(tmp_path, pg_url):  # noqa: F811
    store = open_store(pg_url)
    result = Harness(build(tmp_path, LOOP, TOOLS), store=store).run()
    assert result.status == "succeeded"
    assert _outputs(store, result.run_id, "bump") == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert verify_run(store.get_run(result.run_id), store.events(result.run_id)) == []
    stale = store.get_run(result.run_id)
    from flowctl.errors import RunConflict

    with pytest.raises(RunConflict):
        store.commit(result.run_id, stale["last_seq"] - 1, {"status": "failed"}, [])
    assert store.get_run(result.run_id)["status"] == "succeeded"
    store.close()


def test_flowctl_run_of_a_long_loop_shows_the_path_tail_and_says_where_the_rest_is(tmp_path):
    from click.testing import CliRunner

    from flowctl.cli.main import main

    root = build(tmp_path, {
        **contract("bump", "bump"), **task("a", "bump@1.0.0"),
        "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: a, when: 'visits.a < `40`'}\n"
                              "  - {from: a, to: done}\n"}, TOOLS)
    out = CliRunner().invoke(main, ["run", "f", "--db", f"sqlite:///{tmp_path}/s.db", "--root", str(root)])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.startswith("path: "))
    db = f"sqlite:///{tmp_path}/s.db"
    assert line.startswith("path: … a ×31 → done") and f"(9 earlier states: flowctl trace " in line
    assert line.endswith(f" --db {db})")  # the suggested command works as printed
    out = CliRunner().invoke(main, ["run", "f", "--db", "memory", "--root", str(root), "-q"])
    assert "--db memory keeps no log to trace them" in out.output


def _waiting_run(tmp_path, store):
    files = {"states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
             "transitions/f.yaml": "flow: f\nstart: w\ntransitions:\n  - {from: w, to: done}\n"}
    return Harness(build(tmp_path, files, TOOLS, name="w"), store=store).run().run_id


def _probe_events(first_seq, n):
    return [{"seq": first_seq + i, "ts": 1.0, "type": "probe", "state": None, "attempt": None, "data": {"i": i},
             "data_json": '{"i":%d}' % i, "prev_hash": "p", "hash": "h"} for i in range(n)]


def test_a_takeover_commit_clears_an_expired_lease_so_no_worker_claims_the_run_meanwhile(tmp_path):
    store = sqlite_store(tmp_path)
    run_id = _waiting_run(tmp_path, store)
    db = sqlite3.connect(tmp_path / "flowctl.db")
    db.execute("UPDATE flowctl_runs SET status = 'running', lease_until = 1.0 WHERE id = ?", (run_id,))  # long expired
    db.commit()
    seq = store.get_run(run_id)["last_seq"]
    store.commit(run_id, seq, {"steps": 1, "last_seq": seq + 1}, _probe_events(seq + 1, 1))  # e.g. cancel's first undo
    assert store.get_run(run_id)["lease_until"] is None
    assert store.claim("w1", 5, 30.0) == []  # nothing for a worker to take over any more
    db.execute("UPDATE flowctl_runs SET lease_until = 1.0 WHERE id = ?", (run_id,))
    db.commit()
    store.commit(run_id, seq + 1, {"steps": 2, "last_seq": seq + 2}, _probe_events(seq + 2, 1), unleased=True)
    assert store.get_run(run_id)["lease_until"] == 1.0  # the writer's later commits leave the column alone


def test_a_failing_step_record_write_is_a_store_error_not_a_step_error(tmp_path):
    from support.enginekit import allow_all, effect_contract

    tools = TOOLS + "\ndef pay(input, call):\n    return {'ok': True}\n\ndef verify_pay(input, output, call):\n" \
                    "    return True\n\ndef undo_pay(input, output, call):\n    return None\n"
    root = build(tmp_path, {**effect_contract("pay", "pay"), **allow_all("pay"), **task("a", "pay@1.0.0"),
                            "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: done}\n"}, tools)
    store = sqlite_store(tmp_path)
    db = sqlite3.connect(tmp_path / "flowctl.db")
    db.execute("CREATE TRIGGER full BEFORE INSERT ON flowctl_steps BEGIN SELECT RAISE(ABORT, 'disk is full'); END")
    db.commit()
    with pytest.raises(StoreError, match="disk is full"):
        Harness(root, store=store).run()
    (row,) = store.list_runs()
    assert row["status"] == "running" and row["error"] is None  # resumable, not failed by its own layers


@pytest.mark.postgres
def test_postgresql_takes_a_commit_of_thousands_of_events(tmp_path, pg_url):  # noqa: F811
    store = open_store(pg_url)
    run_id = _waiting_run(tmp_path, store)
    seq = store.get_run(run_id)["last_seq"]
    store.commit(run_id, seq, {"steps": 1, "last_seq": seq + 7000}, _probe_events(seq + 1, 7000))  # > 65,535 parameters
    assert store.get_run(run_id)["last_seq"] == seq + 7000 and len(store.events(run_id)) == seq + 7000
    store.close()


@pytest.mark.postgres
def test_postgresql_connections_stay_bounded_when_many_threads_commit(tmp_path, pg_url):  # noqa: F811
    import threading

    import psycopg

    from flowctl.store.hot import MAX_IDLE

    store = open_store(pg_url)
    run_ids = [_waiting_run(tmp_path / str(i), store) for i in range(24)]

    def step(run_id):
        seq = store.get_run(run_id)["last_seq"]
        store.commit(run_id, seq, {"steps": 1, "last_seq": seq + 2}, _probe_events(seq + 1, 2))

    threads = [threading.Thread(target=step, args=(r,)) for r in run_ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    name = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        held = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()[0] - 1
    assert held <= MAX_IDLE + 5 + 10  # idle hot-path connections + SQLAlchemy's pool (5, overflow 10)
    assert len(store.hot._idle) <= MAX_IDLE
    store.close()


SURROGATES = """
def lone(input, call):
    return {"a": "\\ud800"}

def lone_text(input, call):
    return '{"a": "\\\\ud800"}'

def lone_nested(input, call):
    return {"a": ["\\udfff"]}
"""


@pytest.mark.parametrize("fn", ["lone", "lone_text", "lone_nested"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_tool_output_unicode_cannot_hold_fails_the_step_and_the_run_stays_readable(tmp_path, kind, fn):
    store = MemoryStore() if kind == "memory" else sqlite_store(tmp_path)
    root = build(tmp_path, {**contract("t", fn), **task("a", "t@1.0.0"),
                            "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: done}\n"},
                 SURROGATES)
    result = Harness(root, store=store).run()
    assert result.status == "failed" and result.error["code"] == "SCHEMA_MISMATCH"
    assert verify_run(store.get_run(result.run_id), store.events(result.run_id)) == []


def test_a_run_input_unicode_cannot_hold_is_refused_up_front(tmp_path):
    from flowctl.errors import UsageError

    h = Harness(build(tmp_path, LOOP, TOOLS))
    with pytest.raises(UsageError, match="run input at /x: the text holds a lone surrogate"):
        h.run(input={"x": "\ud800"})
    for bad in (float("nan"), float("inf")):  # what JSON cannot hold, through the library as through the CLI
        with pytest.raises(UsageError, match="run input at /n/0: "):
            h.run(input={"n": [bad]})
    assert h.store.list_runs(limit=0) == []


@pytest.mark.parametrize("run_id", ["x" * 41, "has space", "ünï", ""])
def test_a_run_id_the_store_cannot_hold_or_find_is_refused(tmp_path, run_id):
    from flowctl.errors import UsageError

    with pytest.raises(UsageError, match="cannot be used"):
        Harness(build(tmp_path, LOOP, TOOLS)).run(run_id=run_id)


# ------------------------------------------------------------------ group commit (SQLite)
def _fresh_runs(store, n):
    from flowctl.store.audit import seal_commit

    ids = []
    for i in range(n):
        first = [{"seq": 1, "ts": 1.0, "type": "run_started", "state": None, "attempt": None, "data": {"flow": "f", "input": {}}}]
        row = {"id": f"g{i}", "flow": "f", "flow_version": "1", "digest": "d" * 64, "parent_id": None, "status": "running",
               "input": {}, "params": {}, "output": None, "error": None, "cursor": {"state": "a"}, "created_at": 1.0,
               "updated_at": 1.0, "available_at": None, "owner": "me", "last_seq": 1, "last_hash": seal_commit(first, ""),
               "steps": 0}
        store.create_run(row, first)
        ids.append(row["id"])
    return ids


def _step(store, run_id, expect_seq=1):
    """One step's commit of ``run_id`` (two events after its run_started), as the engine makes it
    (sealed now; the commit is the callable returned: it reads nothing, so it waits only for the lock)."""
    from flowctl.store.audit import seal_commit

    prev = store.get_run(run_id)["last_hash"]
    events = [{"seq": 2, "ts": 2.0, "type": "state_entered", "state": "a", "attempt": 1, "data": {"step": 1}},
              {"seq": 3, "ts": 2.0, "type": "transition_taken", "state": "a", "attempt": 1, "data": {"to": "b"}}]
    last_hash = seal_commit(events, prev)
    return lambda: store.commit(run_id, expect_seq, {"cursor": {"state": "b"}, "last_seq": 3, "last_hash": last_hash,
                                                     "steps": 1}, events)


def _held_lock(path):
    """Another connection holding SQLite's write lock: the next transaction waits until it is released."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("BEGIN IMMEDIATE")
    return db


def _commit_while_locked(tmp_path, store, calls):
    """Run ``calls`` (callables) in threads: the first starts a transaction and waits on the held
    lock, the others queue behind it; then the lock is released. ``[(result or exception)]`` in order."""
    import threading

    db = _held_lock(tmp_path / "flowctl.db")
    out = [None] * len(calls)

    def run(i):
        try:
            out[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - returned for the test to look at
            out[i] = exc

    threads = [threading.Thread(target=run, args=(0,))]
    threads[0].start()
    for _ in range(2000):  # the first commit is the leader: the queue is empty, it waits in BEGIN IMMEDIATE
        if store.hot._leading:
            break
        threading.Event().wait(0.005)
    for i in range(1, len(calls)):
        threads.append(threading.Thread(target=run, args=(i,)))
        threads[-1].start()
    for _ in range(2000):  # every other commit has queued behind it
        with store.hot._group:
            if len(store.hot._queue) == len(calls) - 1:
                break
        threading.Event().wait(0.005)
    db.execute("ROLLBACK")
    db.close()
    for t in threads:
        t.join(30)
    return out


def test_concurrent_step_commits_share_one_transaction_and_each_is_acknowledged_after_it(tmp_path, monkeypatch):
    from flowctl.store.hot import HotPath

    store = sqlite_store(tmp_path)
    ids = _fresh_runs(store, 6)
    batches = []
    write = HotPath._commit_sqlite
    monkeypatch.setattr(HotPath, "_commit_sqlite", lambda self, batch: (batches.append(len(batch)), write(self, batch))[1])
    out = _commit_while_locked(tmp_path, store, [_step(store, rid) for rid in ids])
    assert out == [None] * 6
    assert batches == [1, 5]  # the leader alone, then the five that queued behind it in one transaction
    for rid in ids:
        row = store.get_run(rid)
        assert row["last_seq"] == 3 and row["cursor"] == {"state": "b"}
        assert verify_run(row, store.events(rid)) == []
    store.close()


def test_in_a_group_a_conflicting_or_failing_commit_is_undone_alone(tmp_path):
    from flowctl.errors import RunConflict

    store = sqlite_store(tmp_path)
    ids = _fresh_runs(store, 4)
    db = sqlite3.connect(tmp_path / "flowctl.db")
    db.execute(f"CREATE TRIGGER no_g2 BEFORE INSERT ON flowctl_events WHEN NEW.run_id = '{ids[2]}' AND NEW.seq > 1 "
               "BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
    db.commit()
    db.close()
    calls = [_step(store, ids[0]), _step(store, ids[1], expect_seq=7),  # stale: another writer won
             _step(store, ids[2]), _step(store, ids[3])]
    out = _commit_while_locked(tmp_path, store, calls)
    assert out[0] is None and out[3] is None
    assert isinstance(out[1], RunConflict)
    assert isinstance(out[2], StoreError) and "disk says no" in str(out[2])
    for rid, seq in zip(ids, (3, 1, 1, 3)):
        row = store.get_run(rid)
        assert row["last_seq"] == seq and len(store.events(rid)) == seq  # undone whole: its run row and its events
        assert verify_run(row, store.events(rid)) == []
    store.close()


def _end(store, run_id):
    """The commit that ends ``run_id`` (after its run_started): its ledger ``end`` row and summary go with it."""
    from flowctl.store.audit import seal_commit

    prev = store.get_run(run_id)["last_hash"]
    events = [{"seq": 2, "ts": 2.0, "type": "tool_succeeded", "state": "a", "attempt": 1,
               "data": {"tool": "t@1", "duration_ms": 1.5}},
              {"seq": 3, "ts": 2.0, "type": "run_succeeded", "state": "a", "attempt": 1, "data": {}}]
    last_hash = seal_commit(events, prev)
    return lambda: store.commit(run_id, 1, {"status": "succeeded", "cursor": {"state": "a"}, "last_seq": 3,
                                            "last_hash": last_hash, "steps": 1}, events)


def _traced(monkeypatch):
    """The statements sent on the per-step commit's connections from now on."""
    from flowctl.store.hot import HotPath

    seen = []
    connect = HotPath._connect

    def traced(self):
        conn = connect(self)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(HotPath, "_connect", traced)
    return seen


def test_a_group_of_run_ends_is_written_in_a_few_statements_and_moves_the_ledger_head_once(tmp_path, monkeypatch):
    from flowctl.store import ledger
    from flowctl.store.history import stats

    store = sqlite_store(tmp_path)
    ids = _fresh_runs(store, 5)
    for conn in store.hot._idle:
        conn.close()
    store.hot._idle.clear()  # the next commits connect again, traced
    seen = _traced(monkeypatch)
    out = _commit_while_locked(tmp_path, store, [_end(store, rid) for rid in ids])
    assert out == [None] * 5
    assert not [s for s in seen if "SAVEPOINT" in s]
    # the leader's transaction, then the four queued behind it: each reads and moves the head once
    assert sum(s.startswith("UPDATE flowctl_ledger_head") for s in seen) == 2
    assert sum(s.startswith("SELECT n, hash FROM flowctl_ledger_head") for s in seen) == 2
    assert not [s for s in seen if s.startswith("SELECT last_seq, last_hash FROM flowctl_runs")]
    # and writes the rows that only add to the store in one statement each: events, ledger rows, summaries
    for table in ("flowctl_events", "flowctl_ledger ", "flowctl_run_summaries"):
        assert sum(s.startswith(f"INSERT INTO {table}") for s in seen) == 2, table
    assert sum(s.startswith("UPDATE flowctl_runs SET") and "RETURNING" in s for s in seen) == 5  # one per run
    report = ledger.verify(store)
    assert report.problems == [] and report.rows == 10  # five starts, five ends, one chain
    for rid in ids:
        assert verify_run(store.get_run(rid), store.events(rid)) == []
    assert stats(store)["tools"]["t@1"]["calls"] == 5
    store.close()


def test_a_failing_commit_in_a_group_of_run_ends_leaves_the_ledger_whole(tmp_path):
    from flowctl.store import ledger

    store = sqlite_store(tmp_path)
    ids = _fresh_runs(store, 4)
    db = sqlite3.connect(tmp_path / "flowctl.db")
    db.execute(f"CREATE TRIGGER no_g2 BEFORE INSERT ON flowctl_run_summaries WHEN NEW.run_id = '{ids[2]}' "
               "BEGIN SELECT RAISE(ABORT, 'disk says no'); END")  # after its ledger row: that is undone too
    db.commit()
    db.close()
    out = _commit_while_locked(tmp_path, store, [_end(store, rid) for rid in ids])
    assert out[0] is None and out[1] is None and out[3] is None
    assert isinstance(out[2], StoreError) and "disk says no" in str(out[2])
    assert [store.get_run(rid)["status"] for rid in ids] == ["succeeded", "succeeded", "running", "succeeded"]
    report = ledger.verify(store)
    assert report.problems == [] and report.rows == 7  # four starts, three ends
    store.close()


def test_runs_driven_by_threads_on_one_store_all_finish_and_verify(tmp_path):
    import threading

    store = sqlite_store(tmp_path)
    root = build(tmp_path, LOOP, TOOLS)
    project = flowctl.load_project(root)
    results = []

    def one():
        results.append(flowctl.Engine(project, store, check=False).run("f", {}))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r.status for r in results] == ["succeeded"] * 6
    for r in results:
        assert verify_run(store.get_run(r.run_id), store.events(r.run_id)) == []
    store.close()


def _many_steps(store, run_id, n):
    """``n`` step commits of ``run_id`` (each with a 2 KB checkpoint), one after another."""
    from flowctl.store.audit import seal_commit

    seq, prev = 1, store.get_run(run_id)["last_hash"]
    for step in range(1, n + 1):
        events = [{"seq": seq + 1, "ts": 2.0, "type": "state_entered", "state": "a", "attempt": 1, "data": {"step": step}}]
        prev = seal_commit(events, prev)
        store.commit(run_id, seq, {"cursor": {"state": "a", "context": {"pad": "x" * 2000, "step": step}},
                                   "last_seq": seq + 1, "last_hash": prev, "steps": step}, events)
        seq += 1


@pytest.mark.parametrize("thread", ["runs", "stalled"])
def test_the_wal_stays_bounded_while_one_process_commits_many_steps(tmp_path, monkeypatch, thread):
    """The per-step commit leaves SQLite's automatic checkpoint to a thread of its own (so no
    commit waits for the syncs); the WAL is still copied into the database as often, and when that
    thread cannot keep up the committing thread checkpoints itself: the WAL file never grows with
    the number of steps (1,500 steps here, about 31 MB unchecked; a few MB checked)."""
    import os

    from flowctl.store.checkpoint import CommitCheckpoints

    if thread == "stalled":
        monkeypatch.setattr(CommitCheckpoints, "_run", lambda self: None)
    store = sqlite_store(tmp_path)
    (rid,) = _fresh_runs(store, 1)
    _many_steps(store, rid, 1500)
    wal = os.path.getsize(tmp_path / "flowctl.db-wal")
    row = store.get_run(rid)
    assert row["last_seq"] == 1501 and verify_run(row, store.events(rid)) == []
    store.close()
    assert wal < 12 * 2 ** 20, f"the WAL grew to {wal / 2 ** 20:.1f} MB"
    db = sqlite3.connect(tmp_path / "flowctl.db")
    assert db.execute("SELECT last_seq FROM flowctl_runs WHERE id = ?", (rid,)).fetchone() == (1501,)
    db.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_step_record_is_written_with_its_step_and_its_outcome_keeps_what_it_does_not_name(tmp_path, kind, request):
    """A side-effecting call's step row: inserted by the commit before the tool (``started``), then
    completed by the commit after it; what the second commit does not name (the start time, the
    input) stays. On SQLite both ride the per-step commit (one upsert, no read of the row)."""
    from flowctl.store.audit import seal_commit
    from support.dbtrace import trace_sqlite

    url = request.getfixturevalue("pg_url") if kind == "postgresql" else f"sqlite:///{tmp_path}/flowctl.db"
    with trace_sqlite() as counts:
        store = open_store(url, create=True)
        (run_id,) = _fresh_runs(store, 1)
        head, seq = store.get_run(run_id)["last_hash"], 1
        started = {"step_no": 1, "attempt": 1, "state": "a", "tool": "pay@1.0.0", "idempotency_key": "k1",
                   "status": "started", "input": {"amount": 5}, "started_at": 5.0}
        finished = {"step_no": 1, "attempt": 1, "state": "a", "status": "succeeded", "output": {"ok": True},
                    "finished_at": 6.0}
        mark = len(counts.log)
        for step in (started, finished):
            events = [{"seq": seq + 1, "ts": 2.0, "type": "tool_invoked", "state": "a", "attempt": 1, "data": {}}]
            head = seal_commit(events, head)
            store.commit(run_id, seq, {"cursor": {"state": "a"}, "last_seq": seq + 1, "last_hash": head, "steps": 1},
                         events, [step])
            seq += 1
        sent = counts.log[mark:]
    (row,) = store.steps(run_id)
    assert {k: row[k] for k in ("status", "input", "output", "started_at", "finished_at", "idempotency_key", "tool")} == {
        "status": "succeeded", "input": {"amount": 5}, "output": {"ok": True}, "started_at": 5.0, "finished_at": 6.0,
        "idempotency_key": "k1", "tool": "pay@1.0.0"}
    assert verify_run(store.get_run(run_id), store.events(run_id)) == []
    if kind == "sqlite":
        assert not [s for s in sent if s.lstrip().upper().startswith("SELECT") and "flowctl_steps" in s], sent
    store.close()




def test_a_cancel_request_an_earlier_end_returned_does_not_answer_for_a_later_end(tmp_path):
    """(breaker finding: a run ended, redriven and ended again in one process took the first end's
    answer — no cancel request — for the second, whose request was then never logged)"""
    from flowctl.store.sql import open_store

    store = open_store(f"sqlite:///{tmp_path}/flowctl.db")
    try:
        run = {"id": "r1", "flow": "f", "flow_version": "1", "digest": "d" * 64, "parent_id": None, "status": "running",
               "input": {}, "params": {}, "output": None, "error": None, "cursor": {"state": "a"}, "created_at": 1.0,
               "updated_at": 1.0, "available_at": None, "owner": "t:1", "last_seq": 0, "last_hash": "", "steps": 0}
        store.create_run(run, [])
        ev = {"seq": 1, "ts": 2.0, "type": "run_failed", "state": "a", "attempt": None, "data": {}, "prev_hash": "", "hash": ""}
        store.commit("r1", 0, {"status": "failed", "last_seq": 1, "last_hash": "", "updated_at": 2.0}, [ev])
        assert store.hot.cancel_at_end("r1") == (True, None)  # the end's own answer, asked once
        store.commit("r1", 1, {"status": "failed", "last_seq": 2, "last_hash": "", "updated_at": 3.0}, [dict(ev, seq=2)])
        store.commit("r1", 2, {"status": "running", "last_seq": 3, "last_hash": "", "updated_at": 4.0},
                     [dict(ev, seq=3, type="run_redriven")])  # written again (redriven): no end answers for it now
        assert store.hot.cancel_at_end("r1") == (False, None)
    finally:
        store.close()
