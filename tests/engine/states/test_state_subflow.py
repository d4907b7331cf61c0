"""``type: subflow`` (flowctl.engine.states.subflow): one child run on the state's ``input``
mapping; the response is its output."""
from __future__ import annotations

from support.enginekit import Harness, build
from support.fanoutflows import CHILD, TOOLS, parent


def test_subflow_output_mapping(tmp_path):
    files = {**CHILD, **parent("id: fan\ntype: subflow\nflow: child\ninput: {name: input.who, n: '`21`'}\n")}
    result = Harness(build(tmp_path, files, TOOLS)).run(input={"who": "z"})
    assert result.output == {"name": "z", "double": 42}


def test_a_subflow_without_an_input_mapping_starts_its_child_on_an_empty_input(tmp_path):
    files = {"states/echo.yaml": "id: echo\ntype: pass\nset: {got: input}\n",
             "transitions/sub.yaml": "flow: sub\nstart: echo\ntransitions:\n  - {from: echo, to: done}\noutput: context.got\n",
             **parent("id: fan\ntype: subflow\nflow: sub\n")}
    h = Harness(build(tmp_path, files))
    result = h.run(input={"secret": "stays with the parent"})
    assert result.status == "succeeded" and result.output == {}
    (child,) = h.store.list_runs(parent_id=result.run_id, limit=0)
    assert child["flow"] == "sub" and child["input"] == {}
