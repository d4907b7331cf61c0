"""`flowctl test`: exit codes, output, --min-coverage, --suggest, --junit, --contracts (issue 7)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from flowctl.cli.main import main
from support.testingkit import OK_MOCKS, pay_contract, project

REPO = Path(__file__).resolve().parents[1]

PASSES = "input: {id: X-1}\n" + OK_MOCKS + "expect: {path: [lookup, pay, done], status: succeeded}\n"
FAILS = """
description: expects a payment, but lookup says missing
input: {id: X-1}
mocks:
  lookup: {output: {status: missing}}
expect: {path: [lookup, pay, done], status: succeeded}
"""


def flowctl(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_all_passing_cases_exit_0_with_the_coverage_table(tmp_path):
    root = project(tmp_path, cases={"pays.yaml": PASSES})
    code, out = flowctl("test", "--root", str(root))
    assert code == 0, out
    assert "PASS  f/pays  (3 steps)" in out
    assert "coverage (exercised by the golden cases / all):" in out
    assert "1 passed, 0 failed in " in out


def test_a_failing_case_exits_1_with_its_path_diff_and_junit_is_well_formed(tmp_path):
    root = project(tmp_path, cases={"pays.yaml": PASSES, "fails.yaml": FAILS})
    report = tmp_path / "out" / "junit.xml"
    code, out = flowctl("test", "f", "--root", str(root), "--junit", str(report))
    assert code == 1
    assert "FAIL  f/fails" in out
    assert "      path differs from step 2 (- expected, + actual):" in out
    assert "          +   2  rejected" in out
    assert "1 passed, 1 failed" in out
    tree = ET.parse(report)  # well-formed, or this raises
    suites = tree.getroot()
    assert suites.tag == "testsuites" and suites.get("tests") == "2" and suites.get("failures") == "1"
    (suite,) = suites.findall("testsuite")
    assert suite.get("name") == "flowctl.f" and suite.get("errors") == "0"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["coverage.transitions"] == "3/6 50.0%"  # what a failing case exercised counts too
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"pays", "fails"}
    assert cases["pays"].find("failure") is None
    failure = cases["fails"].find("failure")
    assert failure.get("message") == "path differs from step 2 (- expected, + actual):"
    assert "+   2  rejected" in failure.text
    assert cases["fails"].get("file") == "orchestration/tests/f/fails.yaml"


def test_junit_survives_control_characters(tmp_path):
    from flowctl.testing import junit
    from flowctl.testing.cases import load_cases
    from flowctl.testing.runner import run_cases

    import flowctl as fc

    root = project(tmp_path, cases={"odd.yaml": FAILS})
    proj = fc.load_project(root)
    results = run_cases(proj, load_cases(proj)[0])
    results[0].problems.append("a \x00 nul, a bell \a, \x1b[31mcolour\x1b[0m and a \ud800 surrogate")
    target = tmp_path / "j.xml"
    junit.write(target, results)
    ET.parse(target)


def test_coverage_below_the_minimum_exits_1_and_names_what_is_missing(tmp_path):
    root = project(tmp_path, cases={"pays.yaml": PASSES})
    code, out = flowctl("test", "--root", str(root), "--min-coverage", "100")
    assert code == 1
    assert "coverage of f transitions is 33.3%, below --min-coverage 100%" in out
    assert "    not exercised: lookup → rejected (default)" in out
    assert "coverage of f handlers is 0.0%" in out
    code, _ = flowctl("test", "--root", str(root), "--min-coverage", "10")
    assert code == 1  # handlers 0 %
    code, _ = flowctl("test", "--root", str(root), "--min-coverage", "0")
    assert code == 0


def test_suggest_prints_a_skeleton_per_uncovered_item(tmp_path):
    root = project(tmp_path, cases={"pays.yaml": PASSES})
    code, out = flowctl("test", "--root", str(root), "--suggest")
    assert code == 0
    assert "uncovered transition: lookup → review_it when response.status == 'unsure'" in out
    assert "skeleton (built from case 'pays') for orchestration/tests/f/lookup_to_review_it.yaml:" in out
    assert "uncovered handler: review_it on_timeout → goto rejected" in out
    assert "    - {timeout: true}" in out


def test_suggest_works_before_the_first_case(tmp_path):
    root = project(tmp_path)
    code, out = flowctl("test", "--root", str(root), "--suggest")
    assert code == 0
    assert "skeleton (built from the JSON Schemas)" in out
    code, out = flowctl("test", "--root", str(root))
    assert code == 2 and "no golden cases in orchestration/tests/<flow>/" in out


def test_malformed_cases_and_unknown_flows_exit_2_located(tmp_path):
    root = project(tmp_path, cases={"bad.yaml": PASSES.replace("expect:", "expectt: {}\nexpect:")})
    code, out = flowctl("test", "--root", str(root))
    assert code == 2
    assert "orchestration/tests/f/bad.yaml:" in out and "FT011 unknown field 'expectt'" in out
    assert "hint: did you mean 'expect'?" in out
    code, out = flowctl("test", "g", "--root", str(root))
    assert code == 2 and "no flow 'g'" in out
    code, out = flowctl("test", "--root", str(root), "--contracts", "--min-coverage", "100")
    assert code == 2 and "--min-coverage and --suggest are about golden cases" in out
    code, out = flowctl("test", "--root", str(root), "--min-coverage", "120")
    assert code == 2


def test_a_single_case_file_can_be_run(tmp_path):
    root = project(tmp_path, cases={"pays.yaml": PASSES, "fails.yaml": FAILS})
    code, out = flowctl("test", str(root / "orchestration" / "tests" / "f" / "pays.yaml"), "--root", str(root))
    assert code == 0 and "f/pays" in out and "f/fails" not in out


def test_contracts_exit_1_when_compensate_does_not_undo(tmp_path):
    root = project(tmp_path, **{"contracts/pay.v1.0.0.yaml": pay_contract(compensate="tk:undo_pay_noop")})
    junit = tmp_path / "c.xml"
    code, out = flowctl("test", "--contracts", "--root", str(root), "--junit", str(junit))
    assert code == 1
    assert "FAIL  pay@1.0.0: pay 10 for X-1  (sandbox tk:flowctl_sandbox)" in out
    assert "verify after compensate is false: FAILED — verify still says the effect happened" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("name") == "flowctl.contracts" and suite.get("failures") == "1"
    root = project(tmp_path, name="good")
    code, out = flowctl("test", "--contracts", "--root", str(root))
    assert code == 0 and "PASS  pay@1.0.0: pay 10 for X-1" in out
    assert ("invoke · verify after invoke is true · verify without the output is true · compensate · "
            "verify after compensate is false") in out


def test_make_test_on_the_examples_full_coverage_and_contracts(run_flowctl, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWCTL_SHOP_DB", str(tmp_path / "never-used.db"))
    out = run_flowctl(["test", "--min-coverage", "100"], REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.startswith("  ") and "%" in line}
    assert rows["order_return"][2:6] == ["13/13", "100%", "7/7", "100%"]
    assert rows["outbound_report"][2:6] == ["3/3", "100%", "2/2", "100%"]
    out = run_flowctl(["test", "--contracts"], REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS  refund_payment@3.2.0" in out.stdout and "PASS  send_email@1.1.0" in out.stdout
    assert not (tmp_path / "never-used.db").exists()


def test_contracts_refuse_a_project_with_validate_errors_naming_the_first(tmp_path):
    alias = "id: sendalias\nversion: 1.0.0\nentrypoint: tk:pay\nexamples:\n  - input: {id: X-9, amount: 5}\n"
    root = project(tmp_path, **{"contracts/sendalias.v1.0.0.yaml": alias})
    code, out = flowctl("test", "--contracts", "--root", str(root))
    assert code == 1, out  # a definition error is a finding, as validate says
    assert "definition errors" in out and "[FC704]" in out and "contracts/" in out
    assert "PASS" not in out and "invoke" not in out  # nothing ran


def test_a_case_of_a_flow_whose_state_file_does_not_load_is_refused_at_that_file(tmp_path):
    root = project(tmp_path, cases={"pays.yaml": PASSES}, **{"states/done.yaml": "id: done\ntype: succeed\n  bad: [\n"})
    code, out = flowctl("test", "--root", str(root))
    assert code == 1, out
    assert "flow 'f' has definition errors: orchestration/states/done.yaml:3:6: cannot parse" in out


def test_a_folder_of_cases_outside_the_project_runs_when_named_for_its_flow(tmp_path):
    root = project(tmp_path, cases={"pays.yaml": PASSES})
    elsewhere = tmp_path / "shared-cases" / "f"
    elsewhere.mkdir(parents=True)
    (elsewhere / "pays.yaml").write_text((root / "orchestration/tests/f/pays.yaml").read_text())
    code, out = flowctl("test", str(elsewhere), "--root", str(root))
    assert code == 0 and "1 passed, 0 failed" in out, out
    wrong = tmp_path / "shared-cases" / "g"
    wrong.mkdir()
    code, out = flowctl("test", str(wrong), "--root", str(root))
    assert code == 2 and "is named for the flow its cases run, and there is no flow 'g'" in out, out
