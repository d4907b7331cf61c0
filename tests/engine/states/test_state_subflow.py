"""``type: subflow`` (flowctl.engine.states.subflow): one child run on the state's ``input``
mapping; the response is its output."""
from __future__ import annotations

from support.enginekit import Harness, build
from support.fanoutflows import CHILD, TOOLS, parent


def test_subflow_output_mapping(tmp_path):
    files = {**CHILD, **parent("id: fan\ntype: subflow\nflow: child\ninput: {name: input.who, n: '`21`'}\n")}
    result = Harness(build(tmp_path, files, TOOLS)).run(input={"who": "z"})
    assert result.output == {"name": "z", "double": 42}
