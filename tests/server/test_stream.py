"""GET /v1/runs/{id}/stream (flowctl.server.stream) and GET /v1/stats: a run's events arrive as
Server-Sent Events in seq order, none twice, from ``after`` / ``Last-Event-ID``, redacted, and the
stream ends when the run ends."""
from __future__ import annotations

import json
import threading

CARD = "4111-2222-3333-4444"


def parse(text: str) -> list:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if lines:
            out.append((int(lines["id"]), lines["event"], json.loads(lines["data"])))
    return out


def test_a_paused_runs_stream_delivers_every_event_in_order_and_ends_with_the_run(make_api):
    api = make_api(poll=0.01)
    h = api.key("dash", "runs:read")
    run = api.service.engine.run("charge", {"amount": 10, "card": CARD})
    assert run.status == "paused"
    got = {}
    read_once = threading.Event()
    page = api.store.events_page

    def events_page(*args):  # the interleaving: the run is decided only once the stream has read the pause
        found = page(*args)
        read_once.set()
        return found

    api.store.events_page = events_page

    def follow():  # blocks until the run ends: the stream must stay open across the pause
        got["r"] = api.client.get(f"/v1/runs/{run.run_id}/stream", headers=h)

    reader = threading.Thread(target=follow)
    reader.start()
    assert read_once.wait(30)
    api.service.engine.resume(run.run_id, token=run.review["token"], decision="approve")
    reader.join(60)
    assert not reader.is_alive(), "the stream did not end when the run did"
    r = got["r"]
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse(r.text)
    seqs = [s for s, _, _ in events]
    assert seqs == list(range(1, len(seqs) + 1))  # in order, none twice, none missing
    assert events[-1][1] == "run_succeeded" and "review_decided" in [t for _, t, _ in events]
    assert all(e["seq"] == s and e["type"] == t for s, t, e in events)
    assert CARD not in r.text


def test_a_stream_resumes_after_a_seq_or_the_last_event_id(api):
    h = api.key("dash", "runs:read")
    run = api.service.engine.run("charge", {"amount": 10})
    api.service.engine.resume(run.run_id, token=run.review["token"], decision="approve")
    full = parse(api.client.get(f"/v1/runs/{run.run_id}/stream", headers=h).text)
    later = parse(api.client.get(f"/v1/runs/{run.run_id}/stream?after=3", headers=h).text)
    assert [s for s, _, _ in later] == [s for s, _, _ in full if s > 3]
    again = parse(api.client.get(f"/v1/runs/{run.run_id}/stream", headers=dict(h, **{"Last-Event-ID": "5"})).text)
    assert [s for s, _, _ in again] == [s for s, _, _ in full if s > 5]
    assert api.client.get("/v1/runs/nope1234/stream", headers=h).status_code == 404
    assert api.client.get(f"/v1/runs/{run.run_id}/stream").status_code == 401


def test_stats_are_the_stores_history(api):
    h = api.key("dash", "runs:read")
    run = api.service.engine.run("charge", {"amount": 10})
    api.service.engine.resume(run.run_id, token=run.review["token"], decision="approve")
    api.service.engine.run("charge", {"amount": 20})
    r = api.client.get("/v1/stats", headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["runs"] == 2 and body["by_status"] == {"succeeded": 1, "paused": 1}
    assert body["success_rate"] == 1.0 and body["tools"]["refund@1.0.0"]["calls"] == 2
    assert api.client.get("/v1/stats?flow=other", headers=h).json()["runs"] == 0
    assert api.client.get("/v1/stats?limit=0", headers=h).status_code == 422
