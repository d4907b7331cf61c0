"""validate's checks of the gate's boundary (flowctl.check.gate): FC702 wherever a tool is named,
FC704 contracts on one function that disagree, FC606 tool code outside the project."""
from __future__ import annotations

import pytest

from support.helpers import of, problems, where

EFFECTS = "verify: m:v\ncompensate: m:u\nside_effects:\n  - {type: database_write, target: payments}\n"
BASE = {
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\n",
    "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\n" + EFFECTS,
    "policies/p.yaml": "policy: p\napplies_to: [pay]\nallow: []\n",
    "transitions/flow.yaml": "flow: flow\nstart: t\ntransitions:\n  - from: t\n    to: done\n",
    "tools/m.py": "def pay(input, call):\n    return {}\n",
}


def test_fc702_applies_to_a_reviews_notify_tool(make_project):
    root = make_project({**BASE, "states/t.yaml": "id: t\ntype: review\ndecisions: [ok]\nnotify: mail@^1\n",
                         "contracts/mail.v1.0.0.yaml": "id: mail\nversion: 1.0.0\nentrypoint: m:mail\n" + EFFECTS})
    (d,) = of(problems(root), "FC702")
    assert where(d) == ("orchestration/states/t.yaml", 4, 9) and "notify" in d.message and "'t'" in d.message


def test_fc702_applies_to_a_fallback_tool(make_project):
    root = make_project({**BASE, "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\non_error:\n"
                                                  "  - {errors: [ToolError], fallback: mail@^1}\n",
                         "contracts/mail.v1.0.0.yaml": "id: mail\nversion: 1.0.0\nentrypoint: m:mail\n" + EFFECTS})
    (d,) = of(problems(root), "FC702")
    assert d.line == 5 and "fallback" in d.message


def test_fc704_read_only_contract_on_a_side_effecting_function(make_project):
    root = make_project({**BASE, "contracts/peek.v1.0.0.yaml": "id: peek\nversion: 1.0.0\nentrypoint: m:pay\n"})
    diags = of(problems(root), "FC704")
    assert {d.file for d in diags} == {"orchestration/contracts/pay.v1.0.0.yaml", "orchestration/contracts/peek.v1.0.0.yaml"}
    assert all(d.severity == "error" for d in diags)
    assert any("peek@1.0.0 declares no side effects" in d.message for d in diags)


def test_fc704_alias_contract_governed_by_another_policy(make_project):
    root = make_project({**BASE, "contracts/alias.v1.0.0.yaml": "id: alias\nversion: 1.0.0\nentrypoint: m:pay\n" + EFFECTS,
                         "policies/loose.yaml": "policy: loose\napplies_to: [alias]\nallow: []\n"})
    diags = of(problems(root), "FC704")
    assert len(diags) == 2 and "governed by loose" in " ".join(d.message for d in diags)
    both = make_project({**BASE, "contracts/alias.v1.0.0.yaml": "id: alias\nversion: 1.0.0\nentrypoint: m:pay\n" + EFFECTS,
                         "policies/p.yaml": "policy: p\napplies_to: [pay, alias]\nallow: []\n"})
    assert of(problems(both), "FC704") == []  # the same policies govern both: they agree


@pytest.mark.parametrize("ref, why", [
    ("os:system", "standard library module"), ("builtins:eval", "standard library module"),
    ("subprocess:run", "standard library module"), ("m:__builtins__", "private and dunder"),
    ("m:os.system", None), ("pytest:main", "installed package"),
])
def test_fc606_tool_code_outside_the_project_is_refused(make_project, ref, why):
    root = make_project({**BASE, "contracts/pay.v1.0.0.yaml": f"id: pay\nversion: 1.0.0\nentrypoint: {ref}\n"})
    diags = of(problems(root), "FC606")
    if why is None:  # m is tool code: only the run-time check sees that m.os is the os module
        assert diags == []
        return
    (d,) = diags
    assert d.severity == "error" and why in d.message and "tool_packages" in d.hint


def test_fc606_a_tools_module_with_a_standard_library_name(make_project):
    root = make_project({**BASE, "tools/json.py": "def pay(input, call):\n    return {}\n",
                         "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: json:pay\n"})
    (d,) = of(problems(root), "FC606")
    assert "rename it" in d.message


def test_tool_packages_in_the_project_file_allow_an_installed_package(make_project):
    files = {**BASE, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: pytest:main\n"}
    assert of(problems(make_project({**files, "project.yaml": "tool_packages: [pytest]\n"})), "FC606") == []
    bad = problems(make_project({**files, "project.yaml": "tool_packages: [pytest.x]\nplugins: 1\n"}))
    assert {d.code for d in bad if d.file == "orchestration/project.yaml"} == {"FC010", "FC011"}


def test_policy_operand_expressions_are_linted_on_the_policy_scope(make_project):
    root = make_project({**BASE, "policies/p.yaml": "policy: p\napplies_to: [pay]\nallow:\n"
                         "  - {field: input.n, range: [0, {expr: contxt.total}]}\n"
                         "  - {field: input.to, all_in: {expr: run_input.allowed}}\n"})
    (d,) = of(problems(root), "FC406")
    assert d.line == 4 and "contxt" in d.message


def test_fc704_with_import_check_sees_a_function_reexported_under_another_name(make_project):
    mod = "gatechecks_reexport_m"  # a module name no other test imports
    root = make_project({**BASE, f"tools/{mod}.py": "def pay(input, call):\n    return {}\n",
                         f"tools/{mod}_alias.py": f"from {mod} import pay\n",
                         "contracts/pay.v1.0.0.yaml": f"id: pay\nversion: 1.0.0\nentrypoint: {mod}:pay\n" + EFFECTS,
                         "contracts/peek.v1.0.0.yaml": f"id: peek\nversion: 1.0.0\nentrypoint: {mod}_alias:pay\n"})
    assert of(problems(root), "FC704") == []  # different names: only importing tells
    diags = of(problems(root, import_check=True), "FC704")
    assert len(diags) == 2 and any("declares no side effects" in d.message for d in diags)


def test_tool_packages_cannot_list_the_standard_library(make_project):
    root = make_project({**BASE, "project.yaml": "tool_packages: [os, builtins]\n",
                         "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: os:system\n"})
    diags = of(problems(root), "FC606")
    assert {d.file for d in diags} == {"orchestration/project.yaml", "orchestration/contracts/pay.v1.0.0.yaml"}
    assert len(diags) == 3  # os and builtins in the project file, and os:system is still refused
