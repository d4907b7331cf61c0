"""What a run's expressions see (flowctl.engine.context, ``RunContext.scope``): ``input``,
``params`` (declared defaults overridden by the run's), ``run``, ``state``, ``context``; and the
events a listener is shown, copies of what is recorded."""
from __future__ import annotations

from support.enginekit import Harness, build
from support.engineflows import TOOLS, flow


def test_params_output_and_run_scope(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n",
                            **flow("a", "  - {from: a, to: done}\n",
                                   extra="params: {topic: dev, n: 1}\noutput: '{topic: params.topic, n: params.n, flow: run.flow, state: state.id}'\n")},
                 TOOLS)
    result = Harness(root).run(params={"topic": "prod"})
    assert result.output == {"topic": "prod", "n": 1, "flow": "f", "state": "done"}


def test_a_listener_changing_the_event_it_is_shown_changes_nothing_recorded(tmp_path):
    from flowctl.store.audit import verify_chain

    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: pass\nset: {n: '`1`'}\n", **flow("a", "  - {from: a, to: done}\n")},
                 TOOLS)
    h = Harness(root)

    def meddle(event):
        event["data"]["meddled"] = True
        h.events.append(event)

    h.engine.listener = meddle
    result = h.run(input={"secret": "keep"})
    assert result.status == "succeeded"
    stored = h.store.events(result.run_id)
    assert [e["type"] for e in stored] == h.types()
    assert all("meddled" not in e["data"] for e in stored)
    assert stored[0]["data"]["input"] == {"secret": "keep"}
    assert verify_chain(stored) == []


def test_a_listener_that_fails_is_dropped_and_the_run_goes_on(tmp_path):
    """``flowctl run … | head``: live progress into a closed pipe raised BrokenPipeError inside the
    step, and the run failed with it as its error."""
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: pass\nset: {n: '`1`'}\n", **flow("a", "  - {from: a, to: done}\n")},
                 TOOLS)
    h = Harness(root)
    shown = []

    def closed_pipe(event):
        shown.append(event["type"])
        raise BrokenPipeError(32, "Broken pipe")

    h.engine.listener = closed_pipe
    result = h.run()
    assert result.status == "succeeded" and result.error is None
    assert shown == ["run_started"] and h.engine.listener is None  # asked once, then no more
    assert [e["type"] for e in h.store.events(result.run_id)][-1] == "run_succeeded"


def test_a_context_grown_past_the_depth_limit_fails_the_run_instead_of_being_stored(tmp_path):
    """A pass state in a loop wraps context.z in a list on each visit. Past 100 levels the write
    is refused (PayloadTooLarge), so the run fails at that state (breaker finding: it was stored
    until no reader could walk it, and at 600 levels the run was left `running`)."""
    files = {"states/init.yaml": "id: init\ntype: pass\nset: {z: '`[]`', n: '`0`'}\n",
             "states/wrap.yaml": "id: wrap\ntype: pass\nset: {z: '[context.z]', n: 'sum([context.n, `1`])'}\n",
             **flow("init", "  - {from: init, to: wrap}\n  - {from: wrap, to: wrap, when: 'context.n < input.n'}\n"
                            "  - {from: wrap, to: done}\n", extra="limits: {max_steps: 2000}\n")}
    h = Harness(build(tmp_path, files, TOOLS))
    assert h.run(input={"n": 90}).status == "succeeded"  # 91 levels with the list's own: kept
    failed = h.run(input={"n": 600})
    assert failed.status == "failed" and failed.error["code"] == "PAYLOAD_TOO_LARGE"
    assert "nest more than 100 levels deep" in failed.error["message"] and failed.error["state"] == "wrap"
