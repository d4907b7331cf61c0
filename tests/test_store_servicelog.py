"""The service log's refusals without a key (flowctl.store.servicelog.Refusals): counted per remote
address and reason per window, so that requests without a key cannot grow the store."""
from __future__ import annotations

import pytest

from flowctl.store.servicelog import MemoryLog, Refusals
from support.interleave import WatchedLock
from support.pg import pg_url  # noqa: F401 - fixture


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def record(reason="the API key is not known, or it was revoked"):
    return {"at": 0.0, "caller": "", "kind": "access_denied", "outcome": "unauthorized", "reason": reason,
            "data": {"method": "POST", "path": "/v1/gate/check"}}


def test_a_flood_from_one_address_is_one_row_then_one_count_per_window():
    log, clock = MemoryLog(), Clock()
    r = Refusals(log, window=60, clock=clock)
    for _ in range(10_000):
        r.note("203.0.113.9", record())
    rows = log.session("access")
    assert len(rows) == 1 and rows[0]["data"]["remote"] == "203.0.113.9"  # the first is written at once
    clock.t += 59
    r.note("203.0.113.9", record())
    assert len(log.session("access")) == 1  # still the same window
    clock.t += 1
    r.note("203.0.113.9", record())  # the window passed: its count is written, a new window begins
    rows = log.session("access")
    assert [row["data"].get("count") for row in rows] == [None, 10_000, None]
    assert rows[1]["data"]["first_at"] == 1000.0 and rows[1]["data"]["last_at"] == 1059.0
    assert log.verify("access") == []  # still one hash chain


def test_each_address_and_reason_is_counted_apart_and_memory_is_bounded():
    log, clock = MemoryLog(), Clock()
    r = Refusals(log, window=60, clock=clock, max_keys=3)
    for i in range(100):
        r.note(f"198.51.100.{i}", record())
    r.note("198.51.100.0", record("this endpoint needs an API key"))
    rows = log.session("access")
    assert [(row["data"]["remote"], row["reason"][:4]) for row in rows] == [
        ("198.51.100.0", "the "), ("198.51.100.1", "the "), ("198.51.100.2", "the "), ("*", "the "), ("*", "this")]
    assert len(r._open) == 3 + 2  # three apart, the rest under '*' (one per reason: a fixed few)
    assert [row["data"]["count"] for row in r.flush()] == [96]  # 97 under '*': one written, 96 counted
    assert r.flush() == [] and r._open == {}


def test_flush_writes_only_windows_that_counted_more_than_their_first():
    log, clock = MemoryLog(), Clock()
    r = Refusals(log, window=60, clock=clock)
    r.note("a", record())
    assert r.flush() == [] and len(log.session("access")) == 1


class Timers:
    """The timers a Refusals starts, fired by hand: ``armed`` holds ``[delay_s, fn, cancelled]``."""

    def __init__(self):
        self.armed = []

    def __call__(self, delay, fn):
        entry = [delay, fn, False]
        self.armed.append(entry)

        class Handle:
            def cancel(self):
                entry[2] = True

        return Handle()

    def fire(self):
        delay, fn, cancelled = self.armed.pop(0)
        assert not cancelled
        fn()


def refusal(method, path, route, reason="the API key is not known, or it was revoked"):
    return {"at": 0.0, "caller": "", "kind": "access_denied", "outcome": "unauthorized", "reason": reason,
            "data": {"method": method, "path": path, "route": route}}


def test_refusals_are_grouped_by_method_and_route_and_count_their_distinct_paths():
    # (break-it: 30 bad-key cancels of different runs were counted under the first row, a GET /v1/runs)
    log, clock = MemoryLog(), Clock()
    r = Refusals(log, window=60, clock=clock, timer=Timers())
    r.note("203.0.113.9", refusal("GET", "/v1/runs", "/v1/runs"))
    for i in range(30):
        r.note("203.0.113.9", refusal("POST", f"/v1/runs/run{i % 20:04d}/cancel", "/v1/runs/{run_id}/cancel"))
    r.note("203.0.113.9", refusal("GET", "/v1/runs/run0001", "/v1/runs/{run_id}"))
    rows = log.session("access")
    assert [(row["data"]["method"], row["data"]["path"], row["data"]["route"]) for row in rows] == [
        ("GET", "/v1/runs", "/v1/runs"), ("POST", "/v1/runs/run0000/cancel", "/v1/runs/{run_id}/cancel"),
        ("GET", "/v1/runs/run0001", "/v1/runs/{run_id}")]
    clock.t += 60
    (counted,) = r.flush(clock.t)
    assert counted["data"]["route"] == "/v1/runs/{run_id}/cancel" and counted["data"]["method"] == "POST"
    assert (counted["data"]["count"], counted["data"]["paths"]) == (29, 20)  # 20 runs, the first path among them
    assert log.verify("access") == []


def test_a_window_is_written_when_it_passes_even_if_no_refusal_follows():
    log, clock, timers = MemoryLog(), Clock(), Timers()
    r = Refusals(log, window=60, clock=clock, timer=timers)
    r.note("a", refusal("POST", "/v1/gate/check", "/v1/gate/check"))
    assert timers.armed == []  # nothing counted yet: nothing to write later
    clock.t += 10
    for _ in range(3):
        r.note("a", refusal("POST", "/v1/gate/check", "/v1/gate/check"))
    assert [t[0] for t in timers.armed] == [50.0]  # one timer, for the end of the window
    clock.t += 50
    timers.fire()  # the window passed and no refusal came: the timer writes it
    rows = log.session("access")
    assert [row["data"].get("count") for row in rows] == [None, 3] and rows[1]["data"]["last_at"] == 1010.0
    assert timers.armed == [] and r._open == {}


def test_the_timer_rearms_for_a_later_window_and_flush_at_stop_cancels_it():
    log, clock, timers = MemoryLog(), Clock(), Timers()
    r = Refusals(log, window=60, clock=clock, timer=timers)
    for remote, at in (("a", 0), ("b", 30)):
        clock.t = 1000.0 + at
        r.note(remote, refusal("GET", "/v1/runs", "/v1/runs"))
        r.note(remote, refusal("GET", "/v1/runs", "/v1/runs"))
    clock.t = 1060.0
    timers.fire()  # a's window; b's has 30 s left
    assert [row["data"]["remote"] for row in log.session("access") if "count" in row["data"]] == ["a"]
    assert [t[0] for t in timers.armed] == [30.0]
    assert [row["data"]["remote"] for row in r.flush()] == ["b"] and timers.armed[0][2] is True  # cancelled


def test_write_lock_is_one_lock_per_sqlite_store_and_none_on_postgresql(tmp_path):
    import threading

    from flowctl.store.servicelog import write_lock
    from flowctl.store.sql import open_store

    a, b = open_store(f"sqlite:///{tmp_path}/a.db"), open_store(f"sqlite:///{tmp_path}/b.db")
    try:
        assert write_lock(a) is write_lock(a) and isinstance(write_lock(a), type(threading.Lock()))
        assert write_lock(a) is not write_lock(b)  # two databases do not wait for each other
    finally:
        a.close()
        b.close()

    class Pg:
        pg = True

    with write_lock(Pg()):  # PostgreSQL serialises by its own locks: nothing to queue on
        pass


def test_sql_appends_queue_on_the_write_lock_and_number_in_order(tmp_path):
    """An append waits for the process's write lock (not SQLite's polling) before its transaction
    and, once it has it, takes the session's next number."""
    import threading

    from flowctl.store.servicelog import log_of, write_lock
    from flowctl.store.sql import open_store

    store = open_store(f"sqlite:///{tmp_path}/a.db")
    try:
        log, done = log_of(store), []
        log.append("s", record())
        watched = store.__dict__["_service_write_lock"] = WatchedLock()
        assert write_lock(store) is watched
        with watched.lock:  # another writer of this process is in its transaction
            t = threading.Thread(target=lambda: done.append(log.append("s", record())["seq"]))
            t.start()
            assert watched.waiting.wait(10)
            assert [r["seq"] for r in log.session("s")] == [1]  # queued before writing anything
        t.join(10)
        assert done == [2] and log.verify("s") == []
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_a_record_s_text_holding_a_nul_is_kept_as_json_writes_it_on_every_store(tmp_path, kind, request):
    """(break-it finding: a refusal's reason quotes what the request named — ``invoke:a\\x00b``
    from a URL's ``%00`` — and PostgreSQL's text cannot hold NUL: the append failed, the request
    was answered 500 and its refusal not recorded.) A NUL in a text field is kept as ``\\u0000``,
    hashed as kept, on every store alike."""
    from flowctl.store.servicelog import log_of
    from flowctl.store.sql import open_store

    if kind == "memory":
        store, log = None, MemoryLog()
    else:
        store = open_store(request.getfixturevalue("pg_url") if kind == "postgresql" else f"sqlite:///{tmp_path}/a.db",
                           create=True)
        log = log_of(store)
    try:
        row = log.append("access", dict(record("key 'a' lacks the scope 'invoke:a\x00b'"), caller="a", policy="p\x00"))
        (kept,) = log.session("access")
        assert kept["reason"] == row["reason"] == "key 'a' lacks the scope 'invoke:a\\u0000b'"
        assert kept["policy"] == "p\\u0000" and log.verify("access") == []
    finally:
        if store is not None:
            store.close()


def test_a_database_failure_of_an_append_is_a_store_error(tmp_path):
    """(break-it finding: the append runs on the driver's cursor, whose errors are not SQLAlchemy's:
    one that was not a taken seq escaped as the driver's own exception, which the server answered
    500 INTERNAL instead of 503 STORE.)"""
    from flowctl.errors import StoreError
    from flowctl.store.servicelog import log_of
    from flowctl.store.sql import open_store

    store = open_store(f"sqlite:///{tmp_path}/a.db", create=True)
    try:
        log = log_of(store)
        with store.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE flowctl_service_log")  # the database lost it
        with pytest.raises(StoreError, match="cannot write"):
            log.append("access", record())
    finally:
        store.close()
