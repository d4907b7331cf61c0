"""What a flow depends on (flowctl.engine.flowfiles): a flow whose state file did not parse, or
whose child flow names a missing part, is refused before it runs, naming the file."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build, contract, task


def test_a_flow_whose_state_or_child_flow_did_not_load_is_refused_before_it_runs(tmp_path):
    from flowctl.errors import ProjectError

    files = {**contract("echo", "echo"), **task("a", "echo@1.0.0"),
             "states/b.yaml": "id: b\ntype: task\ntool: echo@1.0.0\ninput: {x: `0`}\n",  # a backtick: YAML refuses it
             "states/fan.yaml": "id: fan\ntype: parallel\nbranches: [nowhere]\n",
             "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: b}\n  - {from: b, to: done}\n",
             "transitions/g.yaml": "flow: g\nstart: fan\ntransitions:\n  - {from: fan, to: done}\n"}
    h = Harness(build(tmp_path, files, "def echo(input, call):\n    return {}\n"))
    with pytest.raises(ProjectError, match=r"states/b\.yaml:4:\d+: cannot parse"):
        h.run("f")
    with pytest.raises(ProjectError, match="nowhere"):
        h.run("g")
