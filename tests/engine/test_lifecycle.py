"""A run's life outside the step loop (flowctl.engine.lifecycle): what a start refuses (input,
params, run id), and resume of a finished run or of one paused for review."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build
from support.engineflows import TOOLS, flow
from flowctl.errors import UsageError


def test_flow_input_schema_refuses_bad_input(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done}\n", extra="input_schema: {type: object, required: [order_id, reason]}\n")}, TOOLS)
    with pytest.raises(UsageError, match="order_id") as info:
        Harness(root).run(input={})
    assert "'reason' is a required property" in str(info.value)  # every missing field, not the first only

def test_unknown_params_are_refused(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done}\n", extra="params: {sender: ops}\n")}, TOOLS)
    with pytest.raises(UsageError, match="has no param 'sendr'") as info:
        Harness(root).run(params={"sendr": "evil"})
    assert info.value.hint == "did you mean 'sender'?"


def test_resume_of_a_finished_run_returns_it_as_it_stands(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: pass\nset: {n: '`1`'}\n", **flow("a", "  - {from: a, to: done}\n")},
                 TOOLS)
    h = Harness(root)
    done = h.run()
    before = h.store.get_run(done.run_id)
    again = h.engine.resume(done.run_id)
    assert (again.status, again.output, again.path) == ("succeeded", {"n": 1}, ["a", "done"])
    assert h.store.get_run(done.run_id)["last_seq"] == before["last_seq"]  # nothing ran, nothing recorded
    with pytest.raises(UsageError, match="has already ended \\(succeeded\\); the token cannot be used"):
        h.engine.resume(done.run_id, token="t", decision="approve")


def test_a_run_paused_for_review_is_not_resumed_without_its_token(tmp_path):
    root = build(tmp_path, {"states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
                            **flow("ask", "  - {from: ask, to: done}\n")}, TOOLS)
    h = Harness(root)
    paused = h.run()
    with pytest.raises(UsageError, match="is paused for review at 'ask'") as info:
        h.engine.resume(paused.run_id)
    assert "--decision approve|reject" in info.value.hint
    assert h.store.get_run(paused.run_id)["status"] == "paused"


@pytest.mark.parametrize("run_id", ["", "has space", "x" * 41, "semi;colon"])
def test_a_run_id_that_cannot_be_stored_is_refused_before_the_run_starts(tmp_path, run_id):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n", **flow("a", "  - {from: a, to: done}\n")}, TOOLS)
    h = Harness(root)
    with pytest.raises(UsageError, match="cannot be used"):
        h.run(run_id=run_id)
    assert h.store.list_runs(limit=0) == []


@pytest.mark.parametrize("taken", ["RunConflict", "RunInUse"])
def test_recover_leaves_a_run_another_process_took_meanwhile_to_it(tmp_path, monkeypatch, taken):
    """(breaker finding: two `flowctl recover` at once, or one beside a worker — the one that lost
    the race reported the other's run as refused and exited 1)"""
    from flowctl import errors
    from flowctl.engine import lifecycle

    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 1h\n", **flow("w", "  - {from: w, to: done}\n")},
                 TOOLS)
    h = Harness(root)
    first, second = h.run().run_id, h.run().run_id
    h.clock.advance(7200)
    real = lifecycle.resume

    def racing(engine, row, **kw):
        if row["id"] == first:  # another process continued it between the listing and here
            raise getattr(errors, taken)(f"run {first} was taken by another process")
        return real(engine, row, **kw)
    monkeypatch.setattr(lifecycle, "resume", racing)
    results = h.engine.recover()
    assert [(r.run_id, r.status) for r in results] == [(second, "succeeded")]
