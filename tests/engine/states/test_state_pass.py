"""``type: pass`` (flowctl.engine.states.pass_): its ``set`` is applied to the context (each
expression reading the scope before the state), the response stays, and a context over the payload
limit fails the step."""
from __future__ import annotations

from support.enginekit import Harness, build, contract, task
from support.engineflows import TOOLS, flow


def test_set_writes_the_context_and_the_response_stays(tmp_path):
    root = build(tmp_path, {**contract("ok", "ok"), **task("a", "ok@1.0.0", extra="input: {value: '`7`'}\n"),
                            "states/b.yaml": "id: b\ntype: pass\nset: {n: '`1`', copy: response.value, deep.key: input.who}\n",
                            **flow("a", "  - {from: a, to: b}\n  - {from: b, to: done, set: {after: response.value}}\n")},
                 TOOLS)
    result = Harness(root).run(input={"who": "ann"})
    assert result.status == "succeeded"
    assert result.output == {"n": 1, "copy": 7, "deep": {"key": "ann"}, "after": 7}


def test_a_context_over_the_payload_limit_fails_the_step(tmp_path):
    root = build(tmp_path, {"states/b.yaml": "id: b\ntype: pass\nset: {blob: \"join('', [input.s, input.s, input.s])\"}\n",
                            **flow("b", "  - {from: b, to: done}\n")}, TOOLS)
    from flowctl.engine.payload import MAX_PAYLOAD

    result = Harness(root).run(input={"s": "x" * (MAX_PAYLOAD // 2)})
    assert result.status == "failed" and result.error["state"] == "b"
    assert result.error["code"] == "PAYLOAD_TOO_LARGE"
