"""Schema 9: the commit that ends a run keeps its stats facts (``flowctl.store.summary``), so
``flowctl stats`` counts an ended run without reading its events; a summary that no longer
describes the run (it was redriven) is not used. Model usage, gate decisions, compensations,
reviews and time buckets are counted alike in every store."""
from __future__ import annotations

import pytest



from support.stores import pg_url, sql_store, store  # noqa: F401,E402 - fixtures


def _run(run_id, status="running", flow="triage"):
    return {"id": run_id, "flow": flow, "flow_version": "1", "digest": "d" * 64, "parent_id": None, "status": status,
            "input": {}, "params": {}, "output": None, "error": None, "cursor": {"state": "a"},
            "created_at": 1000.0, "updated_at": 1000.0, "available_at": None, "owner": "t:1",
            "last_seq": 0, "last_hash": "", "steps": 1}


def _events(specs, start=1, ts=3600.0) -> list:
    return [{"seq": i, "ts": ts + 10 * i, "type": t, "state": state, "attempt": 1, "data": d, "prev_hash": "", "hash": ""}
            for i, (t, state, d) in enumerate(specs, start=start)]


def _model(model, tin, tout, cost=None, reask=None):
    d = {"model": model, "usage": {"input_tokens": tin, "output_tokens": tout}, "latency_ms": 5.0, "reask": reask}
    if cost is not None:
        d["cost"] = cost
    return d


TRIAGE = [
    ("model_called", "classify", _model("gpt-x", 100, 20, 0.5, reask=None)),
    ("model_called", "classify", _model("gpt-x", 120, 25, 0.25, reask="not JSON")),
    ("policy_decided", "resolve", {"tool": "refund@1", "outcome": "allow", "warnings": [{"rule": "big"}]}),
    ("tool_invoked", "resolve", {"tool": "refund@1"}),
    ("tool_succeeded", "resolve", {"tool": "refund@1", "duration_ms": 30.0}),
    ("model_called", "resolve", _model("claude-y", 50, 10)),
    ("policy_decided", "resolve", {"tool": "refund@1", "outcome": "deny"}),
    ("review_requested", "check", {}),
    ("review_timed_out", "check", {}),
    ("compensation_started", "resolve", {"tool": "refund@1"}),
    ("compensation_failed", "resolve", {"tool": "refund@1"}),
]


def _end(store, run_id, specs, status="succeeded", start=1):
    """Commit ``specs`` as the events that end ``run_id`` (its earlier events are ``start - 1``)."""
    events = _events(specs, start)
    store.commit(run_id, start - 1, {"status": status, "last_seq": events[-1]["seq"], "last_hash": ""}, events)


def test_stats_count_model_tokens_cost_and_reasks_per_flow_state_and_model(store):
    from flowctl.store.history import stats

    store.create_run(_run("t1"), [])
    _end(store, "t1", TRIAGE)
    m = stats(store)["models"]
    assert (m["calls"], m["reasks"], m["input_tokens"], m["output_tokens"]) == (3, 1, 270, 55)
    assert m["reask_rate"] == pytest.approx(1 / 3) and m["cost"] == pytest.approx(0.75)
    assert m["by_model"]["claude-y"] == {"calls": 1, "reasks": 0, "input_tokens": 50, "output_tokens": 10, "cost": None}
    assert m["by_state"]["triage/classify"]["reasks"] == 1 and m["by_flow"]["triage"]["calls"] == 3
    s = stats(store)
    assert s["gate"] == {"allow": 1, "deny": 1, "review": 0, "warn": 1}
    assert s["compensations"] == {"started": 1, "succeeded": 0, "failed": 1}
    assert s["reviews"] == {"requested": 1, "timed_out": 1, "pending": 0}
    assert s["latency"]["refund@1"]["count"] == 1 and dict(s["latency"]["refund@1"]["le"])[0.025] == 0
    assert dict(s["latency"]["refund@1"]["le"])[0.05] == 1


def test_buckets_count_each_tool_per_interval_from_since(store):
    from flowctl.store.history import stats

    store.create_run(_run("b1"), [])
    calls = [("tool_succeeded", "a", {"tool": "t@1", "duration_ms": ms}) for ms in (10.0, 20.0, 30.0)]
    calls += [("tool_failed", "a", {"tool": "t@1", "duration_ms": 40.0})]
    _end(store, "b1", calls)  # at 3610, 3620, 3630, 3640 seconds
    found = stats(store, bucket=20.0)["buckets"]["t@1"]
    assert [(b["start"], b["calls"], b["failures"]) for b in found] == [(3600.0, 1, 0), (3620.0, 2, 0), (3640.0, 1, 1)]
    assert found[1]["mean_ms"] == 25.0 and found[1]["p95_ms"] == pytest.approx(29.5)
    later = stats(store, since=900.0, bucket=3600.0)["buckets"]["t@1"]
    assert [(b["start"], b["calls"]) for b in later] == [(3600.0, 4)]


def test_an_ended_run_is_counted_from_its_summary_without_reading_its_events(sql_store, monkeypatch):
    from flowctl.store.history import stats

    store = sql_store
    store.create_run(_run("s1"), [])
    _end(store, "s1", TRIAGE)
    expected = stats(store)

    def no_events(*_a, **_k):
        raise AssertionError("stats read the events of a summarised run")

    reader = store._reader or store
    monkeypatch.setattr(type(reader), "events_page", no_events)
    assert stats(store) == expected


def test_a_redriven_run_is_counted_from_its_events_not_its_stale_summary(store):
    from flowctl.store.history import stats

    store.create_run(_run("r1"), [])
    _end(store, "r1", [("tool_failed", "a", {"tool": "t@1", "duration_ms": 1.0})], status="failed")
    assert stats(store)["tools"]["t@1"]["calls"] == 1
    events = _events([("run_redriven", "a", {}), ("tool_succeeded", "a", {"tool": "t@1", "duration_ms": 2.0})], 2)
    store.commit("r1", 1, {"status": "running", "last_seq": 3, "last_hash": ""}, events)
    s = stats(store)
    assert s["tools"]["t@1"] == {"calls": 2, "failures": 1, "retries": 0, "failure_rate": 0.5, "retry_rate": 0.0}
    assert s["counts"]["takeovers"] == 1


def test_a_corrupt_summary_falls_back_to_the_events(tmp_path):
    import sqlite3

    from flowctl.store.history import stats
    from flowctl.store.sql import open_store

    url = f"sqlite:///{tmp_path}/flowctl.db"
    store = open_store(url)
    store.create_run(_run("c1"), [])
    _end(store, "c1", TRIAGE)
    expected = stats(store)
    store.close()
    with sqlite3.connect(tmp_path / "flowctl.db") as conn:
        conn.execute("UPDATE flowctl_run_summaries SET facts = '{not json'")
    store = open_store(url)
    assert stats(store) == expected
    store.close()
