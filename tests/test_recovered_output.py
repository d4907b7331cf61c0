"""A call recovered after a crash whose ``verify`` confirms the effect but cannot give its output:
the step is done with response ``{}``, and the record and ``trace`` say the output is unknown
(a user must not mistake it for a normal call with an empty output)."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build
from flowctl.cli.commands.trace import steps_of

TOOLS = '''
LEDGER = []
CRASH = [True]

def charge(input, call):
    LEDGER.append("charge")
    if CRASH[0]:
        CRASH[0] = False
        raise KeyboardInterrupt  # the process dies after the effect, before its outcome is recorded
    return {"charge_id": "C-1"}

def verify(input, output, call):
    return True  # it happened; this verify cannot say what the tool returned

def undo(input, output, call):
    LEDGER.append("undo")
'''

FILES = {
    "contracts/charge.v1.0.0.yaml": ("id: charge\nversion: 1.0.0\nentrypoint: tk:charge\nverify: tk:verify\n"
                                     "compensate: tk:undo\nside_effects:\n  - {type: payment, target: card}\n"),
    "policies/p.yaml": "policy: p\napplies_to: [charge]\nallow: []\n",
    "states/pay.yaml": "id: pay\ntype: task\ntool: charge@^1\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/f.yaml": "flow: f\nstart: pay\ntransitions:\n  - {from: pay, to: done}\n",
}


def test_a_recovered_call_without_its_output_is_marked_output_unknown(tmp_path):
    h = Harness(build(tmp_path, FILES, TOOLS))
    with pytest.raises(KeyboardInterrupt):
        h.run(run_id="r1")
    done = h.engine.resume("r1")
    assert done.status == "succeeded" and h.ledger() == ["charge"]  # not invoked again
    succeeded = [e["data"] for e in h.store.events("r1") if e["type"] == "tool_succeeded"]
    assert succeeded == [{"tool": "charge@1.0.0", "output": {}, "duration_ms": 0.0, "output_unknown": True}]
    steps = steps_of(h.store.events("r1"))
    assert [s["outcome"] for s in steps if s["state"] == "pay"] == ["ok (recovered, output unknown)"]


def test_an_unknown_output_the_output_schema_needs_fails_the_step_naming_the_cause(tmp_path):
    # the contract promises charge_id; a verify that answers only true cannot give it, so the step
    # fails here (SchemaMismatch, with the fix), not a later state on a field that was never there,
    # and the confirmed charge is compensated as the default error layer says
    files = dict(FILES)
    files["contracts/charge.v1.0.0.yaml"] = FILES["contracts/charge.v1.0.0.yaml"] + (
        "output_schema:\n  type: object\n  required: [charge_id]\n  properties:\n    charge_id: {type: string}\n")
    h = Harness(build(tmp_path, files, TOOLS))
    with pytest.raises(KeyboardInterrupt):
        h.run(run_id="r1")
    done = h.engine.resume("r1")
    assert done.status == "failed" and done.error["type"] == "SchemaMismatch"
    assert "unknown after a crash" in done.error["message"] and "return the output dict from verify" in done.error["message"]
    assert "'pay'" in done.error["message"]
    assert h.ledger() == ["charge", "undo"]  # invoked once, then undone by the saga
