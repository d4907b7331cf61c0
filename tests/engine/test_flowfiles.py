"""What a flow depends on (flowctl.engine.flowfiles): a flow whose state file did not parse, or
whose child flow names a missing part, is refused before it runs, naming the file; the files a flow
depends on."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, allow_all, build, contract, effect_contract, task


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


def test_the_files_a_flow_depends_on_are_its_own_its_states_their_contracts_and_policies(tmp_path):
    import flowctl
    from flowctl.engine.flowfiles import flow_files, started_flows

    files = {**effect_contract("pay", "pay"), **allow_all("pay"), **task("a", "pay@1.0.0"),
             "states/fan.yaml": "id: fan\ntype: subflow\nflow: g\n",
             "policies/other.yaml": "policy: other\napplies_to: [elsewhere]\nallow: []\n",
             "states/unused.yaml": "id: unused\ntype: pass\n",
             "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: fan}\n  - {from: fan, to: done}\n",
             "transitions/g.yaml": "flow: g\nstart: done\ntransitions: []\n"}
    project = flowctl.load_project(build(tmp_path, files))
    flow = project.flows["f"]
    expected = {"transitions/f.yaml", "states/a.yaml", "states/fan.yaml", "states/done.yaml", "contracts/pay.v1.0.0.yaml",
                "policies/allow_all.yaml"}  # not g's files: the child flow is checked on its own
    assert flow_files(project, flow) == {f"orchestration/{f}" for f in expected}
    assert started_flows(project, flow) == ["g"]


CHECKED = {**contract("echo", "echo"), **task("a", "echo@1.0.0"),
           "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: done}\n"}
ECHO = "def echo(input, call):\n    return {}\n"


def _count_validations(monkeypatch) -> list:
    import flowctl.check.checks as checks

    calls = []
    real = checks.validate

    def counted(project, *a, **kw):
        calls.append(project.digest())
        return real(project, *a, **kw)

    monkeypatch.setattr(checks, "validate", counted)
    return calls


def test_a_definition_that_passed_the_pre_run_check_is_not_validated_again(tmp_path, monkeypatch):
    root = build(tmp_path, CHECKED, ECHO)
    calls = _count_validations(monkeypatch)
    assert Harness(root).run("f").status == "succeeded"
    assert len(calls) == 1 and (root / ".flowctl" / "cache" / "checked-v1.json").is_file()
    assert Harness(root).run("f").status == "succeeded"  # another process, the same files
    assert len(calls) == 1


def test_a_changed_file_is_checked_again_before_it_runs(tmp_path, monkeypatch):
    from flowctl.errors import ProjectError

    root = build(tmp_path, CHECKED, ECHO)
    calls = _count_validations(monkeypatch)
    assert Harness(root).run("f").status == "succeeded"
    (root / "orchestration" / "states" / "a.yaml").write_text("id: a\ntype: task\ntool: echo@1.0.0\ninput: {x: nope.x}\n")
    with pytest.raises(ProjectError, match=r"states/a\.yaml"):
        Harness(root).run("f")
    assert len(calls) == 2


def test_a_cache_that_does_not_parse_only_means_checking_again(tmp_path, monkeypatch):
    root = build(tmp_path, CHECKED, ECHO)
    calls = _count_validations(monkeypatch)
    assert Harness(root).run("f").status == "succeeded"
    (root / ".flowctl" / "cache" / "checked-v1.json").write_text("{not json")
    assert Harness(root).run("f").status == "succeeded"
    assert len(calls) == 2
    assert Harness(root).run("f").status == "succeeded"
    assert len(calls) == 2
