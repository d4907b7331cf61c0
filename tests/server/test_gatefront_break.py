"""Break-it findings on the gate's front (flowctl.server.gatefront): each test is one finding."""
from __future__ import annotations

import threading

from support.interleave import WatchedLock


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
