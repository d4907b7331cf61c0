"""The run and review endpoints (flowctl.server.app, flowctl.server.views): sensitive values never
leave in plaintext, paging is stable, submit/cancel/decide act through the engine and record who did."""
from __future__ import annotations

import contextlib

import json
import socket
import threading
import time

import httpx
import uvicorn

from flowctl.store.apikeys import keys_of
from server.conftest import _Client

CARD = "4111-2222-3333-4444"


def paused_run(api, amount=10):
    result = api.service.engine.run("charge", {"amount": amount, "card": CARD})
    assert result.status == "paused", result
    return result


def test_a_run_and_its_events_never_show_a_sensitive_value(api):
    run = paused_run(api)
    h = api.key("dash", "runs:read")
    r = api.client.get(f"/v1/runs/{run.run_id}", headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "paused" and body["input"] == {"amount": 10, "card": "***redacted***"}
    assert body["review"]["state"] == "ask" and body["review"]["decisions"] == ["approve", "reject"]
    assert "cursor" not in body and "token" not in r.text
    events = api.client.get(f"/v1/runs/{run.run_id[:8]}/events", headers=h).json()["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert "tool_succeeded" in [e["type"] for e in events]
    for text in (r.text, json.dumps(events), api.client.get("/v1/runs", headers=h).text,
                 api.client.get("/v1/reviews", headers=api.key("rev", "reviews")).text):
        assert CARD not in text


def test_runs_are_listed_newest_first_page_by_page(api):
    h = api.key("ops", "runs:read", "runs:write")
    ids = [api.client.post("/v1/runs", json={"flow": "charge", "input": {"amount": i, "card": CARD}}, headers=h)
           .json()["run_id"] for i in range(5)]
    seen, cursor = [], None
    while True:
        page = api.client.get("/v1/runs", params={"limit": 2, **({"cursor": cursor} if cursor else {})}, headers=h).json()
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    queued = api.client.get("/v1/runs", params={"status": "queued", "flow": "charge"}, headers=h).json()["runs"]
    assert len(queued) == 5 and api.client.get("/v1/runs", params={"flow": "other"}, headers=h).json()["runs"] == []


def test_a_submitted_run_is_queued_for_workers_and_can_be_cancelled(api):
    h = api.key("ops", "runs:read", "runs:write")
    r = api.client.post("/v1/runs", json={"flow": "charge", "input": {"amount": 1, "card": CARD}}, headers=h)
    assert r.status_code == 201 and r.json()["status"] == "queued"
    run_id = r.json()["run_id"]
    assert api.store.get_run(run_id)["status"] == "queued"
    bad = api.client.post("/v1/runs", json={"flow": "nope"}, headers=h)  # located in the request (was a bare 400)
    assert bad.status_code == 422 and (bad.json()["code"], bad.json()["pointer"]) == ("USAGE", "/body/flow")
    extra = api.client.post("/v1/runs", json={"flow": "charge", "params": {"zz": 1}}, headers=h)
    assert extra.status_code == 422 and extra.json()["pointer"] == "/body/params" and "'zz'" in extra.json()["detail"]
    cancelled = api.client.post(f"/v1/runs/{run_id}/cancel", json={"compensate": True}, headers=h)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    events = api.store.events(run_id)
    assert any(e["type"] == "run_cancelled" and "key:ops" in json.dumps(e["data"]) for e in events), events
    again = api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert again.status_code == 409 and again.json()["code"] == "USAGE"


def test_a_review_is_decided_over_http_with_its_token_or_by_a_reviewer(api):
    h = api.key("alice", "reviews")
    with_token = paused_run(api)
    pending = api.client.get("/v1/reviews", headers=h).json()
    assert [p["run_id"] for p in pending] == [with_token.run_id] and pending[0]["state"] == "ask"
    wrong = api.client.post(f"/v1/reviews/{with_token.run_id}/decide", json={"decision": "approve", "token": "nope"},
                            headers=h)
    assert 400 <= wrong.status_code < 500 and wrong.headers["content-type"] == "application/problem+json"
    ok = api.client.post(f"/v1/reviews/{with_token.run_id}/decide",
                         json={"decision": "approve", "token": with_token.review["token"]}, headers=h)
    assert ok.status_code == 200 and ok.json()["status"] == "succeeded", ok.text
    by_reviewer = paused_run(api, amount=20)
    for body in ({"decision": "maybe"}, {"decision": "maybe", "token": by_reviewer.review["token"]}):
        # a decision the review does not offer is the request's fault, located (was 409)
        maybe = api.client.post(f"/v1/reviews/{by_reviewer.run_id}/decide", json=body, headers=h)
        assert maybe.status_code == 422, maybe.text
        assert (maybe.json()["code"], maybe.json()["pointer"]) == ("REVIEW_DECISION_INVALID", "/body/decision")
    done = api.client.post(f"/v1/reviews/{by_reviewer.run_id}/decide", json={"decision": "reject"}, headers=h)
    assert done.status_code == 200 and done.json()["status"] in ("succeeded", "failed"), done.text
    decided = [e for e in api.store.events(by_reviewer.run_id) if e["type"] == "review_decided"]
    assert decided and "key:alice" in json.dumps(decided[0]["data"])
    assert [r["kind"] for r in api.service.log.session("alice")] == ["review_decided", "review_decided"]
    assert api.client.get("/v1/reviews", headers=h).json() == []


def test_the_app_serves_real_http_on_uvicorn(api):
    h = api.key("agent", "gate")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(api.asgi, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/healthz").json()["status"] == "ok"
        r = httpx.post(f"{base}/v1/gate/check", json={"tool": "refund", "input": {"amount": 5}}, headers=h)
        assert r.status_code == 200 and r.json()["decision"] == "allow"
        assert httpx.post(f"{base}/v1/gate/check", json={"tool": "refund"}).status_code == 401
        assert "/v1/gate/check" in httpx.get(f"{base}/openapi.json").json()["paths"]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
    assert not thread.is_alive()


def test_decide_with_data_its_review_schema_rejects_is_a_422_problem_pointing_into_the_body(tmp_path):
    from conftest import _Client
    from support.consolekit import Console

    console = Console(tmp_path)  # its grant review has a data_schema (limit: an integer, 1 to 1000)
    try:
        client = _Client(console.asgi)
        h = {"Authorization": f"Bearer {console.key('rev', 'reviews')}"}
        paused = console.engine.run("grant", {"customer": "Acme"})
        seq = console.store.get_run(paused.run_id)["last_seq"]
        url = f"/v1/reviews/{paused.run_id}/decide"
        for body, at in [({"decision": "approve", "data": {"limit": 5000}}, "/body/data/limit"),
                         ({"decision": "approve"}, "/body/data"),  # no data is checked as {}: limit is required
                         ({"decision": "approve", "token": paused.review["token"], "data": {"limit": "5"}},
                          "/body/data/limit")]:
            r = client.post(url, json=body, headers=h)
            problem = r.json()
            assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
            assert problem["code"] == "REVIEW_DATA_INVALID" and problem["pointer"] == at, problem
            assert problem["errors"] == [{"pointer": at, "detail": problem["detail"]}] and problem["hint"]
        row = console.store.get_run(paused.run_id)
        assert row["status"] == "paused" and row["last_seq"] == seq  # not even a token was issued for it
        ok = client.post(url, json={"decision": "approve", "data": {"limit": 5}}, headers=h)
        assert ok.status_code == 200 and ok.json()["status"] == "succeeded", ok.text
    finally:
        console.close()


def test_a_run_is_paused_at_its_next_checkpoint_and_resumed_over_http(api):
    h = api.key("ops", "runs:read", "runs:write")
    run = paused_run(api)  # for review: the pause comes at the first checkpoint after the decision
    assert api.client.post(f"/v1/runs/{run.run_id}/pause", json={"reason": ""}, headers=h).status_code == 422
    reader = api.client.post(f"/v1/runs/{run.run_id}/pause", json={"reason": "r"}, headers=api.key("dash", "runs:read"))
    assert reader.status_code == 403
    r = api.client.post(f"/v1/runs/{run.run_id}/pause", json={"reason": "hold the refund"}, headers=h)
    assert r.status_code == 200, r.text
    assert (r.json()["new"], r.json()["by"], r.json()["status"]) == (True, "key:ops", "paused")
    again = api.client.post(f"/v1/runs/{run.run_id}/pause", json={"reason": "twice"}, headers=h)
    assert again.json()["new"] is False and again.json()["reason"] == "hold the refund"  # the first stands
    api.service.engine.resume(run.run_id, token=run.review["token"], decision="approve", by="alice")
    assert api.store.get_run(run.run_id)["status"] == "paused"
    resumed = api.client.post(f"/v1/runs/{run.run_id}/resume", headers=h)
    assert resumed.status_code == 200 and resumed.json()["status"] == "succeeded"
    events = api.store.events(run.run_id)
    assert [e["data"]["by"] for e in events if e["type"] == "run_resumed" and e["data"].get("reason") == "operator"] \
        == ["key:ops"]
    ended = api.client.post(f"/v1/runs/{run.run_id}/pause", json={"reason": "late"}, headers=h)
    assert ended.status_code == 409 and ended.json()["code"] == "USAGE"


NOT_JSON = [(b'{"note": "\\ud800"}', "/note", "lone surrogate"), (b'{"refund_cap": NaN}', "/refund_cap", "NaN is not JSON"),
            (b'{"a": [1, -Infinity]}', "/a/1", "-Infinity is not JSON")]


def test_decide_with_data_json_cannot_hold_is_a_422_and_the_run_stays_readable(api):
    # (break-it: "\ud800" was recorded, then GET /events was a 500; NaN was recorded as NaN)
    h = {**api.key("alice", "reviews", "runs:read"), "Content-Type": "application/json"}
    run = paused_run(api)
    seq = api.store.get_run(run.run_id)["last_seq"]
    for data, at, why in NOT_JSON:
        for token in (b"", b', "token": "' + run.review["token"].encode() + b'"'):
            r = api.client.post(f"/v1/reviews/{run.run_id}/decide", headers=h,
                                content=b'{"decision": "approve", "data": ' + data + token + b"}")
            assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
            assert r.json()["pointer"] == "/body/data" + at and why in r.json()["detail"], r.text
    assert api.store.get_run(run.run_id)["last_seq"] == seq  # nothing recorded, not even a token
    assert api.client.get(f"/v1/runs/{run.run_id}/events", headers=h).status_code == 200
    ok = api.client.post(f"/v1/reviews/{run.run_id}/decide", json={"decision": "approve", "data": {"n": 1}}, headers=h)
    assert ok.status_code == 200 and ok.json()["status"] == "succeeded", ok.text


def test_every_free_form_field_of_a_request_refuses_what_json_cannot_hold(api):
    h = {**api.key("all", "gate", "runs:write", "invoke:refund"), "Content-Type": "application/json"}
    sid = api.client.post("/v1/sessions", json={"name": "t"}, headers=h).json()["session"]
    seq = api.store.get_run(sid)["last_seq"]
    doors = [("/v1/gate/check", b'{"tool": "refund", "input": %s}', "/body/input"),
             ("/v1/runs", b'{"flow": "charge", "input": %s}', "/body/input"),
             ("/v1/runs", b'{"flow": "charge", "params": %s}', "/body/params"),
             (f"/v1/sessions/{sid}/tools/refund/invoke", b'{"input": %s}', "/body/input")]
    for url, body, field in doors:
        for data, at, why in NOT_JSON:
            r = api.client.post(url, content=body % data, headers=h)
            assert r.status_code == 422 and r.json()["code"] == "INVALID_REQUEST", (url, r.text)
            assert r.json()["pointer"] == field + at and why in r.json()["detail"], (url, r.text)
    assert [r["id"] for r in api.store.list_runs(limit=0)] == [sid]  # no run submitted, no gate decision's run
    assert api.store.get_run(sid)["last_seq"] == seq  # no call made in the session


def test_the_answer_of_a_decide_that_ran_the_run_into_an_error_quoting_a_secret_redacts_it(tmp_path):
    """(breaker finding: the outcome of decide/resume/cancel was the engine's in-memory result,
    redacted by field name only: a tool's error message quoting the card and the CVV it was given
    came back in plaintext, though the stored run and GET /v1/runs/{id} had it redacted)"""
    with _declining_app(tmp_path) as (asgi, store):
        _, key = keys_of(store).create("rev", ["reviews"])
        run = asgi.app.state.service.engine.run("review_then_charge", {"card": CARD, "cvv": "737", "decline": True})
        assert run.status == "paused"
        r = _Client(asgi).post(f"/v1/reviews/{run.run_id}/decide", json={"decision": "approve"},
                               headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.json()["status"] == "failed", r.text
        assert r.json()["error"]["type"] == "ValueError" and "declined" in r.json()["error"]["message"]
        assert CARD not in r.text and "737" not in r.json()["error"]["message"], r.text  # (a run id may hold 737)


def test_the_answer_of_a_cancel_whose_compensation_failed_quoting_a_secret_redacts_its_residue(tmp_path):
    """(breaker finding: the residue of POST /v1/runs/{id}/cancel was the in-memory result's: the
    failed compensation's message quoting the card and the CVV came back in plaintext)"""
    with _declining_app(tmp_path) as (asgi, store):
        _, key = keys_of(store).create("ops", ["runs:write"])
        run = asgi.app.state.service.engine.run("charge_then_review", {"card": CARD, "cvv": "737", "undo_fails": True})
        assert run.status == "paused"
        r = _Client(asgi).post(f"/v1/runs/{run.run_id}/cancel", json={"compensate": True},
                               headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
        (residue,) = r.json()["residue"]
        assert "cannot refund card" in residue["error"]
        assert CARD not in r.text and "737" not in residue["error"], r.text


@contextlib.contextmanager
def _declining_app(tmp_path):
    """``(asgi app, store)`` of the declining project (support.serverkit: its tools quote the card
    and the CVV in what they say) on a fresh SQLite store."""
    import flowctl
    from flowctl.server import create_app
    from flowctl.store.sql import open_store
    from support.serverkit import make_declining_project

    store = open_store(f"sqlite:///{tmp_path}/flowctl.db", create=True)
    try:
        yield create_app(flowctl.load_project(make_declining_project(tmp_path)), store), store
    finally:
        store.close()
