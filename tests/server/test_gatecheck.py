"""POST /v1/gate/check answers as the engine's gate would, records who asked in causal order, and
a dry run neither records nor counts (flowctl.server.gatecheck)."""
from __future__ import annotations

import pytest

from support.pg import pg_url  # noqa: F401 - fixture

from flowctl.store.audit import REDACTED


def check(api, headers, tool, tool_input, **kw):
    r = api.client.post("/v1/gate/check", json={"tool": tool, "input": tool_input, **kw}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def test_allow_deny_and_review_name_the_rule_that_decided(api):
    h = api.key("agent", "gate")
    allowed = check(api, h, "refund@^1", {"amount": 10})
    assert (allowed["decision"], allowed["policy"], allowed["rule"]) == ("allow", "refunds", "allow")
    assert allowed["tool"] == "refund@1.0.0" and allowed["caller"] == "agent"
    over = check(api, h, "refund", {"amount": 500})
    assert (over["decision"], over["rule"]) == ("deny", "allow[0] range on input.amount")
    assert "outside [0, 100]" in over["reason"]
    review = check(api, h, "refund", {"amount": 70})
    assert (review["decision"], review["rule"]) == ("review", "review_when")
    read_only = check(api, h, "get_order", {"order_id": "A-1"})
    assert (read_only["decision"], read_only["rule"]) == ("allow", "read-only")


def test_a_side_effecting_tool_no_policy_covers_and_an_unknown_tool_are_denied(api):
    h = api.key("agent", "gate")
    wipe = check(api, h, "wipe", {})
    assert (wipe["decision"], wipe["rule"], wipe["policy"]) == ("deny", "default-deny", "")
    ghost = check(api, h, "drop_database", {})
    assert (ghost["decision"], ghost["rule"]) == ("deny", "unknown-tool")
    typo = check(api, h, "refnd", {"amount": 1})
    assert typo["rule"] == "unknown-tool" and "did you mean 'refund'?" in typo["reason"]
    none_satisfies = check(api, h, "refund@^2", {"amount": 1})  # no version in that range
    assert none_satisfies["decision"] == "deny" and none_satisfies["rule"] == "unknown-tool"


def test_the_input_is_checked_against_the_contract_schema_before_the_gate(api):
    h = api.key("agent", "gate")
    bad = check(api, h, "refund", {"amount": "ten"})
    assert (bad["decision"], bad["rule"]) == ("deny", "input-schema")
    assert "/amount" in bad["reason"]
    assert api.store.gate_count("run_id", "agent", "refund", 0) == 0  # never reached the gate's counters


def test_decisions_are_recorded_with_the_caller_in_causal_order_per_session(api):
    a, b = api.key("agent-a", "gate"), api.key("agent-b", "gate")
    first = check(api, a, "refund", {"amount": 1}, session="trace-1")
    second = check(api, b, "wipe", {}, session="trace-1")
    other = check(api, a, "refund", {"amount": 2})
    assert (first["seq"], second["seq"], other["seq"], other["session"]) == (1, 2, 1, "agent-a")
    rows = api.service.log.session("trace-1")
    assert [(r["seq"], r["caller"], r["outcome"], r["rule"]) for r in rows] == [
        (1, "agent-a", "allow", "allow"), (2, "agent-b", "deny", "default-deny")]
    assert all("input" not in r for r in rows) and rows[0]["digest"]
    assert api.service.log.verify("trace-1") == []


def test_a_dry_run_is_neither_recorded_nor_counted_toward_rate_limits(api):
    h = api.key("agent", "gate")  # refunds: at most 2 allowed calls per session (rate per run)
    for _ in range(3):
        dry = check(api, h, "refund", {"amount": 1}, session="s", dry_run=True)
        assert dry["decision"] == "allow" and dry["seq"] is None and dry["dry_run"] is True
    assert api.service.log.session("s") == []
    assert check(api, h, "refund", {"amount": 1}, session="s")["decision"] == "allow"
    assert check(api, h, "refund", {"amount": 2}, session="s")["decision"] == "allow"
    third = check(api, h, "refund", {"amount": 3}, session="s")
    assert (third["decision"], third["rule"]) == ("deny", "rate")
    explained = check(api, h, "refund", {"amount": 3}, session="s", dry_run=True)
    assert explained["rule"] == "rate"  # a dry run explains the limit it would hit
    assert [r["seq"] for r in api.service.log.session("s")] == [1, 2, 3]


def test_sensitive_values_do_not_reach_the_recorded_reason(api):
    h = api.key("agent", "gate")
    card = "4111-1111-1111-1111"
    r = check(api, h, "refund", {"amount": card, "card": card})  # the schema names the value
    assert r["decision"] == "deny" and card not in r["reason"] and REDACTED in r["reason"]
    (row,) = api.service.log.session("agent")
    assert card not in str(row)
    # a value shorter than 4 characters (a CVV) is redacted where the reason quotes it (breaker finding)
    short = check(api, h, "refund", {"amount": "737", "card": "737"}, session="cvv")
    assert short["decision"] == "deny" and "737" not in short["reason"] and REDACTED in short["reason"]
    rows = api.service.log.session("cvv")  # the reason: a digest or a timestamp may hold "737" by chance
    assert rows and all("737" not in r["reason"] and REDACTED in r["reason"] for r in rows)


def test_a_recorded_check_is_one_write_transaction_on_a_sql_store(api):
    import sqlalchemy as sa

    h = api.key("agent", "gate")
    api.client.post("/v1/gate/check", json={"tool": "refund", "input": {"amount": 1}}, headers=h)  # warm
    statements, pooled = [], []
    api.service.__dict__["_gate_conn"].set_trace_callback(statements.append)  # the gate's own connection

    def count(conn):
        pooled.append(1)

    sa.event.listen(api.store.engine, "commit", count)
    try:
        r = api.client.post("/v1/gate/check", json={"tool": "refund", "input": {"amount": 2}, "session": "s1"},
                            headers=h)
    finally:
        sa.event.remove(api.store.engine, "commit", count)
    assert r.status_code == 200 and r.json()["decision"] == "allow" and r.json()["seq"] == 1
    writes = [q.split()[0] for q in statements]
    # the gate log's count-and-record and the service log row, together: one BEGIN ... COMMIT
    assert writes.count("BEGIN") == 1 and writes.count("COMMIT") == 1 and pooled == []
    inside = statements[writes.index("BEGIN"):writes.index("COMMIT")]
    assert sum("INSERT INTO flowctl_gate_log" in q for q in inside) == 1
    assert sum("INSERT INTO flowctl_service_log" in q for q in inside) == 1
    assert len(api.service.log.session("s1")) == 1


def test_checks_arriving_together_are_written_in_one_transaction_each_undone_alone(api):
    """Concurrent requests are answered in one turn of the event loop and one transaction; a check
    that fails inside it (here: a bug injected into the second one) is rolled back to its savepoint,
    and the others are kept."""
    from flowctl.server import gatecheck

    h = api.key("agent", "gate")
    api.client.post("/v1/gate/check", json={"tool": "refund", "input": {"amount": 1}}, headers=h)  # warm
    statements = []
    api.service.__dict__["_gate_conn"].set_trace_callback(statements.append)
    real = gatecheck._check
    calls = []

    def second_fails(service, caller, tool, tool_input, session, dry_run, conn):
        calls.append(session)
        answer = real(service, caller, tool, tool_input, session, dry_run, conn)  # written, then a bug
        if session == "b":
            raise RuntimeError("a bug after the writes")
        return answer

    gatecheck._check = second_fails
    try:
        rs = api.client.gather([("POST", "/v1/gate/check", {"json": {"tool": "refund", "input": {"amount": 2},
                                                                       "session": s}, "headers": h})
                                for s in ("a", "b", "c")])
    finally:
        gatecheck._check = real
    assert calls == ["a", "b", "c"]
    assert [r.status_code for r in rs] == [200, 500, 200]
    assert [q.split()[0] for q in statements].count("COMMIT") == 1
    assert [len(api.service.log.session(s)) for s in ("a", "b", "c")] == [1, 0, 1]
    assert api.store.gate_count("run_id", "gate:agent:b", "refund", 0) == 0  # nothing of b counted


def test_a_session_named_like_a_run_or_another_keys_session_spends_only_its_own_budget(api):
    # (break-it finding: a gate-only key using a real run's id as its session spent that run's budget)
    a, b = api.key("agent-a", "gate"), api.key("agent-b", "gate")
    assert [check(api, a, "refund", {"amount": i}, session="run-1")["decision"] for i in (1, 2, 3)] == [
        "allow", "allow", "deny"]  # refunds: 2 per run (here: per key and session)
    assert api.store.gate_count("run_id", "run-1", "refund", 0) == 0  # the run "run-1" was not charged
    assert check(api, b, "refund", {"amount": 1}, session="run-1")["decision"] == "allow"  # b's own budget


def test_without_a_key_a_check_is_401_whatever_its_body_and_the_refusal_is_recorded(api):
    """The gate route authenticates before it validates the body: a caller without a key learns
    nothing about what the endpoint accepts, and is counted as refused."""
    api.key("agent", "gate")
    for body in ({"tool": 7}, {"input": {}}, {}):
        r = api.client.post("/v1/gate/check", json=body)
        assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED", r.text
    rows = api.service.log.session("access")
    assert [(r["outcome"], r["data"]["route"]) for r in rows] == [("unauthorized", "/v1/gate/check")]
    assert [r["data"]["count"] for r in api.service.refusals.flush()] == [2]


def test_a_recorded_check_waits_for_the_process_s_write_lock_before_its_transaction(api):
    """Concurrent checks on SQLite queue on one lock (not on SQLite's polling busy handler): a check
    arriving while another writer holds it records nothing until that writer is done, then
    takes the session's next number."""
    import threading

    from flowctl.server.auth import Caller
    from flowctl.server.gatecheck import check as gate_check
    from support.interleave import WatchedLock

    caller, done = Caller("agent", ("gate",), "k"), []
    watched = api.store.__dict__["_service_write_lock"] = WatchedLock()
    with watched.lock:
        t = threading.Thread(target=lambda: done.append(
            gate_check(api.service, caller, "refund", {"amount": 10}, "s1", False)["seq"]))
        t.start()
        assert watched.waiting.wait(10)
        assert api.service.log.session("s1") == [] and done == []
    t.join(10)
    assert done == [1] and [r["outcome"] for r in api.service.log.session("s1")] == ["allow"]


def test_a_check_meeting_a_held_write_lock_is_answered_by_the_lane_once_it_is_free(api):
    """The event loop never waits: a check arriving while another thread holds the write lock is
    handed to the gate's lane, which waits for the lock and answers with the session's next number."""
    import threading

    from support.interleave import WatchedLock

    h = api.key("agent", "gate")
    watched = api.store.__dict__["_service_write_lock"] = WatchedLock()
    answers = []
    with watched.lock:
        t = threading.Thread(target=lambda: answers.append(api.client.post(
            "/v1/gate/check", json={"tool": "refund", "input": {"amount": 3}, "session": "s1"}, headers=h)))
        t.start()
        assert watched.waiting.wait(10)  # the lane's wait: the inline try gave up without waiting
        assert api.service.log.session("s1") == [] and answers == []
    t.join(10)
    assert answers[0].status_code == 200 and answers[0].json()["seq"] == 1
    assert [r["outcome"] for r in api.service.log.session("s1")] == ["allow"]


def test_a_check_meeting_another_process_s_write_lock_is_answered_by_the_lane(api):
    """Another process holding SQLite's write lock (a worker's commit) sends the check to the lane,
    whose connection waits on SQLite's busy timeout; the answer comes once that writer commits."""
    import sqlite3
    import threading

    h = api.key("agent", "gate")
    api.client.post("/v1/gate/check", json={"tool": "refund", "input": {"amount": 1}}, headers=h)  # warm
    other = sqlite3.connect(api.store.url.split("///", 1)[1], isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    waited = threading.Event()
    api.service.__dict__["_gate_conn"].set_trace_callback(
        lambda q: waited.set() if q.startswith("PRAGMA busy_timeout=3") else None)  # the lane may wait
    answers = []
    t = threading.Thread(target=lambda: answers.append(api.client.post(
        "/v1/gate/check", json={"tool": "refund", "input": {"amount": 4}, "session": "s2"}, headers=h)))
    t.start()
    assert waited.wait(10)
    assert answers == []
    other.execute("COMMIT")
    other.close()
    t.join(30)
    assert answers[0].status_code == 200 and answers[0].json()["seq"] == 1


def test_the_gate_lane_hands_queued_jobs_to_their_handler_on_its_one_thread_and_errors_to_their_own_caller():
    import asyncio
    import threading

    from flowctl.server.lane import Lane

    seen = []

    def handler(jobs):  # the thread it runs on, and each job's answer: an exception for "bad"
        seen.append((threading.current_thread().name, list(jobs)))
        return [ValueError(job) if job == "bad" else job.upper() for job in jobs]

    async def three():
        return await asyncio.gather(lane.batch(handler, "a"), lane.batch(handler, "bad"), lane.batch(handler, "c"),
                                    return_exceptions=True)

    lane = Lane(object())  # a SQLite or memory store: one thread of its own
    try:
        a, bad, c = asyncio.run(three())
        assert (a, c) == ("A", "C") and isinstance(bad, ValueError) and str(bad) == "bad"
        names = {name for name, _ in seen}
        assert len(names) == 1 and names.pop().startswith("flowctl-gate")
        assert sorted(job for _, jobs in seen for job in jobs) == ["a", "bad", "c"]  # each job once
    finally:
        lane.close()
