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


def test_a_process_stopped_during_a_short_wait_resumes_the_same_wait(tmp_path, monkeypatch):
    """Found by a new user: a wait slept in process was not durable — killed 3 s into a 5 s wait, the
    resumed run waited 5 s more. Its due time is committed before it sleeps."""
    import flowctl
    import pytest
    from flowctl.store.sql import open_store

    class Killed(BaseException):
        pass

    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 5s\n", **flow("w", linear("w"))}, TOOLS)
    (tmp_path / "db").mkdir()
    h = Harness(root, store=open_store(f"sqlite:///{tmp_path}/db/flowctl.db"))
    h.engine = flowctl.Engine(h.project, h.store, clock=h.clock, owner="gone-host:1:1")

    def killed(seconds):
        h.clock.advance(3.0)
        raise Killed()
    monkeypatch.setattr(h.clock, "sleep", killed)
    with pytest.raises(Killed):
        h.run(run_id="w-kill")
    assert h.store.get_run("w-kill")["cursor"]["pending"]["kind"] == "wait"
    slept = []
    monkeypatch.setattr(h.clock, "sleep", lambda s: (slept.append(s), h.clock.advance(s)))
    monkeypatch.setenv("FLOWCTL_GONE_OWNERS", "gone-host:1:1")
    done = flowctl.Engine(h.project, h.store, clock=h.clock).resume("w-kill")
    assert done.status == "succeeded" and slept == [2.0]  # the 2 s left, not 5 s again
    assert [e["type"] for e in h.store.events("w-kill")].count("wait_started") == 1
