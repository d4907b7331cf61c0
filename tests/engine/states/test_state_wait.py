"""``type: wait`` (flowctl.engine.states.wait): a short wait sleeps in process, a long one parks
the run until it is due; ``until`` is an expression giving a time."""
from __future__ import annotations

from support.enginekit import Harness, build
from support.engineflows import TOOLS, flow, linear


def test_short_wait_sleeps_inline_long_wait_parks(tmp_path):
    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 2s\n", **flow("w", linear("w"))}, TOOLS, name="short")
    h = Harness(root)
    assert h.run().status == "succeeded" and h.clock.slept == [2.0]
    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 1h\n", **flow("w", linear("w"))}, TOOLS, name="long")
    h = Harness(root)
    parked = h.run()
    assert parked.status == "waiting"
    h.clock.advance(3600)
    assert h.engine.recover()[0].status == "succeeded"

def test_wait_until_an_expression(tmp_path):
    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nuntil: \"date_add(input.at, '5s')\"\n", **flow("w", linear("w"))}, TOOLS)
    h = Harness(root)
    assert h.run(input={"at": "2026-01-01T00:00:00Z"}).status == "succeeded"
    assert h.clock.slept == [5.0]
