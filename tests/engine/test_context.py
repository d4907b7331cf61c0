"""What a run's expressions see (flowctl.engine.context, ``RunContext.scope``): ``input``,
``params`` (declared defaults overridden by the run's), ``run``, ``state``, ``context``."""
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
