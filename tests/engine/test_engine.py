"""The public face (flowctl.engine.engine.Engine): an unknown or broken flow is refused before it
runs, and a resumed run uses the definition snapshot it started with."""
from __future__ import annotations

import pytest

import flowctl

from support.enginekit import Harness, build
from support.engineflows import TOOLS, flow
from flowctl.errors import ProjectError, UsageError


def test_unknown_flow_and_flow_with_errors_are_refused(tmp_path):
    root = build(tmp_path, {"states/a.yaml": "id: a\ntype: choice\n", **flow("a", "  - {from: a, to: nowhere}\n")}, TOOLS)
    h = Harness(root)
    with pytest.raises(UsageError, match="no flow 'g'"):
        h.run("g")
    with pytest.raises(ProjectError, match="unknown state 'nowhere'"):
        h.run("f")

def test_a_parked_run_keeps_the_definition_it_started_with(tmp_path):
    from support.enginekit import sqlite_store

    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
                            "states/old_end.yaml": "id: old_end\ntype: pass\nset: {version: \"'old'\"}\n",
                            **flow("w", "  - {from: w, to: old_end}\n  - {from: old_end, to: done}\n")}, TOOLS)
    store = sqlite_store(tmp_path)
    h = Harness(root, store=store)
    parked = h.run()
    (root / "orchestration/transitions/f.yaml").write_text(
        "flow: f\nversion: 2\nstart: w\ntransitions:\n  - {from: w, to: done}\n  - {from: old_end, to: done}\n")
    h2 = Harness(root, store=store)
    h2.clock = h.clock
    h2.engine.clock = h.clock
    h.clock.advance(3601)
    result = h2.engine.resume(parked.run_id)
    assert result.path == ["w", "old_end", "done"]
    assert result.output == {"version": "old"}
    assert flowctl.load_project(root).flows["f"].version == 2  # the file did change


def test_a_flow_whose_own_file_does_not_load_is_refused_with_the_place_of_its_error(tmp_path):
    """(new-user finding: `flowctl run` said only "flow 'f' has errors and cannot run")"""
    import pytest

    import flowctl
    from flowctl.errors import DefinitionError
    from flowctl.store.sql import MemoryStore
    from support.enginekit import build

    root = build(tmp_path, {"transitions/f.yaml": "flow: f\nstart: done\ntransitions: [\n"})
    engine = flowctl.Engine(flowctl.load_project(root), MemoryStore())
    with pytest.raises(DefinitionError) as caught:
        engine.run("f", {})
    assert "orchestration/transitions/f.yaml:4:1: cannot parse" in str(caught.value)  # the end of the unclosed list
