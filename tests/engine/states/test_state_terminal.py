"""``type: succeed`` and ``type: fail`` (flowctl.engine.states.terminal): a fail state ends the run
without compensating unless it says ``compensate: true``."""
from __future__ import annotations

from support.enginekit import Harness, build
from support.engineflows import TOOLS, flow, SAGA, saga_states


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
