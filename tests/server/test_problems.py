"""Every error is an RFC 9457 problem with a stable code; bad input is a 4xx, never a 500
(flowctl.server.problems, flowctl.server.guard)."""
from __future__ import annotations

import json
import random

import pytest

PROBLEM = "application/problem+json"


def is_problem(r, status, code):
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body = r.json()
    assert {"type", "title", "status", "detail", "code"} <= set(body) and body["status"] == status
    assert body["code"] == code, body
    return body


def test_malformed_json_is_a_400_problem(api):
    h = dict(api.key("agent", "gate"), **{"content-type": "application/json"})
    is_problem(api.client.post("/v1/gate/check", content=b'{"tool": ', headers=h), 400, "MALFORMED_JSON")


def test_wrong_types_are_a_422_problem_pointing_at_the_field(api):
    h = api.key("agent", "gate")
    body = is_problem(api.client.post("/v1/gate/check", json={"tool": "refund", "dry_run": "yes"}, headers=h),
                      422, "INVALID_REQUEST")
    assert body["pointer"] == "/body/dry_run"
    body = is_problem(api.client.post("/v1/gate/check", json={"tool": "x", "extra": 1}, headers=h), 422, "INVALID_REQUEST")
    assert body["pointer"] == "/body/extra"
    body = is_problem(api.client.post("/v1/gate/check", json={"tool": "../../etc"}, headers=h), 422, "INVALID_REQUEST")
    assert body["pointer"] == "/body/tool"
    body = is_problem(api.client.get("/v1/runs?limit=0", headers=api.key("r", "runs:read")), 422, "INVALID_REQUEST")
    assert body["pointer"] == "/query/limit"
    body = is_problem(api.client.get("/v1/runs?cursor=xyz", headers=api.key("r2", "runs:read")), 422, "INVALID_REQUEST")
    assert body["pointer"] == "/query/cursor"


def test_unknown_endpoints_methods_and_runs_are_problems(api):
    h = api.key("root", "admin")
    is_problem(api.client.get("/v1/nothing", headers=h), 404, "NOT_FOUND")
    is_problem(api.client.get("/v1/gate/check", headers=h), 405, "METHOD_NOT_ALLOWED")
    is_problem(api.client.get("/v1/runs/ffffffffffff", headers=h), 404, "RUN_NOT_FOUND")
    is_problem(api.client.post("/v1/runs/ffffffffffff/cancel", headers=h), 404, "RUN_NOT_FOUND")


def test_an_oversized_body_is_413_before_the_app_reads_it(make_api):
    api = make_api(max_body=1000)
    h = api.key("agent", "gate")
    big = json.dumps({"tool": "refund", "input": {"note": "x" * 2000}}).encode()
    is_problem(api.client.post("/v1/gate/check", content=big, headers=dict(h, **{"content-type": "application/json"})),
               413, "PAYLOAD_TOO_LARGE")

    async def chunks():  # no Content-Length: counted as it streams
        for _ in range(10):
            yield b"x" * 200

    is_problem(api.client.post("/v1/gate/check", content=chunks(), headers=h), 413, "PAYLOAD_TOO_LARGE")
    assert api.service.log.session("agent") == []


def test_a_bug_is_a_500_internal_problem_without_a_traceback(api, monkeypatch):
    from flowctl.server import gatecheck

    def broken(*a, **k):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(gatecheck, "_check", broken)  # a bug inside one check
    body = is_problem(api.client.post("/v1/gate/check", json={"tool": "refund"}, headers=api.key("agent", "gate")),
                      500, "INTERNAL")
    assert "secret internals" not in json.dumps(body) and "Traceback" not in json.dumps(body)


JUNK = [b"", b"null", b"[]", b"0", b'"x"', b"{", b"{}", b'{"tool": null}', b'{"tool": {"a": 1}}', b"\xff\xfe",
        b'{"tool": "refund", "input": 1e999}', b'{"decision": []}', b'{"flow": 5}', b'{"compensate": "no"}',
        b'{"tool": "' + b"a" * 300 + b'"}', b'{"tool": "refund", "session": "../x"}', b"[" * 500 + b"]" * 500,
        b'{"token": "", "decision": ""}', b'{"flow": "charge", "input": {"amount": "x"}}']
PATHS = [("POST", "/v1/gate/check"), ("POST", "/v1/runs"), ("POST", "/v1/runs/0000000000/cancel"),
         ("POST", "/v1/reviews/0000000000/decide"), ("GET", "/v1/runs"), ("GET", "/v1/runs/%00"),
         ("GET", "/v1/runs/x/events?after=-1"), ("GET", "/v1/runs?status=bogus&limit=abc"), ("GET", "/v1/reviews"),
         ("POST", "/healthz"), ("GET", "/v1/runs?cursor=" + "A" * 150)]


@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None])
def test_junk_on_every_endpoint_is_a_4xx_problem(api, content_type):
    h = api.key("root", "admin")
    if content_type:
        h["content-type"] = content_type
    rnd = random.Random(19)
    calls = [(m, p, {"content": body, "headers": h}) for m, p in PATHS for body in JUNK]
    calls += [(m, p, {"content": bytes(rnd.randrange(256) for _ in range(rnd.randrange(40))), "headers": h})
              for m, p in PATHS for _ in range(5)]
    for (method, path, _), r in zip(calls, api.client.gather(calls)):
        assert 400 <= r.status_code < 500 or r.status_code in (200, 201), (method, path, r.status_code, r.text)
        if r.status_code >= 400:
            assert r.headers["content-type"] == PROBLEM and r.json()["code"], (method, path, r.text)


def test_a_lone_surrogate_or_a_body_nested_too_deeply_is_a_400_problem_not_a_500(api):
    # (break-it findings: "\ud800" gave a 500 UnicodeEncodeError; 100k-deep JSON a RecursionError)
    h = api.key("agent", "gate")
    r = api.client.post("/v1/gate/check", content=b'{"tool": "refund", "input": {"note": "\\ud800"}}',
                        headers={**h, "Content-Type": "application/json"})
    assert r.status_code in (400, 422) and r.headers["content-type"].startswith("application/problem+json")
    deep = b'{"tool": "refund", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = api.client.post("/v1/gate/check", content=deep, headers={**h, "Content-Type": "application/json"})
    assert 400 <= r.status_code < 500 and r.headers["content-type"].startswith("application/problem+json")


def test_a_body_that_never_finishes_arriving_is_a_408_not_a_request_held_for_ever():
    """(breaker finding: a Content-Length larger than the body sent held the request, its handler
    and the connection with no end)"""
    import asyncio

    from flowctl.server.guard import Guard

    reached = []

    async def app(scope, receive, send):
        reached.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def _collect(sent):
        async def send(message):
            sent.append(message)
        return send

    async def ask(messages):
        sent, pending = [], list(messages)

        async def receive():
            if pending:
                return pending.pop(0)
            await asyncio.Event().wait()  # the rest of the body never comes

        scope = {"type": "http", "method": "POST", "path": "/v1/gate/check",
                 "headers": [(b"content-length", b"1000")]}
        await Guard(app, body_timeout=0.05)(scope, receive, _collect(sent))
        return sent

    stalled = asyncio.run(ask([{"type": "http.request", "body": b"{\"tool\":", "more_body": True}]))
    assert stalled[0]["status"] == 408 and json.loads(stalled[1]["body"])["code"] == "REQUEST_TIMEOUT"
    assert reached == []  # the application never saw the half body
    whole = asyncio.run(ask([{"type": "http.request", "body": b"{}", "more_body": True},
                             {"type": "http.request", "body": b"", "more_body": False}]))
    assert whole[0]["status"] == 200 and reached == [b"{}"]


def test_a_run_whose_error_holds_a_lone_surrogate_is_served_not_a_500(api):
    """(breaker finding: such a run is stored, but GET /v1/runs — the whole list — and its run and
    events pages answered 500: the body could not be encoded)"""
    import json

    run = api.service.engine.run("charge", {"amount": 13})
    assert run.status == "failed"
    h = api.key("reader", "runs:read")
    for path in ("/v1/runs", f"/v1/runs/{run.run_id}", f"/v1/runs/{run.run_id}/events"):
        r = api.client.get(path, headers=h)
        assert r.status_code == 200, (path, r.status_code, r.text)
        assert "unlucky \udc80 amount" in json.dumps(json.loads(r.content), ensure_ascii=False)  # the same text
