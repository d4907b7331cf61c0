"""``type: parallel`` (flowctl.engine.states.parallel): one child run per flow in ``branches``, each
on the same input (the state's ``input`` mapping, else the run's input); the response is their
outputs in branch order."""
from __future__ import annotations

from support.enginekit import Harness, build

ECHO = "id: echo\ntype: pass\nset: {got: input, flow: run.flow}\n"


def _project(tmp_path, fan_input=""):
    files = {"states/echo.yaml": ECHO,
             "states/fan.yaml": "id: fan\ntype: parallel\nbranches: [left, right]\n" + fan_input,
             "transitions/left.yaml": "flow: left\nstart: echo\ntransitions:\n  - {from: echo, to: done}\n",
             "transitions/right.yaml": "flow: right\nstart: echo\ntransitions:\n  - {from: echo, to: done}\n",
             "transitions/f.yaml": "flow: f\nstart: fan\ntransitions:\n  - {from: fan, to: done, set: {out: response}}\n"
                                   "output: context.out\n"}
    return build(tmp_path, files)


def test_every_branch_runs_on_the_run_input_without_an_input_mapping(tmp_path):
    h = Harness(_project(tmp_path))
    result = h.run(input={"order": 7})
    assert result.status == "succeeded"
    assert result.output == [{"got": {"order": 7}, "flow": "left"}, {"got": {"order": 7}, "flow": "right"}]
    children = h.store.list_runs(parent_id=result.run_id, limit=0)
    assert sorted(c["flow"] for c in children) == ["left", "right"]


def test_the_input_mapping_is_what_every_branch_gets(tmp_path):
    result = Harness(_project(tmp_path, "input: {id: input.order, twice: 'multiply(input.order, `2`)'}\n")).run(
        input={"order": 7, "secret": "not passed on"})
    assert [o["got"] for o in result.output] == [{"id": 7, "twice": 14}, {"id": 7, "twice": 14}]
