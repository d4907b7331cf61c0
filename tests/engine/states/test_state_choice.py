"""``type: choice`` (flowctl.engine.states.choice): the state does nothing itself; the previous
state's response stays in scope and the first transition that holds decides."""
from __future__ import annotations

from support.enginekit import Harness, build, contract, task
from support.engineflows import TOOLS, flow

ROUTE = ("  - {from: a, to: pick}\n"
         "  - {from: pick, to: big, when: 'response.value > `10`'}\n"
         "  - {from: pick, to: done}\n"
         "  - {from: big, to: done}\n")


def test_a_choice_routes_on_the_response_of_the_state_before_it(tmp_path):
    root = build(tmp_path, {**contract("ok", "ok"), **task("a", "ok@1.0.0", extra="input: {value: input.value}\n"),
                            "states/pick.yaml": "id: pick\ntype: choice\n",
                            "states/big.yaml": "id: big\ntype: pass\nset: {seen: response.value}\n", **flow("a", ROUTE)},
                 TOOLS)
    assert Harness(root).run(input={"value": 12}).path == ["a", "pick", "big", "done"]
    small = Harness(root).run(input={"value": 3})
    assert small.path == ["a", "pick", "done"] and small.output == {}


def test_the_response_passes_through_a_choice_unchanged(tmp_path):
    root = build(tmp_path, {**contract("ok", "ok"), **task("a", "ok@1.0.0", extra="input: {value: input.value}\n"),
                            "states/pick.yaml": "id: pick\ntype: choice\n",
                            "states/big.yaml": "id: big\ntype: pass\nset: {seen: response.value}\n", **flow("a", ROUTE)},
                 TOOLS)
    result = Harness(root).run(input={"value": 12})
    assert result.output == {"seen": 12}
