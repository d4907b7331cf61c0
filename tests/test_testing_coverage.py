"""Coverage of flows by golden cases, and the skeletons --suggest prints (issue 7)."""
from __future__ import annotations

from pathlib import Path

import yaml

import flowctl
from flowctl.testing import coverage
from flowctl.testing.cases import load_cases
from flowctl.testing.runner import run_cases
from support.testingkit import OK_MOCKS, project

REPO = Path(__file__).resolve().parents[1]

PAYS = "input: {id: X-1}\n" + OK_MOCKS + "expect: {path: [lookup, pay, done], status: succeeded}\n"
MISSING = """
input: {id: X-1}
mocks:
  lookup: {output: {status: missing}}
expect: {path: [lookup, rejected], status: failed}
"""
TIMEOUT = """
input: {id: X-1}
mocks:
  lookup: {output: {status: unsure, amount: 1}}
reviews: [{timeout: true}]
expect: {path: [lookup, review_it, rejected], status: failed}
"""


def covered(tmp_path, cases):
    root = project(tmp_path, cases=cases)
    proj = flowctl.load_project(root)
    loaded, _ = load_cases(proj)
    results = run_cases(proj, loaded)
    assert all(r.passed for r in results), [r.report() for r in results]
    return proj, results, coverage.compute(proj, ["f"], results)["f"]


def test_counts_transitions_handlers_and_error_edges(tmp_path):
    _, _, cov = covered(tmp_path, {"pays.yaml": PAYS, "missing.yaml": MISSING, "timeout.yaml": TIMEOUT})
    # transitions: lookup→pay, lookup→review_it, lookup→rejected, pay→done, review_it→pay, review_it→rejected
    assert cov.figure(coverage.TRANSITIONS)[:2] == (4, 6)
    # handlers: lookup on_error[0], review_it on_timeout, flow on_error[0], flow on_error[1]
    assert cov.figure(coverage.HANDLERS)[:2] == (1, 4)
    done, total, pct = cov.figure(coverage.EDGES)
    assert (done, total) == (1, 8) and round(pct, 1) == 12.5  # the on_timeout edge; flow handlers × 3 states
    assert cov.cases == 3
    uncovered = {i.label for i in cov.uncovered([coverage.TRANSITIONS])}
    assert uncovered == {"review_it → pay when review.decision == 'approve'", "review_it → rejected (default)"}
    by = {i.label: i.covered_by for i in cov.items[coverage.TRANSITIONS]}
    assert by["lookup → pay when response.status == 'ok'"] == ["pays"]
    assert cov.below(50) == [(coverage.HANDLERS, 25.0)]
    assert coverage.table({"f": cov}).splitlines()[1].split() == ["f", "3", "4/6", "67%", "1/4", "25%", "1/8", "12%"]


def test_handlers_and_edges_come_from_error_caught_events(tmp_path):
    nf = "input: {id: X-1}\nmocks:\n  lookup: {error: Lookup.NotFound}\nexpect: {path: [lookup, rejected], status: failed}\n"
    oserr = "input: {id: X-1}\nmocks:\n  lookup: {error: ConnectionError}\nexpect: {path: [lookup, failed], status: failed}\n"
    _, _, cov = covered(tmp_path, {"nf.yaml": nf, "os.yaml": oserr})
    assert {i.label for i in cov.items[coverage.HANDLERS] if i.covered} == {
        "lookup on_error[0] [Lookup.NotFound] → goto rejected", "flow on_error[0] [OSError] → goto failed"}
    assert {i.label for i in cov.items[coverage.EDGES] if i.covered} == {
        "lookup → rejected (on_error)", "lookup → failed (flow on_error)"}


def test_the_example_flows_are_fully_covered():
    proj = flowctl.load_project(REPO)
    cases, diags = load_cases(proj)
    assert not [d for d in diags if d.severity == "error"], diags
    results = run_cases(proj, cases)
    assert [r.case.id for r in results if not r.passed] == []
    covs = coverage.compute(proj, sorted(proj.flows), results)
    assert set(covs) == set(proj.flows) and {"order_return", "outbound_report", "shipment_sweep"} <= set(covs)
    for cov in covs.values():
        assert cov.figure(coverage.TRANSITIONS)[2] == 100.0, cov.uncovered([coverage.TRANSITIONS])
        assert cov.figure(coverage.HANDLERS)[2] == 100.0, cov.uncovered([coverage.HANDLERS])
        assert cov.below(100) == []
    assert covs["order_return"].figure(coverage.TRANSITIONS)[:2] == (13, 13)
    assert covs["order_return"].figure(coverage.HANDLERS)[:2] == (7, 7)
    assert covs["outbound_report"].figure(coverage.TRANSITIONS)[:2] == (3, 3)
    assert covs["outbound_report"].figure(coverage.HANDLERS)[:2] == (2, 2)


def test_suggest_gives_a_skeleton_that_reaches_the_uncovered_transition(tmp_path):
    proj, results, cov = covered(tmp_path, {"pays.yaml": PAYS})
    suggestions = coverage.suggest(proj, proj.flows["f"], cov, results)
    by_label = {s.item.label: s for s in suggestions}
    s = by_label["lookup → review_it when response.status == 'unsure'"]
    assert s.route == ["lookup"] and s.based_on == "pays"
    assert s.skeleton["mocks"]["lookup"]["output"]["status"] == "unsure"
    assert s.skeleton["expect"] == {"path": ["lookup", "review_it"], "status": "paused"}
    text = s.text()
    assert "uncovered transition: lookup → review_it when response.status == 'unsure'" in text
    assert "orchestration/tests/f/lookup_to_review_it.yaml" in text
    # the default out of lookup: the earlier rules must not hold
    default = by_label["lookup → rejected (default)"]
    assert default.skeleton["mocks"]["lookup"]["output"]["status"] == "missing"
    # a review's default: the decision is not 'approve'
    reject = by_label["review_it → rejected (default)"]
    assert reject.skeleton["reviews"] == [{"decision": "reject"}]
    assert reject.skeleton["mocks"]["lookup"]["output"]["status"] == "unsure"
    # a state handler: the tool raises the handled error
    nf = next(x for x in suggestions if x.item.label.startswith("lookup on_error[0]"))
    assert nf.skeleton["mocks"]["lookup"]["error"] == "Lookup.NotFound"
    # the skeletons run: written as cases (with the status the run reaches), they cover what they aim at
    root = tmp_path / "p" / "orchestration" / "tests" / "f"
    for name, sug, status in [("s1.yaml", s, "paused"), ("s2.yaml", default, "failed"), ("s3.yaml", reject, "failed"),
                              ("s4.yaml", nf, "failed")]:
        data = dict(sug.skeleton)
        data.pop("flow")
        data["expect"] = dict(data["expect"], status=status)
        (root / name).write_text(yaml.safe_dump(data, sort_keys=False))
    proj = flowctl.load_project(tmp_path / "p")
    cases, diags = load_cases(proj)
    assert not diags
    results = run_cases(proj, cases)
    assert [r.report() for r in results if not r.passed] == []
    cov = coverage.compute(proj, ["f"], results)["f"]
    assert cov.figure(coverage.TRANSITIONS)[:2] == (5, 6)  # only review_it → pay is left (its route pays twice)


def test_facts_of_conditions():
    assert coverage.facts("response.status == 'ok' && visits.x < `3`") == [
        ("eq", ["response", "status"], "ok"), ("lt", ["visits", "x"], 3)]
    assert coverage.facts("response.a.b == `true` || x") == [("eq", ["response", "a", "b"], True)]
    assert coverage.facts("length(x) > `1`") == []


def test_sample_values_fit_their_schema():
    from flowctl.definition.runtime_schemas import check_instance

    schema = {"type": "object", "required": ["a", "b", "c", "d"],
              "properties": {"a": {"enum": ["x", "y"]}, "b": {"type": "integer", "minimum": 3},
                             "c": {"type": "array", "minItems": 1, "items": {"type": "boolean"}},
                             "d": {"oneOf": [{"type": "null"}, {"type": "object", "properties": {"e": {"const": 1}},
                                                                 "required": ["e"]}]}}}
    value = coverage.sample(schema)
    assert value == {"a": "x", "b": 3, "c": [False], "d": {"e": 1}}
    assert check_instance(schema, value) is None


def test_suggest_says_so_when_an_earlier_rule_reads_what_the_skeleton_cannot_model(tmp_path):
    from support.helpers import write_project

    root = write_project(tmp_path / "c", {
        "contracts/inc.v1.0.0.yaml": "id: inc\nversion: 1.0.0\nentrypoint: t:inc\n"
                                     "output_schema: {type: object, properties: {count: {type: integer}}}\n",
        "tools/t.py": "def inc(input, call):\n    return {'count': 1}\n",
        "states/bump.yaml": "id: bump\ntype: task\ntool: inc@^1\ninput: {count: context.count}\n",
        "states/check.yaml": "id: check\ntype: choice\n",
        "states/finished.yaml": "id: finished\ntype: succeed\n",
        "transitions/counter.yaml": "flow: counter\nstart: bump\ntransitions:\n"
                                    "  - {from: bump, to: check, set: {count: response.count}}\n"
                                    "  - {from: check, to: finished, when: 'context.count >= input.target'}\n"
                                    "  - {from: check, to: bump}\n"})
    proj = flowctl.load_project(root)
    cov = coverage.compute(proj, ["counter"], [])["counter"]
    back = next(s for s in coverage.suggest(proj, proj.flows["counter"], cov) if s.item.label == "check → bump (default)")
    assert any("context.count >= input.target" in n and "does not model" in n for n in back.notes)
