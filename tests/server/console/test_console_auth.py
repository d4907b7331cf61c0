"""Signing in to the console (flowctl.server.console.auth): an API key for a signed session cookie,
scopes as the key has them, a CSRF token on every POST."""
from __future__ import annotations

import re

import pytest

from flowctl.server.console.auth import COOKIE, decode, encode
from support.consolekit import console  # noqa: F401 - the fixture


def test_signing_in_sets_a_signed_httponly_strict_cookie_and_never_the_key(console):
    key = console.key("ann", "runs:read")
    c = console.client()
    page = c.get("/console/signin")
    pre = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    r = c.post("/console/signin", data={"csrf": pre, "key": key, "next": "/console/health"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/health"
    cookie = [h for h in r.headers.get_list("set-cookie") if h.startswith(COOKIE + "=")][0]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict") and "Path=/console" in cookie
    assert key.split("_")[-1] not in cookie  # the key's secret is not in the cookie
    assert c.get("/console/runs").status_code == 200
    assert "signed in as <b id=\"who\">ann</b>" in c.get("/console/runs").text


def test_an_edited_or_foreign_cookie_is_no_session(console):
    secret = console.asgi.app.state.console.secret
    value = encode(secret, {"k": "x", "n": "ann", "c": "t", "e": 9e12})
    assert decode(secret, value)["n"] == "ann"
    payload, sig = value.rsplit(".", 1)
    assert decode(secret, payload[:-2] + "xx." + sig) is None       # edited payload
    assert decode(b"another secret", value) is None                  # signed by another server
    assert decode(secret, encode(secret, {"k": "x", "n": "a", "c": "t", "e": 1})) is None  # expired


def test_a_wrong_key_is_refused_and_recorded_and_a_stale_form_is_refused(console):
    c = console.client()
    page = c.get("/console/signin")
    pre = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    bad = c.post("/console/signin", data={"csrf": pre, "key": "fck_000000000000_" + "A" * 43})
    assert bad.status_code == 401 and "not known" in bad.text
    assert [r["kind"] for r in console.service.log.session("access")] == ["access_denied"]
    for _ in range(20):  # more of the same: counted in the window's one row, not a row each
        pre = re.search(r'name="csrf" value="([^"]+)"', c.get("/console/signin").text).group(1)
        assert c.post("/console/signin", data={"csrf": pre, "key": "fck_000000000000_" + "B" * 43}).status_code == 401
    assert [r["kind"] for r in console.service.log.session("access")] == ["access_denied"]
    console.service.refusals.flush()
    rows = console.service.log.session("access")
    assert len(rows) == 2 and rows[1]["data"]["count"] == 20, rows
    stale = console.client().post("/console/signin", data={"csrf": "forged", "key": console.key("bob", "admin")})
    assert stale.status_code == 403


def test_pages_need_a_session_and_a_revoked_key_ends_it(console):
    anon = console.client()
    r = anon.get("/console/runs/abcd1234", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/signin?next=%2Fconsole%2Fruns%2Fabcd1234"
    c = console.client(console.key("ann", "runs:read"))
    assert c.get("/console/runs").status_code == 200
    console.service.keys.revoke("ann")
    assert c.get("/console/runs", follow_redirects=False).status_code == 303


@pytest.mark.parametrize("scopes, url, status", [
    (("reviews",), "/console/runs", 403), (("reviews",), "/console/health", 403),
    (("reviews",), "/console/reviews", 200), (("runs:read",), "/console/reviews", 403),
    (("admin",), "/console/reviews", 200)])
def test_a_reviewer_sees_only_what_the_key_s_scopes_allow(console, scopes, url, status):
    c = console.client(console.key("ann", *scopes))
    assert c.get(url).status_code == status


def test_the_navigation_shows_only_the_pages_the_scopes_allow(console):
    page = console.client(console.key("rev", "reviews")).get("/console/reviews").text
    assert ">Reviews</a>" in page and ">Runs</a>" not in page and ">Health</a>" not in page


def test_an_action_without_the_csrf_token_is_refused_and_nothing_is_done(console):
    paused = console.engine.run("charge", {"amount": 10, "card": "4111"})
    c = console.client(console.key("ann", "admin"))
    before = console.store.get_run(paused.run_id)["last_seq"]
    for fields in ({"reason": "x"}, {"reason": "x", "csrf": "not-the-token"}):
        r = c.post(f"/console/runs/{paused.run_id}/cancel", data=fields)
        assert r.status_code == 403 and "CSRF" in r.text
    assert console.store.get_run(paused.run_id)["last_seq"] == before
    token = console.csrf(c, f"/console/runs/{paused.run_id}")
    ok = c.post(f"/console/runs/{paused.run_id}/cancel", data={"reason": "x"}, headers={"X-CSRF-Token": token},
                follow_redirects=False)
    assert ok.status_code == 303 and console.store.get_run(paused.run_id)["status"] == "cancelled"


def test_a_key_without_runs_write_cannot_take_over(console):
    paused = console.engine.run("charge", {"amount": 10, "card": "4111"})
    c = console.client(console.key("rev", "reviews", "runs:read"))
    token = console.csrf(c, "/console/reviews")
    r = c.post(f"/console/runs/{paused.run_id}/cancel", data={"reason": "x", "csrf": token})
    assert r.status_code == 403 and "lacks the scope &#39;runs:write&#39;" in r.text
    assert console.store.get_run(paused.run_id)["status"] == "paused"
    assert "Cancel run" not in c.get(f"/console/runs/{paused.run_id}").text


def test_signing_out_needs_the_token_and_ends_the_session(console):
    c = console.client(console.key("ann", "runs:read"))
    assert c.post("/console/signout", data={}).status_code == 403
    token = console.csrf(c, "/console/runs")
    c.post("/console/signout", data={"csrf": token}, follow_redirects=False)
    assert c.get("/console/runs", follow_redirects=False).status_code == 303


def test_a_copy_of_a_signed_out_cookie_opens_nothing(console):
    # (break-it finding: the old cookie and its CSRF token still cancelled a run after sign-out)
    paused = console.engine.run("charge", {"amount": 10, "card": "4111"})
    c = console.client(console.key("ann", "runs:read", "runs:write", "reviews"))
    token = console.csrf(c, "/console/runs")
    stolen = dict(c.cookies)
    c.post("/console/signout", data={"csrf": token}, follow_redirects=False)
    other = c.__class__(c.app, base_url=str(c.base_url))
    other.cookies.update(stolen)
    assert other.get("/console/reviews", follow_redirects=False).status_code == 303  # to the sign-in page
    r = other.post(f"/console/runs/{paused.run_id}/cancel", data={"reason": "x", "csrf": token},
                   follow_redirects=False)
    assert r.status_code in (303, 401, 403)
    assert console.store.get_run(paused.run_id)["status"] == "paused"


def test_a_signed_in_key_past_its_rate_is_counted_per_window_not_written_per_request(console):
    """(break-it finding, as the API's: each console request of a key past its rate was written to
    the service log, so the rate bounded nothing the store had to write.)"""
    from flowctl.server.auth import Buckets

    c = console.client(console.key("ann", "runs:read"))
    console.service.buckets = Buckets(rate=0.001, burst=1)
    assert [c.get("/console/runs").status_code for _ in range(10)] == [200] + [429] * 9
    rows = console.service.log.session("access")
    assert [(r["caller"], r["outcome"]) for r in rows] == [("ann", "rate_limited")]
    (window,) = console.service.refusals.flush()
    assert (window["caller"], window["data"]["count"]) == ("ann", 8)
