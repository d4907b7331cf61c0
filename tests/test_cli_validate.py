"""`flowctl validate` (and `flowctl schema`) through the installed console script."""
from __future__ import annotations

import json
import re

import pytest

from support.helpers import MINIMAL

FLOW = "orchestration/transitions/flow.yaml"
UNKNOWN_TARGET = {
    **MINIMAL,
    "transitions/flow.yaml": "flow: flow\nstart: begin\ntransitions:\n  - from: begin\n    when: input.x\n"
                             "    to: done\n  - from: begin\n    to: Missing\n",
}
UNUSED = {**MINIMAL, "states/lonely.yaml": "id: lonely\ntype: succeed\n"}


def output(result):
    return result.stdout + result.stderr


# ------------------------------------------------------------------ exit codes
def test_clean_project_exits_0(make_project, run_flowctl):
    r = run_flowctl(["validate"], make_project(MINIMAL))
    assert r.returncode == 0, output(r)
    assert r.stdout.strip() == "no problems found (3 files checked)"


def test_errors_exit_1_with_a_located_line(make_project, run_flowctl):
    r = run_flowctl(["validate"], make_project(UNKNOWN_TARGET))
    assert r.returncode == 1
    assert f"{FLOW}:8:9: error FC101 unknown state 'Missing' [unknown-state]" in r.stdout
    assert r.stdout.strip().endswith("1 error, 0 warnings in 1 file (3 files checked)")


def test_warnings_alone_exit_0_and_1_with_strict(make_project, run_flowctl):
    root = make_project(UNUSED)
    r = run_flowctl(["validate"], root)
    assert r.returncode == 0
    assert "orchestration/states/lonely.yaml:1:5: warning FC104" in r.stdout
    strict = run_flowctl(["validate", "--strict"], root)
    assert strict.returncode == 1
    assert "FC104" in strict.stdout


def test_no_orchestration_folder_exits_2(tmp_path, run_flowctl):
    (tmp_path / "elsewhere").mkdir()
    r = run_flowctl(["validate"], tmp_path / "elsewhere")
    assert r.returncode == 2
    assert "error: [PROJECT] no orchestration/ folder" in r.stderr
    assert "hint:" in r.stderr


def test_missing_path_exits_2(make_project, run_flowctl):
    r = run_flowctl(["validate", "orchestration/states/nope.yaml"], make_project(MINIMAL))
    assert r.returncode == 2
    assert "error: [USAGE] no such file or folder" in r.stderr


def test_unknown_format_is_a_usage_error(make_project, run_flowctl):
    r = run_flowctl(["validate", "--format", "xml"], make_project(MINIMAL))
    assert r.returncode == 2


# ------------------------------------------------------------------ which files, which paths
def test_root_option_and_paths_relative_to_the_current_folder(make_project, run_flowctl, tmp_path):
    root = make_project(UNKNOWN_TARGET, name="repo")
    (tmp_path / "outside").mkdir()
    r = run_flowctl(["validate", "--root", str(root)], tmp_path / "outside")
    assert r.returncode == 1
    assert f"../repo/{FLOW}:8:9: error FC101" in r.stdout


def test_run_from_a_subfolder_finds_the_root(make_project, run_flowctl):
    root = make_project(UNKNOWN_TARGET)
    r = run_flowctl(["validate"], root / "orchestration" / "transitions")
    assert r.returncode == 1
    assert "flow.yaml:8:9: error FC101" in r.stdout


def test_a_single_file_reports_only_its_problems(make_project, run_flowctl):
    root = make_project({**UNKNOWN_TARGET, "states/lonely.yaml": "id: lonely\ntype: succeed\n"})
    only_state = run_flowctl(["validate", "orchestration/states/lonely.yaml"], root)
    assert only_state.returncode == 0  # the flow's error is not this file's
    assert "FC104" in only_state.stdout and "FC101" not in only_state.stdout
    only_flow = run_flowctl(["validate", FLOW], root)
    assert only_flow.returncode == 1
    assert "FC101" in only_flow.stdout and "FC104" not in only_flow.stdout


# ------------------------------------------------------------------ formats
def test_format_json(make_project, run_flowctl):
    r = run_flowctl(["validate", "--format", "json"], make_project(UNKNOWN_TARGET))
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert (data["errors"], data["warnings"]) == (1, 0)
    (d,) = data["diagnostics"]
    assert (d["code"], d["file"], d["line"], d["column"], d["severity"]) == ("FC101", FLOW, 8, 9, "error")


def test_format_github(make_project, run_flowctl):
    r = run_flowctl(["validate", "--format", "github"], make_project(UNKNOWN_TARGET))
    assert r.returncode == 1
    assert re.fullmatch(
        r"::error file=orchestration/transitions/flow\.yaml,line=8,col=9,title=FC101 unknown-state::unknown state 'Missing'.*",
        r.stdout.strip())


def test_format_sarif(make_project, run_flowctl):
    r = run_flowctl(["validate", "--format", "sarif"], make_project(UNKNOWN_TARGET))
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert data["version"] == "2.1.0"
    (result,) = data["runs"][0]["results"]
    assert result["ruleId"] == "FC101"
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": 8, "startColumn": 9}


def test_clean_project_in_machine_formats(make_project, run_flowctl):
    root = make_project(MINIMAL)
    assert json.loads(run_flowctl(["validate", "--format", "json"], root).stdout)["diagnostics"] == []
    gh = run_flowctl(["validate", "--format", "github"], root)
    assert (gh.returncode, gh.stdout.strip()) == (0, "")


# ------------------------------------------------------------------ --import-check
def test_import_check_reports_a_missing_function_at_the_contract_line(make_project, run_flowctl):
    root = make_project({
        "states/done.yaml": "id: done\ntype: succeed\n",
        "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\n",
        "transitions/flow.yaml": "flow: flow\nstart: t\ntransitions:\n  - from: t\n    to: done\n",
        "tools/shop.py": "def charge(input, call):\n    return {}\n",
        "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: shop:pay\n",
    })
    plain = run_flowctl(["validate"], root)  # read from the source, nothing imported (FC608)
    assert plain.returncode == 1
    assert "orchestration/contracts/pay.v1.0.0.yaml:3:13: error FC608 entrypoint shop:pay: module 'shop' defines no 'pay'" in plain.stdout
    r = run_flowctl(["validate", "--import-check"], root)
    assert r.returncode == 1
    assert "orchestration/contracts/pay.v1.0.0.yaml:3:13: error FC603 entrypoint shop:pay: module 'shop' has no 'pay'" in r.stdout


def test_import_check_reports_a_missing_module(make_project, run_flowctl):
    root = make_project({
        "states/done.yaml": "id: done\ntype: succeed\n",
        "states/t.yaml": "id: t\ntype: task\ntool: pay@^1\n",
        "transitions/flow.yaml": "flow: flow\nstart: t\ntransitions:\n  - from: t\n    to: done\n",
        "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: nowhere_tools:pay\n",
    })
    r = run_flowctl(["validate", "--import-check"], root)
    assert r.returncode == 1
    assert "pay.v1.0.0.yaml:3:13: error FC603 entrypoint nowhere_tools:pay: cannot import module 'nowhere_tools'" in r.stdout


# ------------------------------------------------------------------ no input makes it crash
NASTY = {
    "binary junk": (bytes(range(256)) * 4, "FC001"),
    "invalid utf-8": (b"id: caf\xe9\ntype: succeed\n", "FC001"),
    "NUL byte": (b"id: a\x00\n", "FC001"),
    "deep nesting": ("[" * 5000 + "]" * 5000, "FC001"),
    "deep mapping nesting": ("a: " + "{b: " * 300 + "1" + "}" * 300 + "\n", "FC003"),
    "list at top level": ("- id: nasty\n- type: succeed\n", "FC010"),
    "scalar at top level": ("hello\n", "FC010"),
    "empty file": ("", "FC010"),
    "only a comment": ("# nothing here\n", "FC010"),
    "only a document marker": ("---\n", "FC010"),
    "tabs": ("id: nasty\ntype: succeed\nset:\n\tx: 1\n", "FC001"),
    "billion laughs": ("a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")), "FC003"),
    "python tag": ('id: nasty\ntype: !!python/object/apply:os.system ["echo pwned"]\n', "FC007"),
    "deep expression": ("id: nasty\ntype: pass\nset:\n  x: \"" + "(" * 3000 + "a" + ")" * 3000 + "\"\n", "FC401"),
    "huge file": (b"id: nasty\ndescription: " + b"x" * (1 << 20) + b"\n", "FC003"),
    "multi document": ("id: nasty\n---\nid: other\n", "FC001"),
    "wrong types everywhere": ("id: [1]\ntype: {a: b}\nretry: 7\non_error: {x: 1}\n", "FC010"),
}


@pytest.mark.parametrize("name", sorted(NASTY))
def test_no_file_content_makes_validate_print_a_traceback(make_project, run_flowctl, name):
    content, code = NASTY[name]
    root = make_project({**MINIMAL, "states/nasty.yaml": content})
    r = run_flowctl(["validate"], root)
    out = output(r)
    assert "Traceback" not in out
    assert "internal error" not in out
    assert r.returncode == 1, out
    assert re.search(rf"orchestration/states/nasty\.yaml:\d+:\d+: error {code} ", r.stdout), out


@pytest.mark.parametrize("name", ["binary junk", "tabs", "list at top level", "empty file"])
def test_nasty_flow_files_too(make_project, run_flowctl, name):
    content, code = NASTY[name]
    root = make_project({**MINIMAL, "transitions/flow.yaml": content})
    r = run_flowctl(["validate", "--format", "sarif"], root)
    assert "Traceback" not in output(r)
    assert r.returncode == 1
    assert code in {res["ruleId"] for res in json.loads(r.stdout)["runs"][0]["results"]}


# ------------------------------------------------------------------ flowctl schema
@pytest.mark.parametrize("kind", ["state", "flow", "contract", "policy", "project", "case"])
def test_schema_prints_the_json_schema(tmp_path, run_flowctl, kind):
    r = run_flowctl(["schema", kind], tmp_path)
    assert r.returncode == 0
    data = json.loads(r.stdout)
    assert data["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert data["$id"].endswith(f"/{kind}.json")


def test_the_cli_offers_every_schema_kind_the_library_has():
    from flowctl.cli.main import SCHEMA_KINDS as offered
    from flowctl.definition.kinds import SCHEMA_KINDS

    assert offered == SCHEMA_KINDS


def test_schema_of_an_unknown_kind_is_a_usage_error(tmp_path, run_flowctl):
    assert run_flowctl(["schema", "widget"], tmp_path).returncode == 2
