"""The console's pages over HTTP (runs, run, reviews, actions, health): what each shows and does,
read through the library, nothing sensitive shown."""
from __future__ import annotations

import re

from support.consolekit import console  # noqa: F401 - the fixture


def admin(console):
    return console.client(console.key("ann", "admin"))


def test_runs_are_filtered_by_flow_status_and_id_text_and_paged(console):
    console.fix()
    ids = [console.engine.run("ship", {"to": "Oslo"}).run_id for _ in range(30)]
    paused = console.engine.run("charge", {"amount": 10, "card": "4111"}).run_id
    c = admin(console)
    first = c.get("/console/runs").text
    shown = re.findall(r'data-run="([^"]+)"', first)
    assert len(shown) == 25 and shown[0] == paused  # newest first, a page of 25
    nxt = re.search(r'href="(/console/runs\?[^"]*cursor=[^"]+)" id="next-page"', first).group(1).replace("&amp;", "&")
    rest = re.findall(r'data-run="([^"]+)"', c.get(nxt).text)
    assert len(rest) == 6 and not set(rest) & set(shown)
    assert re.findall(r'data-run="([^"]+)"', c.get("/console/runs?status=paused").text) == [paused]
    assert re.findall(r'data-run="([^"]+)"', c.get("/console/runs?flow=charge").text) == [paused]
    assert re.findall(r'data-run="([^"]+)"', c.get(f"/console/runs/rows?q={ids[7][-10:]}").text) == [ids[7]]
    assert 'hx-trigger="every 3s"' in c.get("/console/runs/rows").text  # the status stays live


def test_an_unknown_status_filter_is_refused_naming_the_valid_ones(console):
    # not every run shown as if filtered
    console.fix()
    run_id = console.engine.run("ship", {"to": "Oslo"}).run_id
    c = admin(console)
    for url in ("/console/runs?status=bogus", "/console/runs/rows?status=bogus"):
        answer = c.get(url)
        assert answer.status_code == 400, url
        assert "bogus" in answer.text and "paused" in answer.text and "succeeded" in answer.text
        assert run_id not in answer.text
    assert run_id in c.get("/console/runs?status=").text  # an empty status is no filter


def test_a_run_page_shows_graph_marks_timeline_masked_data_and_audit(console):
    paused = console.engine.run("charge", {"amount": 10, "card": "4111-1111"})
    c = admin(console)
    page = c.get(f"/console/runs/{paused.run_id}").text
    assert "4111-1111" not in page and "***redacted***" in page
    assert "<svg" in page
    assert re.search(r'id="s_ask" class="node[^"]*current', page)  # the paused review is the current state
    assert re.search(r'id="s_charge" class="node visited"', page)  # on the path, neither failed nor undone
    assert 'id="audit"' in page and "hash chain intact" in page
    types = re.findall(r'data-type="([a-z_]+)"', page)
    assert types[:2] == ["run_started", "state_entered"] and "policy_decided" in types and "review_requested" in types
    assert 'kind-gate' in page and 'kind-effect' in page and 'kind-verify' in page


def test_a_parent_run_shows_its_child_runs_as_a_tree_and_a_child_links_back(console):
    console.fix()
    parent = console.engine.run("parent", {"to": "Oslo"})
    child = console.store.list_runs(parent_id=parent.run_id, limit=0)[0]
    c = admin(console)
    page = c.get(f"/console/runs/{parent.run_id}").text
    assert re.search(rf'<ul class="tree">\s*<li><a href="/console/runs/{child["id"]}">', page)
    assert f'child of <a href="/console/runs/{parent.run_id}">' in c.get(f"/console/runs/{child['id']}").text
    assert f'data-run="{child["id"]}"' not in c.get("/console/runs").text  # the list shows top-level runs


def test_cancelling_with_compensation_undoes_and_shows_it_in_the_timeline(console):
    paused = console.engine.run("charge", {"amount": 10, "card": "4111"})
    c = admin(console)
    url = f"/console/runs/{paused.run_id}"
    token = console.csrf(c, url)
    r = c.post(url + "/cancel", data={"csrf": token, "reason": "customer called", "compensate": "yes"},
               follow_redirects=False)
    assert r.status_code == 303
    page = c.get(url).text
    assert "compensation_started" in page and "compensation_succeeded" in page
    assert re.search(r'id="s_charge" class="node[^"]*compensated', page)
    logged = [r for r in console.service.log.session("ann") if r["kind"] == "run_cancelled"]
    assert logged[0]["reason"] == "customer called" and logged[0]["data"]["compensate"] is True
    assert [e["data"]["by"] for e in console.store.events(paused.run_id) if e["type"] == "run_cancelled"] == ["key:ann"]


def test_cancelling_without_compensation_leaves_the_side_effects(console):
    paused = console.engine.run("charge", {"amount": 10, "card": "4111"})
    c = admin(console)
    token = console.csrf(c, "/console/runs")
    c.post(f"/console/runs/{paused.run_id}/cancel", data={"csrf": token, "reason": "r", "compensate": "no"})
    assert "compensation_started" not in console.events(paused.run_id)
    assert console.store.get_run(paused.run_id)["status"] == "cancelled"


def test_a_takeover_needs_a_reason(console):
    paused = console.engine.run("charge", {"amount": 10, "card": "4111"})
    c = admin(console)
    token = console.csrf(c, "/console/runs")
    r = c.post(f"/console/runs/{paused.run_id}/cancel", data={"csrf": token, "reason": " "})
    assert r.status_code == 422 and console.store.get_run(paused.run_id)["status"] == "paused"


def test_redrive_after_fixing_the_tool_continues_from_the_failed_step(console):
    failed = console.engine.run("ship", {"to": "Oslo"})
    assert failed.status == "failed"
    c = admin(console)
    url = f"/console/runs/{failed.run_id}"
    assert "Retry from the failed step" in c.get(url).text
    console.fix()
    token = console.csrf(c, url)
    c.post(url + "/redrive", data={"csrf": token, "reason": "carrier back"})
    row = console.store.get_run(failed.run_id)
    assert row["status"] == "succeeded" and row["output"] == {"to": "Oslo"}
    ev = [e for e in console.store.events(failed.run_id) if e["type"] == "run_redriven"]
    assert ev[0]["data"]["by"] == "key:ann" and ev[0]["data"]["reason"] == "carrier back"


def test_edit_context_then_continue_records_before_and_after(console):
    console.fix()
    failed = console.engine.run("ship", {"to": "nowhere"})
    c = admin(console)
    url = f"/console/runs/{failed.run_id}"
    token = console.csrf(c, url)
    bad = c.post(url + "/edit", data={"csrf": token, "reason": "x", "context": "[1]"})
    assert bad.status_code == 422 and console.store.get_run(failed.run_id)["status"] == "failed"
    for text, why in (('{"to": NaN}', "NaN is not JSON"), ('{"to": "\\ud800"}', "at /to: the text holds a lone")):
        bad = c.post(url + "/edit", data={"csrf": token, "reason": "x", "context": text})  # (break-it: both taken)
        assert bad.status_code == 422 and f"The context is not JSON: {why}" in bad.text, bad.text
        assert console.store.get_run(failed.run_id)["status"] == "failed"
    c.post(url + "/edit", data={"csrf": token, "reason": "address fixed", "context": '{"to": "Bergen"}'})
    assert console.store.get_run(failed.run_id)["output"] == {"to": "Bergen"}
    ev = [e["data"] for e in console.store.events(failed.run_id) if e["type"] == "context_overridden"]
    assert [(d["before"], d["after"], d["by"], d["reason"]) for d in ev] == [
        ({"to": "nowhere"}, {"to": "Bergen"}, "key:ann", "address fixed")]
    assert "context_overridden" in c.get(url).text


def test_the_inbox_shows_the_review_and_decides_it_as_the_signed_in_key(console):
    paused = console.engine.run("grant", {"customer": "Acme"})
    c = console.client(console.key("rev", "reviews"))
    page = c.get("/console/reviews").text
    assert f'id="review-{paused.run_id}"' in page and "Acme" in page
    assert 'class="countdown"' in page and re.search(r"(1h 59m|2h 0m) left", page)
    assert 'value="approve"' in page and 'value="reject"' in page and 'hx-confirm="Decide' in page
    assert 'name="data/limit"' in page and 'name="data/contact/name"' in page  # the form of its data_schema
    token = console.csrf(c, "/console/reviews")
    url = f"/console/reviews/{paused.run_id}/decide"
    before = console.store.get_run(paused.run_id)["last_seq"]
    assert c.post(url, data={"csrf": token, "decision": "maybe"}).status_code == 422
    r = c.post(url, data={"csrf": token, "decision": "approve", "data/limit": "five"})
    assert r.status_code == 422 and "at /limit: must be a whole number" in r.text
    r = c.post(url, data={"csrf": token, "decision": "approve", "data/limit": "5000"})
    assert r.status_code == 422 and "at /limit" in r.text and "nothing was recorded" in r.text
    r = c.post(url, data={"csrf": token, "decision": "approve", "data/limit": "5", "data/contact/phone": "1"})
    assert r.status_code == 422 and "at /contact" in r.text and "is a required property" in r.text
    assert console.store.get_run(paused.run_id)["status"] == "paused"
    assert console.store.get_run(paused.run_id)["last_seq"] == before  # refused data records nothing, not even a token
    r = c.post(url, data={"csrf": token, "decision": "approve", "data/limit": "5", "data/tier": "gold",
                          "data/contact/name": "Ann", "data/contact/phone": "", "data/tags": "vip\n\nnew\n",
                          "data/extra": '"x"'}, follow_redirects=False)
    assert r.status_code == 303 and console.store.get_run(paused.run_id)["status"] == "succeeded"
    decided = [e["data"] for e in console.store.events(paused.run_id) if e["type"] == "review_decided"]
    assert decided == [dict(decided[0], decision="approve", by="key:rev", data={
        "limit": 5, "tier": "gold", "rush": False, "contact": {"name": "Ann"}, "tags": ["vip", "new"], "extra": "x"})]
    assert f'id="review-{paused.run_id}"' not in c.get("/console/reviews").text


def test_health_shows_the_rates_against_their_thresholds(console):
    failed = console.engine.run("ship", {"to": "Oslo"})
    console.fix()
    console.engine.run("ship", {"to": "Oslo"})
    from flowctl.engine.redrive import redrive

    redrive(console.engine, failed.run_id, by="ann")
    page = admin(console).get("/console/health?window=").text
    assert re.search(r'id="runs-count">2<', page) and re.search(r'id="success-rate">100.0%<', page)
    assert re.search(r'<tr class="over" id="rate-human_takeover_rate">', page)  # 1 of 2 runs > 5%
    assert re.search(r'<tr class="fine" id="rate-rollback_failure_rate">', page)


def test_without_jinja2_the_console_says_what_to_install_and_the_api_still_works(console, monkeypatch):
    import sys

    from starlette.testclient import TestClient

    from flowctl.server import create_app

    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 now raises ImportError
    c = TestClient(create_app(console.project, console.store), base_url="http://testserver")
    r = c.get("/console/runs")
    assert r.status_code == 503 and "pip install 'flowctl[serve]'" in r.text
    assert c.get("/healthz").status_code == 200


def test_pause_is_asked_from_the_run_page_and_the_run_stops_at_its_next_checkpoint_then_resumes(console):
    paused = console.engine.run("charge", {"amount": 10, "card": "4111"})  # waits for its review at 'ask'
    c = admin(console)
    url = f"/console/runs/{paused.run_id}"
    assert 'id="pause-form"' in c.get(url).text
    token = console.csrf(c, url)
    assert c.post(url + "/pause", data={"csrf": token, "reason": " "}).status_code == 422  # a reason is required
    r = c.post(url + "/pause", data={"csrf": token, "reason": "amounts look wrong"}, follow_redirects=False)
    assert r.status_code == 303
    page = c.get(url).text
    assert 'id="pause-requested"' in page and "amounts look wrong" in page and 'id="pause-form"' not in page
    console.engine.resume(paused.run_id, token=console.engine.reissue_token(paused.run_id), decision="approve",
                          by="rita")  # the decision continues it: it pauses at the first checkpoint after
    row = console.store.get_run(paused.run_id)
    assert row["status"] == "paused" and row["cursor"]["pending"]["kind"] == "pause"
    page = c.get(url).text
    assert 'id="resume-form"' in page and "by key:ann: amounts look wrong" in page
    r = c.post(url + "/resume", data={"csrf": token, "reason": "checked"}, follow_redirects=False)
    assert r.status_code == 303 and console.store.get_run(paused.run_id)["status"] == "succeeded"
    kinds = [x["kind"] for x in console.service.log.session("ann")]
    assert "pause_requested" in kinds and "run_resumed" in kinds
    [event] = [e for e in console.store.events(paused.run_id) if e["type"] == "run_paused"
               and e["data"].get("by") == "key:ann"]
    assert event["data"]["reason"] == "amounts look wrong"
    r = c.post(url + "/pause", data={"csrf": token, "reason": "late"})
    assert r.status_code == 409 and "already ended (succeeded)" in r.text
    r = c.post(url + "/pause", data={"reason": "no token"})
    assert r.status_code == 403
