"""Events across runs (store/query.py, issue 21): exact filters over packed rows, commit order,
the newest N, and the same answers from SQLite, PostgreSQL, the DBAPI reader and the memory store."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build, effect_contract, task

from flowctl.store.query import EventFilter, query_events
from support.stores import pg_url, sql_store, store  # noqa: F401 - fixtures

TOOLS = """
LEDGER = []

def pay(input, call):
    if input.get("amount", 0) < 0:
        raise ValueError("negative")
    LEDGER.append(input.get("amount"))
    return {"ok": True}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    pass

def ship(input, call):
    return {"shipped": True}
"""



def _runs(tmp_path, store):
    """Two flows: ``f`` (pay, then ship) and ``g`` (ship); returns the harness and the run ids."""
    files = {**effect_contract("pay", "pay"), **task("charge", "pay@^1", extra="input: {amount: input.amount}\n"),
             "contracts/ship.v1.0.0.yaml": "id: ship\nversion: 1.0.0\nentrypoint: tk:ship\n",
             **task("send", "ship@^1"),
             "policies/cap.yaml": "policy: cap\napplies_to: [pay]\nallow:\n  - {field: input.amount, range: [0, 100]}\n",
             "transitions/f.yaml": "flow: f\nstart: charge\ntransitions:\n  - {from: charge, to: send}\n"
                                   "  - {from: send, to: done}\n",
             "transitions/g.yaml": "flow: g\nstart: send\ntransitions:\n  - {from: send, to: done}\n"}
    h = Harness(build(tmp_path, files, TOOLS), store=store)
    ids = []
    for flow, amount in (("f", 5), ("g", None), ("f", 500), ("f", 7)):
        ids.append(h.run(flow, {"amount": amount} if amount is not None else {}).run_id)
        h.clock._t += 60
    return h, ids


def test_filters_are_exact_although_a_row_packs_a_whole_commit(tmp_path, store):
    h, ids = _runs(tmp_path, store)
    every = [e for r in ids for e in store.events(r)]
    got = list(query_events(store, EventFilter(type="tool_succeeded", tool="pay")))
    want = [e for e in every if e["type"] == "tool_succeeded" and e["data"]["tool"].startswith("pay@")]
    assert [(e["run_id"], e["seq"]) for e in got] == [(e["run_id"], e["seq"]) for e in want] and len(got) == 2
    assert {e["flow"] for e in got} == {"f"}
    denied = list(query_events(store, EventFilter(type="policy_decided")))
    assert [e["data"]["outcome"] for e in denied] == ["allow", "deny", "allow"]  # ship is read-only: not gated
    sends = list(query_events(store, EventFilter(state="send", flow="g")))
    assert sends and {(e["state"], e["run_id"]) for e in sends} == {("send", ids[1])}
    assert list(query_events(store, EventFilter(tool="pa"))) == []  # a prefix of a tool id is not that tool
    assert list(query_events(store, EventFilter(type="tool_succeed"))) == []


def test_since_until_and_run_select_by_event_time_and_run(tmp_path, store):
    h, ids = _runs(tmp_path, store)
    t0 = store.get_run(ids[0])["created_at"]
    got = list(query_events(store, EventFilter(since=t0 + 30, until=t0 + 150)))
    assert {e["run_id"] for e in got} == {ids[1], ids[2]} and all(t0 + 30 <= e["ts"] <= t0 + 150 for e in got)
    one = list(query_events(store, EventFilter(run_id=ids[3])))
    assert [e["seq"] for e in one] == [e["seq"] for e in store.events(ids[3])]
    assert list(query_events(store, EventFilter(run_id="no-such-run"))) == []


def test_results_are_oldest_first_and_limit_keeps_the_newest(tmp_path, store):
    h, ids = _runs(tmp_path, store)
    every = list(query_events(store, EventFilter()))
    assert [e["run_id"] for e in every] == sorted((e["run_id"] for e in every), key=ids.index)
    assert len(every) == sum(len(store.events(r)) for r in ids)
    last = list(query_events(store, EventFilter(limit=3)))
    assert [(e["run_id"], e["seq"]) for e in last] == [(e["run_id"], e["seq"]) for e in every[-3:]]


def test_sql_reads_in_batches_and_the_reader_answers_as_the_store(tmp_path, sql_store):
    store = sql_store
    from flowctl.store.core import SCHEMA_VERSION
    from flowctl.store.reader import open_reader

    h, ids = _runs(tmp_path, store)
    whole = [(e["run_id"], e["seq"]) for e in query_events(store, EventFilter(tool="ship"))]
    paged = [(e["run_id"], e["seq"]) for e in query_events(store, EventFilter(tool="ship"), batch=1)]
    assert paged == whole and len(whole) >= 4
    reader = open_reader(store.url, SCHEMA_VERSION)
    try:
        assert [(e["run_id"], e["seq"]) for e in query_events(reader, EventFilter(tool="ship"), batch=2)] == whole
    finally:
        reader.close()


def test_the_time_query_uses_the_schema_8_index(tmp_path):
    import sqlite3

    from flowctl.store.sql import open_store

    open_store(f"sqlite:///{tmp_path}/s.db", create=True).close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        plan = " ".join(r[-1] for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT e.seq FROM flowctl_events e JOIN flowctl_runs r ON r.id = e.run_id "
            "WHERE e.ts >= 0 ORDER BY e.ts, e.run_id, e.seq LIMIT 5"))
    assert "ix_flowctl_events_ts" in plan and "TEMP B-TREE" not in plan


def test_the_servers_gate_decisions_are_read_by_time(store):
    from flowctl.store.query import service_decisions
    from flowctl.store.servicelog import log_of

    assert list(service_decisions(store)) == []  # no service log yet: nothing, not an error
    log = log_of(store)
    for at, outcome in ((100.0, "allow"), (200.0, "deny")):
        log.append("s1", {"at": at, "caller": "ci", "kind": "gate_check", "tool": "pay@1.0.0", "outcome": outcome,
                          "policy": "cap", "rule": "allow[0] range on input.amount", "reason": "r"})
    log.append("access", {"at": 300.0, "caller": "", "kind": "access_denied", "outcome": "deny"})
    assert [(d["ts"], d["outcome"]) for d in service_decisions(store, since=150.0)] == [(200.0, "deny")]
    assert len(list(service_decisions(store))) == 2


def test_flowctl_events_prints_jsonl_and_refuses_a_bad_window(tmp_path):
    import json

    from click.testing import CliRunner

    from flowctl.cli.main import main
    from flowctl.store.sql import open_store

    db = f"sqlite:///{tmp_path}/flowctl.db"
    store = open_store(db, create=True)
    h, ids = _runs(tmp_path, store)
    store.close()
    runner = CliRunner()
    args = ["events", "--root", str(h.root), "--db", db]
    done = runner.invoke(main, args + ["--tool", "pay", "--type", "tool_succeeded", "--format", "jsonl"])
    assert done.exit_code == 0, done.output
    lines = [json.loads(line) for line in done.output.splitlines()]
    assert [(e["run_id"], e["type"], e["flow"]) for e in lines] == [(ids[0], "tool_succeeded", "f"),
                                                                    (ids[3], "tool_succeeded", "f")]
    assert lines[0]["time"].startswith("2026-01-01T") and lines[0]["data"]["tool"] == "pay@1.0.0"
    by_prefix = runner.invoke(main, args + ["--run", ids[1][:-2], "--format", "jsonl"])
    assert by_prefix.exit_code == 0 and {json.loads(x)["run_id"] for x in by_prefix.output.splitlines()} == {ids[1]}
    backwards = runner.invoke(main, args + ["--since", "1h", "--until", "2h"])
    assert backwards.exit_code == 2 and "--until" in backwards.output and "Traceback" not in backwards.output
    unknown = runner.invoke(main, args + ["--run", "nosuchrun"])
    assert unknown.exit_code == 2 and "no run 'nosuchrun'" in unknown.output
    for option in ("--state", "--tool", "--type", "--flow"):  # refused before the query (a LIKE pattern too complex)
        long = runner.invoke(main, args + [option, "x" * 60000])
        assert long.exit_code == 2 and f"{option} is 60000 characters long" in long.output, long.output
    assert runner.invoke(main, args + ["--state", "x" * 200]).exit_code == 0
    assert runner.invoke(main, args + ["--limit", "9" * 20]).exit_code == 2


def test_rows_of_one_event_from_before_schema_7_are_filtered_exactly_too(tmp_path):
    from support.helpers import load_sql_dump

    from flowctl.store.sql import open_store

    url = f"sqlite:///{tmp_path}/v4.db"
    load_sql_dump(__import__("pathlib").Path(__file__).parent / "data" / "store_v4.sql", url)
    store = open_store(url)  # upgraded to this schema: its rows stay one event each
    try:
        runs = store.list_runs(limit=0)
        every = [e for r in runs for e in store.events(r["id"])]
        assert every and all(e.get("packed") is None for e in every)
        tool = next(e["data"]["tool"] for e in every if isinstance(e["data"], dict) and e["data"].get("tool"))
        for flt, keep in ((EventFilter(type="state_entered"), lambda e: e["type"] == "state_entered"),
                          (EventFilter(state=every[1]["state"]), lambda e: e["state"] == every[1]["state"]),
                          (EventFilter(tool=tool), lambda e: isinstance(e["data"], dict) and e["data"].get("tool") == tool)):
            got = sorted((e["run_id"], e["seq"]) for e in query_events(store, flt))
            assert got and got == sorted((e["run_id"], e["seq"]) for e in every if keep(e))
    finally:
        store.close()


def _verify(store, run_id) -> list:
    from flowctl.store.audit import RunCheck
    from flowctl.store.events import iter_events

    check = RunCheck(store.get_run(run_id))
    for ev in iter_events(store, run_id):
        check.add(ev)
    return check.finish()


def _packed_row_of(path, run_id, event_type):
    """``seq`` of the packed row of ``run_id`` holding its ``event_type`` event."""
    import sqlite3

    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT seq, data FROM flowctl_events WHERE run_id = ? AND n_events IS NOT NULL ORDER BY seq",
                          (run_id,)).fetchall()
    finally:
        db.close()
    return next(seq for seq, text in rows if f',"{event_type}",' in text)


def _edit(path, sql, args):
    import sqlite3

    db = sqlite3.connect(path)
    try:
        db.execute(sql, args)
        db.commit()
    finally:
        db.close()


@pytest.mark.parametrize("column, value", [("ts", 1000.0), ("ts", 4.0e9), ("state", "send"),
                                           ("type", "tool_succeeded"), ("attempt", 3)])
def test_an_edited_indexed_column_of_a_packed_row_is_found_by_verify_and_not_taken_by_the_query(
        tmp_path, column, value):
    from flowctl.store.sql import open_store

    path = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{path}", create=True)
    try:
        h, ids = _runs(tmp_path, store)
        run_id = ids[0]
        assert _verify(store, run_id) == []
        seq = _packed_row_of(path, run_id, "tool_succeeded")
        before = [(e["run_id"], e["seq"]) for e in query_events(store, EventFilter(tool="pay", type="tool_succeeded"))]
        _edit(path, f"UPDATE flowctl_events SET {column} = ? WHERE run_id = ? AND seq = ?", (value, run_id, seq))
        problems = _verify(store, run_id)
        assert len(problems) == 1 and problems[0].startswith(f"event {seq}: the stored row's {column} column ("), problems
        assert "edited in the store" in problems[0]
        # what the query keeps is decided on the hashed events: an edit never adds an event to a filter
        if column == "ts" and value > 3e9:
            assert list(query_events(store, EventFilter(since=3e9))) == []
        elif column != "ts":
            after = [(e["run_id"], e["seq"]) for e in query_events(store, EventFilter(tool="pay", type="tool_succeeded"))]
            assert after == before
            assert all(e["state"] == "send" for e in query_events(store, EventFilter(state="send")))
            assert {e["type"] for e in query_events(store, EventFilter(type="tool_succeeded"))} == {"tool_succeeded"}
    finally:
        store.close()


def test_an_edited_column_of_a_row_of_one_event_is_hashed_itself(tmp_path):
    """Rows from before schema 7 hold one event each, its ts, type, state and attempt part of its hash."""
    from support.helpers import load_sql_dump

    from flowctl.store.sql import open_store

    url = f"sqlite:///{tmp_path}/v4.db"
    load_sql_dump(__import__("pathlib").Path(__file__).parent / "data" / "store_v4.sql", url)
    store = open_store(url)
    try:
        run_id = store.list_runs(limit=0)[0]["id"]
        assert _verify(store, run_id) == []
        for column, value in (("ts", 1000.0), ("type", "run_cancelled"), ("state", "x"), ("attempt", 9)):
            _edit(tmp_path / "v4.db", f"UPDATE flowctl_events SET {column} = ? WHERE run_id = ? AND seq = 2",
                  (value, run_id))
            assert any(p.startswith("event 2 (") and "was modified (hash differs)" in p for p in _verify(store, run_id))
    finally:
        store.close()
