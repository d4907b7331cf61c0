"""Who may call: API keys stored hashed, scopes, revocation, per-key rate limits; every refusal
recorded (flowctl.server.auth, flowctl.store.apikeys)."""
from __future__ import annotations

import hashlib

from flowctl.store.apikeys import keys_of

GATE = ("/v1/gate/check", {"tool": "get_order", "input": {"order_id": "A"}})


def post_gate(api, headers=None):
    return api.client.post(GATE[0], json=GATE[1], headers=headers or {})


def test_no_key_or_a_wrong_key_is_401_and_recorded(api):
    api.key("agent", "gate")
    for headers in ({}, {"Authorization": "Bearer fck_000000000000_" + "A" * 43}, {"Authorization": "Bearer nonsense"},
                    {"Authorization": "Basic dXNlcjpwdw=="}):
        r = post_gate(api, headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["code"] == "UNAUTHORIZED" and r.headers["www-authenticate"] == "Bearer"
    rows = api.service.log.session("access")  # without a key: the first of each reason at once, then counted
    assert [(r["outcome"], r["caller"], r["data"]["path"]) for r in rows] == [("unauthorized", "", "/v1/gate/check")] * 2
    assert [r["data"]["count"] for r in api.service.refusals.flush()] == [1, 1]  # one more of each reason
    rows = api.service.log.session("access")
    assert "A" * 43 not in str(rows) and "nonsense" not in str(rows)  # the presented key is never kept


def test_a_tampered_secret_of_a_real_key_id_is_refused(api):
    good = api.key("agent", "gate")["Authorization"]
    forged = good[:-1] + ("B" if good[-1] != "B" else "C")
    assert post_gate(api, {"Authorization": forged}).status_code == 401
    assert post_gate(api, {"Authorization": good}).status_code == 200


def test_a_key_without_the_scope_is_403_and_recorded_with_its_name(api):
    reader = api.key("dashboard", "runs:read")
    r = post_gate(api, reader)
    assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN" and "gate" in r.json()["detail"]
    assert api.client.get("/v1/runs", headers=reader).status_code == 200
    assert api.client.get("/v1/reviews", headers=reader).status_code == 403
    admin = api.key("root", "admin")
    assert post_gate(api, admin).status_code == 200 and api.client.get("/v1/reviews", headers=admin).status_code == 200
    rows = api.service.log.session("access")
    assert [(r["outcome"], r["caller"]) for r in rows] == [("forbidden", "dashboard"), ("forbidden", "dashboard")]


def test_a_revoked_key_stops_working_at_once(api):
    h = api.key("agent", "gate")
    assert post_gate(api, h).status_code == 200
    keys_of(api.store).revoke("agent")
    assert post_gate(api, h).status_code == 401


def test_keys_are_stored_as_a_sha256_of_the_secret_only(api):
    printed = api.key("agent", "gate")["Authorization"].split()[1]
    secret = printed.split("_", 2)[2]
    with api.store.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT * FROM flowctl_api_keys").mappings().all()
    (row,) = rows
    assert secret not in str(dict(row)) and printed not in str(dict(row))
    assert row["secret_hash"] == hashlib.sha256(secret.encode()).hexdigest()


def test_each_key_has_its_own_rate_and_a_spent_one_is_429_with_retry_after(make_api):
    api = make_api(rate=0.01, burst=2)
    a, b = api.key("a", "gate"), api.key("b", "gate")
    assert [post_gate(api, a).status_code for _ in range(3)] == [200, 200, 429]
    r = post_gate(api, a)
    assert r.json()["code"] == "RATE_LIMITED" and int(r.headers["retry-after"]) >= 1
    assert post_gate(api, b).status_code == 200  # another key's bucket is untouched
    assert [(r["caller"], r["outcome"]) for r in api.service.log.session("access")] == [("a", "rate_limited")]
    assert [r["data"]["count"] for r in api.service.refusals.flush()] == [1]  # the second, counted in its window


def test_a_flood_without_a_key_writes_a_row_per_window_but_a_key_s_refusals_each(api):
    calls = [("POST", GATE[0], {"json": GATE[1], "headers": {"Authorization": "Bearer fck_000000000000_" + "A" * 43}})]
    assert {r.status_code for r in api.client.gather(calls * 60)} == {401}
    assert len(api.service.log.session("access")) == 1  # counted, not written, until the window passes
    reader = api.key("dashboard", "runs:read")
    assert {r.status_code for r in api.client.gather([("POST", GATE[0], {"json": GATE[1], "headers": reader})] * 5)} == {403}
    rows = api.service.log.session("access")
    assert [(r["caller"], r["outcome"]) for r in rows[1:]] == [("dashboard", "forbidden")] * 5
    assert [r["data"]["count"] for r in api.service.refusals.flush()] == [59]


def test_refusals_without_a_key_are_told_apart_by_method_and_route(api):
    bad = {"Authorization": "Bearer fck_000000000000_" + "A" * 43}
    assert api.client.get("/v1/runs", headers=bad).status_code == 401
    for i in range(3):
        assert api.client.post(f"/v1/runs/run-{i}/cancel", headers=bad).status_code == 401
    rows = api.service.log.session("access")
    assert [(r["data"]["method"], r["data"]["route"]) for r in rows] == [
        ("GET", "/v1/runs"), ("POST", "/v1/runs/{run_id}/cancel")]
    (counted,) = api.service.refusals.flush()
    assert (counted["data"]["route"], counted["data"]["count"], counted["data"]["paths"]) == (
        "/v1/runs/{run_id}/cancel", 2, 3)


def test_the_local_mcp_user_is_a_caller_no_api_key_can_be():
    """(breaker finding: an API key named `mcp` was the stdio MCP user, `key:mcp`, and could act
    in that user's session and undo its effects)"""
    from flowctl.server.auth import Caller
    from flowctl.server.mcp import LOCAL

    assert LOCAL.by == "local:mcp" and Caller("mcp", ("admin",), "k1").by == "key:mcp"
