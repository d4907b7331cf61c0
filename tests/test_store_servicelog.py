"""The service log's refusals without a key (flowctl.store.servicelog.Refusals): counted per remote
address and reason per window, so that requests without a key cannot grow the store."""
from __future__ import annotations

from flowctl.store.servicelog import MemoryLog, Refusals


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
