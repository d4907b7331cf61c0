"""API keys and the service log in the run store (flowctl.store.apikeys, flowctl.store.servicelog):
the same behaviour on SQLite, PostgreSQL and the memory store; a changed log row is detected."""
from __future__ import annotations

import pytest

from flowctl.errors import UsageError
from flowctl.store.apikeys import keys_of
from flowctl.store.memory import MemoryStore
from flowctl.store.servicelog import log_of
from flowctl.store.sql import open_store
from support.pg import pg_url  # noqa: F401 - the fixture
from support.stores import sql_store  # noqa: F401 - the SQL stores (a log of many processes, transactions)


@pytest.fixture(params=["sqlite", "memory", "postgresql"])
def store(request, tmp_path):
    if request.param == "memory":
        s = MemoryStore()
    elif request.param == "sqlite":
        s = open_store(f"sqlite:///{tmp_path}/s.db")
    else:
        s = open_store(request.getfixturevalue("pg_url"))
    yield s
    s.close()


def test_a_key_verifies_until_revoked_and_never_by_a_near_miss(store):
    keys = keys_of(store)
    row, printed = keys.create("agent", ["gate", "invoke:refund", "gate"])
    assert row["scopes"] == ["gate", "invoke:refund"] and "secret_hash" not in row
    assert keys.verify(printed)["name"] == "agent"
    key_id, secret = printed.split("_")[1], printed.split("_", 2)[2]
    for wrong in ("", "fck_", printed + "x", printed[:-1], f"fck_{key_id}_{'A' * 43}", printed.upper()):
        assert keys.verify(wrong) is None, wrong
    with pytest.raises(UsageError):
        keys.create("agent", ["gate"])
    with pytest.raises(UsageError):
        keys.create("Agent!", ["gate"])
    with pytest.raises(UsageError):
        keys.create("other", ["everything"])
    keys.revoke("agent")
    assert keys.verify(printed) is None and keys.list()[0]["revoked_at"] is not None
    assert secret not in str(keys.list())
    with pytest.raises(UsageError):
        keys.revoke("ghost")


def test_the_service_log_numbers_each_session_and_detects_a_changed_row(store):
    log = log_of(store)
    for i in range(3):
        log.append("s1", {"at": float(i), "caller": "a", "kind": "gate_check", "outcome": "allow", "data": {"i": i}})
    log.append("s2", {"at": 9.0, "caller": "b", "kind": "gate_check", "outcome": "deny"})
    assert [r["seq"] for r in log.session("s1")] == [1, 2, 3] and [r["seq"] for r in log.session("s2")] == [1]
    assert log.verify("s1") == [] and log.verify("s2") == []
    if getattr(store, "engine", None) is None:
        log._rows["s1"][1]["outcome"] = "deny"
    else:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE flowctl_service_log SET outcome = 'deny' WHERE session = 's1' AND seq = 2")
    assert log.verify("s1") == ["seq 2: hash does not match (the record was changed)"]


def test_on_sqlite_a_key_is_verified_while_another_connection_holds_the_write_lock(tmp_path):
    """Every request looks its key up: on SQLite that read must not wait for a writer (a gate
    check's transaction), and a revocation committed by another process is seen at once."""
    import sqlite3

    store = open_store(f"sqlite:///{tmp_path}/s.db")
    try:
        keys = keys_of(store)
        _, printed = keys.create("agent", ["gate"])
        other = sqlite3.connect(f"{tmp_path}/s.db", isolation_level=None, timeout=0)
        other.execute("BEGIN IMMEDIATE")  # a writer in the middle of its transaction
        try:
            assert keys.verify(printed)["name"] == "agent"  # read in autocommit: no BEGIN IMMEDIATE to queue
            other.execute("UPDATE flowctl_api_keys SET revoked_at = 1.0 WHERE name = 'agent'")
            assert keys.verify(printed)["name"] == "agent"  # not committed yet: not seen
            other.execute("COMMIT")
            assert keys.verify(printed) is None  # committed elsewhere: refused by the next request
        finally:
            other.close()
    finally:
        store.close()


def test_the_service_log_numbers_in_order_when_another_process_appended_to_the_session(sql_store):
    """Each process remembers a session's tail to skip a read per append; another process's rows
    make that tail stale, and the next append still takes the next number (its insert collides
    on the primary key and is retried) with an intact chain."""
    from flowctl.store.servicelog import SqlLog

    store = sql_store

    here, there = SqlLog(store), SqlLog(store)  # two processes' logs on one database
    rec = {"at": 1.0, "caller": "agent", "kind": "gate_check"}
    assert [here.append("s", rec)["seq"], there.append("s", rec)["seq"], here.append("s", rec)["seq"],
            here.append("s", rec)["seq"]] == [1, 2, 3, 4]
    assert here.verify("s") == [] and [r["seq"] for r in there.session("s")] == [1, 2, 3, 4]


def test_a_service_log_row_rolled_back_with_its_transaction_leaves_no_gap(sql_store):
    store = sql_store
    log = log_of(store)
    rec = {"at": 1.0, "caller": "agent", "kind": "gate_check"}
    log.append("s", rec)
    with pytest.raises(RuntimeError):
        with store._begin() as conn:
            assert log.append_in(conn, "s", rec)["seq"] == 2
            raise RuntimeError("the check failed after its row was written")  # rolled back
    assert log.append("s", rec)["seq"] == 2 and log.verify("s") == []
