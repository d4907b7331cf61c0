"""Break-it findings on the gate's front (flowctl.server.gatefront): each test is one finding."""
from __future__ import annotations

import threading

import pytest

from support.interleave import WatchedLock
from support.pg import pg_url  # noqa: F401 - fixture


def test_a_check_handed_to_the_lane_takes_one_token_of_the_key_s_rate_not_two(make_api):
    """(break-it finding: a check authorized on the event loop and then handed to the lane, because
    the write lock was held, was authorized again there and took a second token: under a worker's
    writes a key got 429 at half its rate.) Every request takes one token."""
    api = make_api(rate=0.001, burst=3)
    h = api.key("agent", "gate")
    watched = api.store.__dict__["_service_write_lock"] = WatchedLock()
    answers = []
    calls = [("POST", "/v1/gate/check", {"json": {"tool": "get_order", "input": {"order_id": str(i)}}, "headers": h})
             for i in range(3)]
    with watched.lock:
        t = threading.Thread(target=lambda: answers.extend(api.client.gather(calls)))
        t.start()
        assert watched.waiting.wait(10)  # the inline try gave up; the lane waits for the lock
    t.join(10)
    assert [r.status_code for r in answers] == [200, 200, 200], [r.text for r in answers]
    assert [r["seq"] for r in api.service.log.session("agent")] == [1, 2, 3]
    assert api.service.log.session("access") == []  # nothing refused


def test_a_number_too_long_to_read_is_a_400_problem_not_a_500(api):
    """(break-it finding: an integer of more than 4,300 digits made json.loads raise ValueError, a
    500 with a logged traceback; FastAPI's endpoints answer it 400 INVALID_REQUEST.)"""
    h = {**api.key("agent", "gate"), "Content-Type": "application/json"}
    long = b'{"tool": "refund", "input": {"amount": ' + b"9" * 5000 + b"}}"
    for path in ("/v1/gate/check", "/v1/sessions"):
        r = api.client.post(path, content=long, headers=h)
        assert r.status_code == 400 and r.json()["code"] == "INVALID_REQUEST", (path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
    assert api.service.log.session("agent") == []


def test_a_body_without_a_content_type_is_refused_as_on_every_other_endpoint(api):
    """(break-it finding: the front read a body sent without Content-Type as JSON; FastAPI's
    endpoints, and this one before the front, refuse it: 422 at /body.)"""
    h = api.key("agent", "gate")
    body = b'{"tool": "get_order", "input": {"order_id": "1"}}'
    for content_type in (None, ""):
        headers = h if content_type is None else {**h, "Content-Type": content_type}
        gate = api.client.post("/v1/gate/check", content=body, headers=headers)
        other = api.client.post("/v1/sessions", content=b'{"name": "x"}', headers=headers)
        assert (gate.status_code, gate.json()["pointer"]) == (other.status_code, other.json()["pointer"]) == (
            422, "/body"), (gate.text, other.text)
    assert api.service.log.session("agent") == []


def test_a_body_that_is_json_but_not_an_object_is_refused_as_on_every_other_endpoint(api):
    """(break-it finding: the front validated a JSON string, array, number or null body with the
    model's own check and answered "Input should be a valid dictionary or instance of GateCheck",
    naming a class of the server; FastAPI's endpoints answer every such body "… valid dictionary
    or object to extract fields from".)"""
    h = {**api.key("agent", "gate", "runs:write"), "Content-Type": "application/json"}
    for body in (b'"refund"', b"[1]", b"[]", b"null", b"5", b"true", b'""'):
        gate = api.client.post("/v1/gate/check", content=body, headers=h)
        other = api.client.post("/v1/runs", content=body, headers=h)
        assert gate.status_code == other.status_code == 422, (body, gate.text, other.text)
        assert {k: gate.json()[k] for k in ("code", "pointer", "detail", "errors")} == {
            k: other.json()[k] for k in ("code", "pointer", "detail", "errors")}, body
    assert api.service.log.session("agent") == []


def test_a_denial_quoting_a_huge_input_is_recorded_and_answered_with_a_bounded_reason(api):
    """(break-it finding: an input its contract's schema rejects is denied with the schema's
    message, which quotes the value: a 900 KB string sent as ``amount`` was written whole into the
    service log's reason — which is to keep the input's digest, not the input — and sent back, so
    each denied check added up to the body limit, 1 MiB, to the store.) The reason is cut to
    REASON_CHARS; it still says where and why, and the digest is the whole input's."""
    from flowctl.gate.policy import input_digest
    from flowctl.server.gatecheck import REASON_CHARS

    h = api.key("agent", "gate")
    tool_input = {"amount": "A" * 900_000}
    r = api.client.post("/v1/gate/check", json={"tool": "refund", "input": tool_input}, headers=h)
    assert r.status_code == 200 and r.json()["rule"] == "input-schema", r.text[:300]
    (row,) = api.service.log.session("agent")
    assert len(r.json()["reason"]) <= REASON_CHARS and row["reason"] == r.json()["reason"]
    assert "at /amount" in row["reason"] and row["reason"].endswith("…")
    assert row["digest"] == input_digest(tool_input)
    assert len(r.content) < 2 * REASON_CHARS


def test_a_key_past_its_rate_cannot_make_the_server_write_a_row_per_request(make_api):
    """(break-it finding: each 429 of a recognised key was written to the service log in a
    transaction of its own, on the write lock the gate checks queue on, and took no token: a key
    past its rate made the server commit once per request at whatever rate it sent, more than
    the allowed requests the limit was to bound.) A key's 429s are counted per window as the
    requests without a key are: the first written at once, the rest as one row with the count."""
    api = make_api(rate=0.001, burst=1)
    h = api.key("agent", "gate")
    calls = [("POST", "/v1/gate/check", {"json": {"tool": "get_order", "input": {"order_id": "1"}, "dry_run": True},
                                         "headers": h})] * 40
    assert sorted(r.status_code for r in api.client.gather(calls)) == [200] + [429] * 39
    rows = api.service.log.session("access")
    assert [(r["caller"], r["outcome"]) for r in rows] == [("agent", "rate_limited")]
    (window,) = api.service.refusals.flush()
    assert (window["caller"], window["outcome"], window["data"]["count"]) == ("agent", "rate_limited", 38)


def test_a_key_without_the_scope_cannot_make_the_server_write_a_row_per_request(make_api):
    """(break-it finding, the 403 side of the one above: a refusal for a missing scope took no token
    and was written each, so a key holding any scope — a dashboard's runs:read — made the server
    commit a row per request at whatever rate it sent.) A 403 takes a token of the key's rate like
    every request of a recognised key; past the rate it is a 429, counted per window."""
    api = make_api(rate=0.001, burst=1)
    reader = api.key("dashboard", "runs:read")
    calls = [("POST", "/v1/gate/check", {"json": {"tool": "get_order", "input": {}}, "headers": reader})] * 40
    assert sorted(r.status_code for r in api.client.gather(calls)) == [403] + [429] * 39
    rows = api.service.log.session("access")
    assert [(r["caller"], r["outcome"]) for r in rows] == [("dashboard", "forbidden"), ("dashboard", "rate_limited")]
    (window,) = api.service.refusals.flush()
    assert (window["caller"], window["outcome"], window["data"]["count"]) == ("dashboard", "rate_limited", 38)


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_tool_reference_too_long_for_any_contract_is_a_422_not_a_store_failure(make_api, store, request):
    """(break-it finding: the model took a reference of up to 261 characters — a 200-character id,
    ``@`` and a 60-character range — while a contract id has at most 120 and the service log's
    ``tool`` column holds 200: on PostgreSQL such a check of an unknown tool was answered 503
    STORE and its denial not recorded.) No contract can match it: refused at /body/tool, on
    every store alike, nothing recorded."""
    api = make_api(url=request.getfixturevalue("pg_url")) if store == "postgresql" else make_api()
    h = api.key("agent", "gate")
    for tool in ("a" * 200 + "@" + "1" * 60, "a" * 121, "a" * 121 + "@^1"):
        r = api.client.post("/v1/gate/check", json={"tool": tool, "input": {}}, headers=h)
        assert (r.status_code, r.json()["pointer"]) == (422, "/body/tool"), r.text[:300]
    longest = "a" * 120 + "@" + "1" * 60  # the longest a contract could answer: denied and recorded
    r = api.client.post("/v1/gate/check", json={"tool": longest, "input": {}}, headers=h)
    assert (r.status_code, r.json()["rule"]) == (200, "unknown-tool"), r.text[:300]
    assert [row["tool"] for row in api.service.log.session("agent")] == [longest]


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_reason_quoting_a_nul_is_recorded_on_every_store(tmp_path, store, request, monkeypatch):
    """(break-it finding: a schema's message names where it failed by the input's own keys, as
    they are: an input key holding NUL (``"\\u0000"``, valid JSON) put a NUL byte in the reason,
    which PostgreSQL's text cannot hold: the check was answered 503 STORE and its denial not
    recorded.) The reason holds the NUL as JSON writes it (``\\u0000``), on every store alike."""
    import support.serverkit as kit
    from conftest import Api
    from support.enginekit import contract

    monkeypatch.setattr(kit, "FILES", {**kit.FILES, **contract("tag", "get_order", extra=(
        "input_schema:\n  type: object\n  additionalProperties: {type: string}\n"))})
    api = Api(tmp_path, url=request.getfixturevalue("pg_url") if store == "postgresql" else None)
    try:
        h = api.key("agent", "gate")
        r = api.client.post("/v1/gate/check", json={"tool": "tag", "input": {"a\u0000b": 1}}, headers=h)
        assert (r.status_code, r.json()["rule"]) == (200, "input-schema"), r.text
        assert "at /a\\u0000b: 1 is not of type 'string'" in r.json()["reason"]
        (row,) = api.service.log.session("agent")
        assert row["reason"] == r.json()["reason"] and "\x00" not in row["reason"]
        assert api.service.log.verify("agent") == []
    finally:
        api.close()


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_refusal_naming_a_nul_from_the_url_is_answered_403_and_recorded(make_api, store, request):
    """(break-it finding: the invoke route's scope names the URL's tool before the path is
    validated, so ``…/tools/a%00b/invoke`` made a refusal whose reason held NUL: on PostgreSQL
    its append failed, the request was answered 500 and the 403 not recorded.)"""
    api = make_api(url=request.getfixturevalue("pg_url")) if store == "postgresql" else make_api()
    h = api.key("agent", "gate")
    r = api.client.post("/v1/sessions/abcd/tools/a%00b/invoke", json={"input": {}}, headers=h)
    assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN"), r.text
    (row,) = api.service.log.session("access")
    assert (row["caller"], row["outcome"]) == ("agent", "forbidden") and "invoke:a\\u0000b" in row["reason"]


def test_concurrent_checks_of_one_session_on_postgresql_are_each_recorded_and_numbered_once(make_api, pg_url):
    """(break-it finding: on PostgreSQL each check is a transaction of its own, committed in
    parallel; those of one session all read the same last seq, and all but one lost the insert
    of the next and retried — 5 tries, so of 32 concurrent checks of one session 13 were answered
    503 STORE, not recorded.) Appends of one session queue on a lock of that session: every
    check is answered and recorded, numbered 1…n, the chain intact."""
    api = make_api(url=pg_url, rate=1e6, burst=10**6)
    h = api.key("agent", "gate")
    calls = [("POST", "/v1/gate/check", {"json": {"tool": "get_order", "input": {"order_id": "1"}, "session": "t-1"},
                                         "headers": h})] * 32
    answers = api.client.gather(calls)
    assert [r.status_code for r in answers] == [200] * 32, [r.text for r in answers if r.status_code != 200][:1]
    assert sorted(r.json()["seq"] for r in answers) == list(range(1, 33))
    assert [row["seq"] for row in api.service.log.session("t-1")] == list(range(1, 33))
    assert api.service.log.verify("t-1") == []


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_store_failure_reading_the_keys_is_a_503_store_problem_on_every_endpoint(make_api, store, request):
    """(break-it finding: the key lookup's database errors were not translated: the driver's own
    exception (SQLite's raw connection; SQLAlchemy's on PostgreSQL) reached the server as a bug,
    so every endpoint answered 500 INTERNAL, with a logged traceback, while the store was failing
    — not 503 STORE, the store's problem every other read and write answers.)"""
    api = make_api(url=request.getfixturevalue("pg_url")) if store == "postgresql" else make_api()
    h = api.key("agent", "gate", "runs:read")
    with api.store.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE flowctl_api_keys RENAME TO flowctl_api_keys_gone")  # the database lost it
    try:
        gate = api.client.post("/v1/gate/check", json={"tool": "get_order", "input": {"order_id": "1"}}, headers=h)
        runs = api.client.get("/v1/runs", headers=h)
        for r in (gate, runs):
            assert (r.status_code, r.json()["code"]) == (503, "STORE"), r.text
    finally:
        with api.store.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE flowctl_api_keys_gone RENAME TO flowctl_api_keys")


def test_a_check_holding_thousands_of_sensitive_values_costs_a_bounded_redaction(api, monkeypatch):
    """(break-it finding: the reason was redacted by learning every value under a sensitive name,
    each with its eight escaped forms, and matching all of them at once: 100,000 card numbers in
    one 0.9 MB body took 4 s — on the event loop, where the front answers, so every request of
    every client stalled meanwhile.) Past MAX_REDACTED distinct values the reason is withheld,
    never redacted value by value: nothing sensitive is said, the decision and rule still are."""
    import flowctl.engine.sensitive as sensitive
    from flowctl.server.gatecheck import MAX_REDACTED

    formed = []
    real = sensitive.text_forms
    monkeypatch.setattr(sensitive, "text_forms", lambda v: formed.append(v) or real(v))
    h = api.key("agent", "gate")
    cards = [f"4111-{i:08d}" for i in range(MAX_REDACTED * 5)]
    r = api.client.post("/v1/gate/check", json={"tool": "refund", "input": {"amount": "x", "card": cards}}, headers=h)
    assert (r.status_code, r.json()["rule"]) == (200, "input-schema"), r.text[:300]
    assert len(formed) <= MAX_REDACTED
    reason = r.json()["reason"]
    assert "withheld" in reason and not any(c in reason for c in cards[:50])
    assert api.service.log.session("agent")[0]["reason"] == reason
    formed.clear()  # a few: redacted value by value, as always
    r = api.client.post("/v1/gate/check", json={"tool": "refund", "input": [{"card": c} for c in cards[:3]]}, headers=h)
    assert r.json()["rule"] == "input-schema" and "***redacted***" in r.json()["reason"] and len(formed) == 3
    assert not any(c in r.json()["reason"] for c in cards[:3])


def test_no_check_and_no_key_can_write_into_the_services_own_session(api):
    """``access`` holds the service's refusals: a check naming it is a 422 at /body/session, nothing
    recorded there, and no key may be named so (a key's default session is its name)."""
    import pytest

    from flowctl.errors import UsageError
    from flowctl.store.apikeys import keys_of

    h = api.key("agent", "gate")
    r = api.client.post("/v1/gate/check", json={"tool": "refund", "input": {"amount": 1}, "session": "access"}, headers=h)
    assert r.status_code == 422 and r.json()["pointer"] == "/body/session" and "service's own" in r.json()["detail"]
    assert [row["kind"] for row in api.service.log.session("access")] == []
    with pytest.raises(UsageError, match="reserved"):
        keys_of(api.store).create("access", ["gate"])


def test_a_large_check_is_answered_on_the_lane_not_on_the_event_loop(api, monkeypatch):
    """(break-it finding: a 1 MiB check was read, validated and redacted on the event loop, 0.1–0.4 s
    during which no other request was answered.) Bodies over INLINE_BODY go to the gate's lane."""
    from flowctl.server import gatefront

    real, seen = gatefront.answer_many, []

    def spy(service, jobs, inline=False):
        seen.append((inline, max(len(job[2]) for job in jobs)))
        return real(service, jobs, inline=inline)

    monkeypatch.setattr(gatefront, "answer_many", spy)
    h = api.key("agent", "gate")
    small = api.client.post("/v1/gate/check", json={"tool": "get_order", "input": {"order_id": "1"}}, headers=h)
    large = api.client.post("/v1/gate/check", json={"tool": "get_order", "input": {"order_id": "1" * gatefront.INLINE_BODY}},
                            headers=h)
    assert (small.status_code, large.status_code) == (200, 200), large.text[:300]
    assert [inline for inline, size in seen if size < gatefront.INLINE_BODY] == [True]
    assert [inline for inline, size in seen if size > gatefront.INLINE_BODY] == [False]
