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


# ------------------------------------------------------------------------ schema 12: the figures
MIXED = [  # two tools, a failed call retried, one that fails without a retry, and the other kinds of facts
    ("tool_invoked", "a", {"tool": "t@1"}),
    ("tool_failed", "a", {"tool": "t@1", "duration_ms": 4.0}),
    ("retry_scheduled", "a", {}),
    ("tool_invoked", "a", {"tool": "t@1"}),
    ("tool_succeeded", "a", {"tool": "t@1", "duration_ms": 6.0}),
    ("tool_invoked", "b", {"tool": "u@1"}),
    ("tool_failed", "b", {"tool": "u@1", "duration_ms": 70.0}),
    ("policy_decided", "b", {"tool": "u@1", "outcome": "allow"}),
    ("retry_scheduled", "b", {}),
    ("tool_succeeded", "b", {"tool": "u@1", "duration_ms": 0.1}),
] + TRIAGE


def _many(store, n=12):
    for i in range(n):
        store.create_run(dict(_run(f"m{i:02d}"), created_at=1000.0 + i), [])
        _end(store, f"m{i:02d}", MIXED[: 4 + i % 9] + TRIAGE[: i % 4], status="failed" if i % 5 == 0 else "succeeded")


def test_figures_fold_the_facts_as_stats_counts_them():
    from flowctl.store.summary import facts_of, figures_of

    facts = facts_of(_events(MIXED))
    tools, invoked, other = figures_of(facts)
    assert tools == {"t@1": [2, 1, 1, [4.0, 6.0]], "u@1": [2, 1, 1, [70.0, 0.1]], "refund@1": [1, 0, 0, [30.0]]}
    assert invoked == 4
    assert [f[0] for f in other] == ["policy_decided"] + [f[0] for f in facts_of(_events(TRIAGE))
                                                          if f[0] not in ("tool_invoked", "tool_succeeded")]


def test_stats_from_the_figures_are_the_stats_from_the_facts(store):
    """Every store gives the same figures folded from its summaries or read from them, and the
    bucketed form (which reads the facts) counts the same calls."""
    from flowctl.store.history import stats

    _many(store)
    plain = stats(store, children=True)
    bucketed = stats(store, children=True, bucket=3600.0)
    assert {k: v for k, v in bucketed.items() if k != "buckets"} == plain
    specs = [MIXED[: 4 + i % 9] + TRIAGE[: i % 4] for i in range(12)]
    ends = [(t, d["duration_ms"]) for spec in specs for t, _, d in spec if d.get("tool") == "t@1" and "duration_ms" in d]
    failed = sum(t == "tool_failed" for t, _ in ends)  # each is followed by its retry_scheduled in every run
    assert plain["tools"]["t@1"] == {"calls": len(ends), "failures": failed, "retries": failed,
                                     "failure_rate": failed / len(ends), "retry_rate": failed / len(ends)}
    assert plain["latency"]["u@1"]["count"] == sum(b["calls"] for b in bucketed["buckets"]["u@1"])
    # the latency histogram: calls at or under each bound, cumulative; the sum in seconds
    le = dict(plain["latency"]["t@1"]["le"])
    assert (le[0.005], le[0.01], le[60.0]) == (failed, len(ends), len(ends))  # 4 ms failed, 6 ms succeeded
    assert plain["latency"]["t@1"]["sum_s"] == pytest.approx(sum(ms for _, ms in ends) / 1000.0)
    assert plain["counts"]["tool_calls"] == sum(t == "tool_invoked" for spec in specs for t, _, _ in spec)


def test_a_sql_store_answers_as_the_memory_store(tmp_path):
    from flowctl.store.history import stats
    from flowctl.store.sql import MemoryStore, open_store

    memory, sql = MemoryStore(), open_store(f"sqlite:///{tmp_path}/flowctl.db")
    try:
        for s in (memory, sql):
            _many(s)
        assert stats(sql) == stats(memory) and stats(sql, limit=5) == stats(memory, limit=5)
        assert stats(sql, since=1006.0, bucket=60.0) == stats(memory, since=1006.0, bucket=60.0)
    finally:
        sql.close()


def test_the_commit_that_ends_a_run_keeps_its_figures(sql_store):
    import json

    from flowctl.store.summary import facts_of, figures_of

    sql_store.create_run(_run("f1"), [])
    _end(sql_store, "f1", MIXED)
    p = "%s" if sql_store.pg else "?"
    with sql_store.engine.connect() as conn:
        facts, figures = conn.exec_driver_sql(f"SELECT facts, figures FROM flowctl_run_summaries WHERE run_id = {p}",
                                              ("f1",)).one()
    assert json.loads(figures) == figures_of(json.loads(facts)) == json.loads(json.dumps(figures_of(facts_of(_events(MIXED)))))


def test_summaries_without_figures_or_with_corrupt_ones_are_counted_alike(tmp_path):
    """A summary written before schema 12 has no figures (folded from its facts); figures that are
    not what figures_of makes are not used (the run's events are read)."""
    import sqlite3

    from flowctl.store.history import stats
    from flowctl.store.sql import open_store

    url = f"sqlite:///{tmp_path}/flowctl.db"
    store = open_store(url)
    _many(store)
    expected = stats(store)
    store.close()
    with sqlite3.connect(tmp_path / "flowctl.db") as conn:
        conn.execute("UPDATE flowctl_run_summaries SET figures = NULL WHERE run_id IN ('m01', 'm02')")
        conn.execute("""UPDATE flowctl_run_summaries SET figures = '[{"t@1":[5,0,0,[1.0]]},0,[]]' WHERE run_id = 'm03'""")
        conn.execute("UPDATE flowctl_run_summaries SET figures = '[not json' WHERE run_id = 'm04'")
    store = open_store(url)
    assert stats(store) == expected
    store.close()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_schema_11_store_gains_the_figures_column_and_its_summaries_still_count(tmp_path, kind, request):
    from flowctl.store.history import stats
    from flowctl.store.sql import SCHEMA_VERSION, open_store

    url = f"sqlite:///{tmp_path}/flowctl.db" if kind == "sqlite" else request.getfixturevalue("pg_url")
    store = open_store(url)
    _many(store)
    expected = stats(store)
    with store.engine.begin() as conn:  # the store as schema 11 left it: summaries without figures
        conn.exec_driver_sql("ALTER TABLE flowctl_run_summaries DROP COLUMN figures")
        conn.exec_driver_sql("UPDATE flowctl_meta SET value = '11' WHERE key = 'schema_version'")
    store.close()
    store = open_store(url)
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT value FROM flowctl_meta WHERE key = 'schema_version'").scalar() \
                == str(SCHEMA_VERSION) == "12"
            assert conn.exec_driver_sql("SELECT count(*) FROM flowctl_run_summaries WHERE figures IS NULL").scalar() == 12
        assert stats(store) == expected
        store.create_run(dict(_run("later"), created_at=2000.0), [])  # a run that ends now keeps its figures
        _end(store, "later", MIXED)
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM flowctl_run_summaries WHERE figures IS NULL").scalar() == 12
        assert stats(store)["runs"] == 13
    finally:
        store.close()


def _reopened(store):
    """Another store on the same database (its own tally: it wrote none of the run's earlier events)."""
    from flowctl.store.sql import open_store

    return open_store(store.url)


def test_a_run_ended_by_another_process_counts_the_facts_written_before_it(sql_store):
    from flowctl.store import summary as summary_mod

    store = sql_store
    first = _events([("run_started", None, {}), ("tool_invoked", "a", {"tool": "t@1"})])
    store.create_run(dict(_run("c1"), last_seq=2), first)
    other = _reopened(store)
    try:
        _end(other, "c1", [("tool_succeeded", "a", {"tool": "t@1", "duration_ms": 3.0})], start=3)
        facts = summary_mod.read_summary(_stored_facts(other, "c1"))
    finally:
        other.close()
    assert [f[0] for f in facts] == ["tool_invoked", "tool_succeeded"]  # the first from the read before


def test_a_run_ended_right_after_its_run_started_reads_no_earlier_events(sql_store, monkeypatch):
    """Event 1 of every run is its run_started, which holds no fact: the worker's end of a run it
    claimed as submitted (its first commit at seq 2) does not read it back (issue 17, target 8)."""
    from flowctl.store import hot, summary as summary_mod

    store = sql_store
    store.create_run(dict(_run("q1"), last_seq=1), _events([("run_started", None, {})]))
    other = _reopened(store)

    def no_read(*_a, **_k):
        raise AssertionError("the events before the first commit were read")

    monkeypatch.setattr(summary_mod, "before_sql", no_read)
    monkeypatch.setattr(hot, "before_sql", no_read)
    try:
        _end(other, "q1", [("tool_invoked", "a", {"tool": "t@1"}),
                           ("tool_succeeded", "a", {"tool": "t@1", "duration_ms": 3.0})], start=2)
        facts = summary_mod.read_summary(_stored_facts(other, "q1"))
    finally:
        other.close()
    assert [f[0] for f in facts] == ["tool_invoked", "tool_succeeded"]


def _stored_facts(store, run_id):
    p = "%s" if store.pg else "?"
    with store.engine.connect() as conn:
        return conn.exec_driver_sql(f"SELECT facts FROM flowctl_run_summaries WHERE run_id = {p}", (run_id,)).scalar()


def test_audit_verify_finds_a_summary_edited_in_the_store(tmp_path):
    """(breaker finding: deleting a run's policy_decided facts from its summary silenced
    `stats --check`, and `audit verify` said nothing)"""
    import json
    import sqlite3

    from click.testing import CliRunner

    from flowctl.cli.main import main
    from support.engineflows import flow, linear
    from support.enginekit import allow_all, build, effect_contract, task

    tools = ("def pay(input, call):\n    return {}\n\ndef verify_pay(input, output, call):\n    return True\n\n"
             "def undo_pay(input, output, call):\n    pass\n")
    root = build(tmp_path, {**effect_contract("pay", "pay"), **allow_all("pay"), **task("p", "pay@1.0.0"),
                            **flow("p", linear("p"))}, tools)
    db = ["--db", f"sqlite:///{tmp_path}/runs.db", "--root", str(root)]
    ran = CliRunner().invoke(main, ["run", "f", *db, "--format", "json"])
    run_id = json.loads(ran.output)["run_id"]
    verified = CliRunner().invoke(main, ["audit", "verify", run_id, *db])
    assert verified.exit_code == 0 and "intact" in verified.output, verified.output
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        (text,) = conn.execute("SELECT facts FROM flowctl_run_summaries WHERE run_id = ?", (run_id,)).fetchone()
        kept = [f for f in json.loads(text) if f[0] != "policy_decided"]
        assert len(kept) < len(json.loads(text))
        conn.execute("UPDATE flowctl_run_summaries SET facts = ? WHERE run_id = ?", (json.dumps(kept), run_id))
    refused = CliRunner().invoke(main, ["audit", "verify", run_id, *db])
    assert refused.exit_code == 1 and "its summary" in refused.output and "edited in the store" in refused.output
