"""Where tool code may come from (flowctl.definition.toolpath): the repository only — the tools folder itself
and every module under it must resolve inside it, as definition files must (FC008)."""
from __future__ import annotations

import shutil

import pytest

import flowctl
from flowctl.check.checks import validate
from flowctl.errors import UsageError
from flowctl.engine.tools import resolve
from support.testingkit import pay_contract, project

PKG_CONTRACT = "id: bt\nversion: 1.0.0\nentrypoint: bt.mod:go\n"


def _tool_code_refused(root, ref):
    proj = flowctl.load_project(root)
    found = [d for d in validate(proj) if d.code == "FC606" and ref in d.message]
    assert found, [d.message for d in validate(proj)]
    assert "outside the repository" in found[0].message and found[0].file.startswith("orchestration/contracts/")
    assert found[0].line > 0
    with pytest.raises(UsageError) as err:
        resolve(ref, str(proj.orchestration / "tools"), proj.tool_packages)
    assert "outside the repository" in str(err.value) and "refused to run" in str(err.value)
    return err.value


def _with_bt(tmp_path, name):
    return project(tmp_path, name=name, **{"contracts/bt.v1.0.0.yaml": PKG_CONTRACT})


@pytest.mark.parametrize("linked", ["tools folder", "a package", "a module of a package"])
def test_tool_code_linked_outside_the_repository_is_refused_by_validate_and_run(tmp_path, linked):
    root = _with_bt(tmp_path, "p")
    tools = root / "orchestration" / "tools"
    (tools / "bt").mkdir()
    (tools / "bt" / "__init__.py").write_text("")
    (tools / "bt" / "mod.py").write_text("RAN = []\ndef go(input, call):\n    RAN.append(1)\n    return {}\n")
    elsewhere = tmp_path / "elsewhere"
    if linked == "tools folder":
        shutil.move(tools, elsewhere)
        tools.symlink_to(elsewhere)
        shown = "orchestration/tools"
    elif linked == "a package":
        shutil.move(tools / "bt", elsewhere)
        (tools / "bt").symlink_to(elsewhere)
        shown = "orchestration/tools/bt"
    else:
        elsewhere.mkdir()
        shutil.move(tools / "bt" / "mod.py", elsewhere / "mod.py")
        (tools / "bt" / "mod.py").symlink_to(elsewhere / "mod.py")
        shown = "orchestration/tools/bt/mod.py"
    exc = _tool_code_refused(root, "bt.mod:go")
    assert f"{shown} is a link to " in str(exc)
    _tool_code_refused(root, "tk:pay")  # any tool code: modules of the folder import each other


def test_links_inside_the_repository_are_tool_code(tmp_path):
    root = project(tmp_path, **{"contracts/pay.v1.0.0.yaml": pay_contract()})
    tools = root / "orchestration" / "tools"
    shutil.move(tools, root / "shared_tools")
    tools.symlink_to(root / "shared_tools")
    proj = flowctl.load_project(root)
    assert [d for d in validate(proj) if d.code == "FC606"] == []
    assert callable(resolve("tk:pay", str(proj.orchestration / "tools")))
