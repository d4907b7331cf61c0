"""``type: succeed`` and ``type: fail`` (flowctl.engine.states.terminal): succeed ends the run with
the flow's output (the context without one); fail ends it with its error and cause, without
compensating unless it says ``compensate: true``."""
from __future__ import annotations

from support.enginekit import Harness, build
from support.engineflows import SAGA, TOOLS, flow, saga_states


def test_fail_state_alone_does_not_compensate(tmp_path):
    root = build(tmp_path, {**SAGA, **saga_states(1), **flow("p1", "  - {from: p1, to: failed}\n")}, TOOLS)
    h = Harness(root)
    assert h.run().status == "failed"
    assert ("undo", "1") not in h.ledger()

def test_fail_state_with_compensate_true_undoes_side_effects(tmp_path):
    root = build(tmp_path, {**SAGA, **saga_states(2),
                            "states/failed.yaml": "id: failed\ntype: fail\nerror: Aborted\ncompensate: true\n",
                            **flow("p1", "  - {from: p1, to: p2}\n  - {from: p2, to: failed}\n")}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.error["code"] == "Aborted"
    assert h.ledger()[-2:] == [("undo", "2"), ("undo", "1")]


def test_succeed_ends_with_the_context_when_the_flow_declares_no_output(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: pass\nset: {n: '`1`', who: input.who}\n",
                            **flow("a", "  - {from: a, to: done}\n")}, TOOLS)
    h = Harness(root)
    result = h.run(input={"who": "ann"})
    assert result.status == "succeeded" and result.exit_code == 0
    assert result.output == {"n": 1, "who": "ann"} and result.error is None
    assert h.store.get_run(result.run_id)["output"] == {"n": 1, "who": "ann"}


def test_fail_takes_its_error_and_cause_from_expressions(tmp_path):
    root = build(tmp_path, {"states/no.yaml": "id: no\ntype: fail\nerror: {expr: input.code}\ncause: {expr: input.why}\n",
                            "transitions/f.yaml": "flow: f\nstart: no\ntransitions: []\n"}, TOOLS)
    result = Harness(root).run(input={"code": "Order.Invalid", "why": "no lines"})
    assert result.status == "failed" and result.exit_code == 1
    assert result.error == {"type": "Order.Invalid", "code": "Order.Invalid", "message": "no lines", "state": "no"}
