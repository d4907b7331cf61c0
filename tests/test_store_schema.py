"""Schema version 5: a store written by schema 4 is upgraded in place (its runs go on), and the
listings, id-prefix lookups, due reviews and gate counts are index reads, not table scans."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from support.helpers import load_sql_dump, write_project
from support.pg import pg_url  # noqa: F401 - fixture

V4_DUMP = Path(__file__).parent / "data" / "store_v4.sql"
#: the project the dump was written with (its definition snapshot is in the dump)
V4_PROJECT = {
    "contracts/echo.v1.0.0.yaml": "id: echo\nversion: 1.0.0\nentrypoint: tk:echo\n",
    "tools/tk.py": "def echo(input, call):\n    return {'echo': input}\n",
    "states/a.yaml": "id: a\ntype: task\ntool: echo@1.0.0\ninput: {name: input.name}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
    "states/rev.yaml": ("id: rev\ntype: review\nshow: {name: input.name}\ndecisions: [approve, reject]\ntimeout: 1h\n"
                        "remind_after: 10m\non_timeout: {goto: done}\n"),
    "transitions/f.yaml": "flow: f\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: done, set: {echo: response.echo}}\n",
    "transitions/g.yaml": "flow: g\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: w}\n  - {from: w, to: done}\n",
    "transitions/r.yaml": ("flow: r\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: rev}\n"
                           "  - {from: rev, to: done, when: \"review.decision == 'approve'\"}\n  - {from: rev, to: done}\n"),
}
V4_RUNS = {"01a232032d3a16abb80a2e31": "succeeded", "01a232033038cdf82fbd091b": "waiting",
           "01a23203322456ea21650300": "paused", "01a23203338ab7c91d39d4af": "paused"}
PAUSED = ["01a23203322456ea21650300", "01a23203338ab7c91d39d4af"]
NEW_INDEXES = {"ix_flowctl_runs_created", "ix_flowctl_runs_top_created", "ix_flowctl_runs_status_created",
               "ix_flowctl_runs_flow_created", "ix_flowctl_runs_parent_created", "ix_flowctl_runs_status_due",
               "ix_flowctl_gate_log_tool_at", "ix_flowctl_gate_log_tool_flow_at", "ix_flowctl_gate_log_tool_run_at",
               "ix_flowctl_events_ts"}  # version 8
OLD_INDEXES = {"ix_flowctl_runs_status", "ix_flowctl_runs_flow", "ix_flowctl_runs_parent_id", "ix_flowctl_gate_log_at"}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/flowctl.db"
    return request.getfixturevalue("pg_url")


def _load_v4(db_url) -> None:
    load_sql_dump(V4_DUMP, db_url)


def _indexes(store) -> set:
    import sqlalchemy as sa

    with store.engine.connect() as conn:
        return {ix["name"] for table in ("flowctl_runs", "flowctl_gate_log", "flowctl_events")
                for ix in sa.inspect(conn).get_indexes(table)}


def test_a_version_4_store_is_upgraded_in_place_and_its_paused_reviews_still_time_out(tmp_path, db_url):
    from flowctl.engine.clock import FakeClock
    from flowctl.engine.engine import Engine
    from flowctl import load_project
    from flowctl.store.audit import verify_chain
    from flowctl.store.sql import SCHEMA_VERSION, open_store

    assert SCHEMA_VERSION == 12
    _load_v4(db_url)
    if db_url.startswith("sqlite"):  # as a paused review of a pre-version-2 store: no due time kept
        with sqlite3.connect(db_url[len("sqlite:///"):]) as conn:
            conn.execute("UPDATE flowctl_runs SET available_at = NULL WHERE id = ?", (PAUSED[1],))
    store = open_store(db_url)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT value FROM flowctl_meta WHERE key = 'schema_version'").scalar() == str(SCHEMA_VERSION)
        assert conn.exec_driver_sql("SELECT count(*) FROM flowctl_run_summaries").scalar() == 0  # schema 9's table
    found = _indexes(store)
    assert NEW_INDEXES <= found and not OLD_INDEXES & found
    assert ("ix_flowctl_runs_id_c" in found) == db_url.startswith("postgresql")  # id prefixes whatever the collation
    for run_id, status in V4_RUNS.items():
        row = store.get_run(run_id)
        assert row["status"] == status
        assert verify_chain(store.events(run_id), row["last_seq"], row["last_hash"]) == []
    for run_id in PAUSED:  # each paused review is due at its reminder (the upgrade gave back a lost due time)
        row = store.get_run(run_id)
        assert row["available_at"] == row["cursor"]["pending"]["remind_at"]
    assert [r["id"] for r in store.list_runs(status="paused", limit=0, due_by=0)] == []
    far = max(store.get_run(r)["cursor"]["pending"]["deadline"] for r in PAUSED) + 1
    assert sorted(r["id"] for r in store.list_runs(status="paused", limit=0, due_by=far)) == PAUSED
    store.close()
    store = open_store(db_url)  # a second open finds it current
    root = write_project(tmp_path / "v4proj", V4_PROJECT)
    engine = Engine(load_project(root), store, clock=FakeClock(far))
    fired = engine.fire_due_reviews()  # their hour is up: each times out and goes on to done
    assert sorted(r.run_id for r in fired) == PAUSED and {r.status for r in fired} == {"succeeded"}
    for run_id in PAUSED:
        row = store.get_run(run_id)
        assert verify_chain(store.events(run_id), row["last_seq"], row["last_hash"]) == []
        assert "review_timed_out" in [e["type"] for e in store.events(run_id)]
        # the old rows (one per event) stay as they were; the timeout's commit is one packed row after them
        kinds = [e.get("packed") is not None for e in store.events(run_id)]
        assert kinds[0] is False and kinds[-1] is True and kinds == sorted(kinds)
    with store.engine.connect() as conn:  # each run that ended after the upgrade keeps its stats facts
        kept = dict(conn.exec_driver_sql("SELECT run_id, facts FROM flowctl_run_summaries").all())
    assert sorted(kept) == PAUSED and all('"review_timed_out"' in kept[r] for r in PAUSED)
    assert store.get_run("01a232033038cdf82fbd091b")["status"] == "waiting"  # not a review: left alone
    store.close()


# ------------------------------------------------------------------------------------- query plans
def _plans(store, action) -> list:
    """``[(sql, plan text)]`` of each SELECT on runs or the gate log that ``action()`` sends to SQLite
    (through SQLAlchemy or on the DBAPI cursor: SQLite's own trace, with the values bound)."""
    import sqlalchemy as sa

    seen = []

    def trace(statement):
        if statement.lstrip().upper().startswith("SELECT") and ("flowctl_runs" in statement or "flowctl_gate_log" in statement):
            seen.append(statement)

    def on_checkout(dbapi_conn, record, proxy):
        dbapi_conn.set_trace_callback(trace)

    sa.event.listen(store.engine, "checkout", on_checkout)
    try:
        action()
    finally:
        sa.event.remove(store.engine, "checkout", on_checkout)
    out = []
    with store.engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        raw.set_trace_callback(None)
        for statement in seen:
            rows = raw.execute("EXPLAIN QUERY PLAN " + statement).fetchall()
            out.append((statement, " | ".join(r[-1] for r in rows)))
    return out


def _filled(tmp_path, n=300):
    from flowctl.store.sql import open_store

    store = open_store(f"sqlite:///{tmp_path}/plans.db")
    rows = [{"id": f"run{i:05d}" if i != 29 else "zz-unique", "flow": "f" if i % 2 else "g", "digest": "d" * 64, "status": ("paused", "failed", "succeeded")[i % 3],
             "parent_id": f"run{i - 1:05d}" if i % 5 == 4 else None, "created_at": 1000.0 + i, "updated_at": 1000.0 + i,
             "available_at": 5000.0 + i if i % 3 == 0 else None, "cursor": "{}", "last_seq": 0, "last_hash": "", "steps": 0}
            for i in range(n)]
    gate = [{"at": 1000.0 + i, "tool": f"t{i % 7}@1.0.0", "flow": "f", "run_id": f"run{i:05d}", "digest": "x" * 64}
            for i in range(n)]
    with store.engine.begin() as conn:
        conn.execute(store.t.runs.insert(), rows)
        conn.execute(store.t.gate_log.insert(), gate)
    return store


TOP = ("ix_flowctl_runs_parent_created", "ix_flowctl_runs_top_created")


@pytest.mark.parametrize("name, action, indexes, ordered", [
    ("runs", lambda s: s.list_runs(limit=50, top_level=True), TOP, True),
    ("runs --all", lambda s: s.list_runs(limit=50), ("ix_flowctl_runs_created",), True),
    ("runs --status", lambda s: s.list_runs(status="failed", limit=50, top_level=True), ("ix_flowctl_runs_status_created",), True),
    ("runs --flow", lambda s: s.list_runs(flow="g", limit=50), ("ix_flowctl_runs_flow_created",), True),
    ("child runs", lambda s: s.list_runs(parent_id="run00003", limit=50), ("ix_flowctl_runs_parent_created",), True),
    ("due reviews", lambda s: s.list_runs(status="paused", limit=0, due_by=5100.0), ("ix_flowctl_runs_status_due",), False),
    ("prefix", lambda s: s.get_run("zz-un")["id"] == "zz-unique", ("sqlite_autoindex_flowctl_runs_1",), False),
    ("stats", lambda s: s.stats_rows(100), TOP, False),
    ("gate rate", lambda s: s.gate_admit(["t3@1.0.0"], [{"kind": "rate", "since": 1100.0, "max": 10**6}]),
     ("ix_flowctl_gate_log_tool_at",), False),
    ("gate rate per flow", lambda s: s.gate_admit(["t3@1.0.0"], [{"kind": "rate", "since": 1100.0, "max": 10**6,
                                                                  "column": "flow", "value": "f"}]),
     ("ix_flowctl_gate_log_tool_flow_at",), False),
    ("gate dedupe", lambda s: s.gate_admit(["t3@1.0.0"], [{"kind": "dedupe", "since": 1100.0, "run_id": "run00010",
                                                           "digest": "x" * 64}]), ("ix_flowctl_gate_log_tool_run_at",), False),
])
def test_history_queries_read_an_index_range_not_the_whole_table(tmp_path, name, action, indexes, ordered):
    store = _filled(tmp_path)
    try:
        plans = _plans(store, lambda: action(store))
    finally:
        store.close()
    assert plans, name
    for statement, plan in plans:  # no full scan of either table
        assert not any(part.strip() in ("SCAN flowctl_runs", "SCAN flowctl_gate_log") for part in plan.split("|")), (name, plan)
    assert any(ix in plan for _, plan in plans for ix in indexes), (name, plans)
    if ordered:  # newest first read straight off the index: the first 50 rows, not all of them sorted
        assert not any("TEMP B-TREE" in plan for _, plan in plans), (name, plans)


@pytest.mark.postgres
def test_on_postgresql_an_id_prefix_is_a_range_of_the_c_collated_index(pg_url):
    import sqlalchemy as sa

    from flowctl.store.sql import open_store

    store = open_store(pg_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(store.t.runs.insert(), [{"id": f"run{i:05d}", "flow": "f", "digest": "d" * 64, "status": "succeeded",
                                                  "created_at": 1.0, "updated_at": 1.0, "cursor": "{}"} for i in range(200)])
        low, high = store._id_range("run0012")
        query = sa.select(store.t.runs.c.id).where(low, high)
        sql = str(query.compile(dialect=store.engine.dialect, compile_kwargs={"literal_binds": True}))
        with store.engine.begin() as conn:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")  # a 200-row table: otherwise a scan is cheapest
            plan = " ".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql))
            found = [r[0] for r in conn.execute(query)]
        assert "ix_flowctl_runs_id_c" in plan, plan
        assert found == [f"run0012{i}" for i in range(10)]
        assert store.get_run("run00123")["id"] == "run00123"
    finally:
        store.close()
