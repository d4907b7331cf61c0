"""Golden case files: loading, the schema, located diagnostics for malformed cases (issue 7)."""
from __future__ import annotations

import flowctl
from flowctl.testing.cases import load_cases, parse_path
from support.testingkit import OK_MOCKS, project

GOOD = """
input: {id: X-1}
""" + OK_MOCKS + """
expect:
  path: [lookup, pay, done]
  status: succeeded
"""


def load(tmp_path, cases, **kw):
    root = project(tmp_path, cases=cases, **kw)
    return load_cases(flowctl.load_project(root))


def codes(diags):
    return [(d.code, d.line, d.column) for d in diags]


def test_a_good_case_loads_with_its_mocks_reviews_and_expectations(tmp_path):
    cases, diags = load(tmp_path, {"pays.yaml": GOOD + "reviews:\n  - {decision: approve, data: {n: 1}}\n"})
    assert diags == []
    (case,) = cases
    assert (case.flow, case.name, case.id, case.file) == ("f", "pays", "f/pays", "orchestration/tests/f/pays.yaml")
    assert case.expect.path == ["lookup", "pay", "done"] and case.expect.status == "succeeded"
    assert [m.has_output for m in case.mocks["lookup"]] == [True]
    assert case.mocks["lookup"][0].repeat  # one mapping: every call
    assert case.reviews[0].decision == "approve" and case.reviews[0].data == {"n": 1}


def test_path_may_be_written_as_trace_prints_it():
    assert parse_path("a → b ×3 → c") == ["a", "b", "b", "b", "c"]
    assert parse_path("a -> b x2") == ["a", "b", "b"]
    assert parse_path("a → b c") is None


def test_unknown_field_is_located_with_did_you_mean(tmp_path):
    text = GOOD.replace("expect:\n", "expcet: {}\nexpect:\n")
    cases, diags = load(tmp_path, {"typo.yaml": text})
    assert cases == []
    (d,) = diags
    assert d.code == "FT011" and d.file == "orchestration/tests/f/typo.yaml"
    assert "unknown field 'expcet'" in d.message and "expect" in d.hint
    line = text.lstrip("\n").splitlines().index("expcet: {}") + 1
    assert (d.line, d.column) == (line, 1)


def test_yaml_syntax_error_is_located(tmp_path):
    cases, diags = load(tmp_path, {"broken.yaml": "input: {id: X-1\nexpect: [\n"})
    assert cases == [] and diags and diags[0].code == "FC001" and diags[0].line >= 1
    cases, diags = load(tmp_path, {"dup.yaml": GOOD + "input: {id: X-2}\n"}, name="p2")
    assert cases == [] and [d.code for d in diags] == ["FC002"]


def test_a_mock_needs_output_or_error_not_both(tmp_path):
    text = GOOD.replace("    output: {status: ok, amount: 10}", "    output: {status: ok}\n    error: ToolUnavailable")
    cases, diags = load(tmp_path, {"both.yaml": text})
    assert cases == []
    (d,) = diags
    assert d.code == "FT010" and "either output or error" in d.message
    assert d.line == text.lstrip("\n").splitlines().index("  lookup:") + 2  # the entry's first line


def test_a_when_with_bad_syntax_is_located(tmp_path):
    text = GOOD.replace("  lookup:\n    output: {status: ok, amount: 10}",
                        "  lookup:\n    - when: \"input.id ==\"\n      output: {status: ok, amount: 10}")
    cases, diags = load(tmp_path, {"when.yaml": text})
    assert cases == []
    assert [d.code for d in diags] == ["FT401"] and "when:" in diags[0].message


def test_unknown_flow_folder_and_flow_field(tmp_path):
    root = project(tmp_path)
    (root / "orchestration/tests/fx").mkdir(parents=True)
    (root / "orchestration/tests/fx/a.yaml").write_text(GOOD)
    (root / "orchestration/tests/f").mkdir(parents=True)
    (root / "orchestration/tests/f/b.yaml").write_text("flow: g\n" + GOOD)
    (root / "orchestration/tests/stray.yaml").write_text(GOOD)
    cases, diags = load_cases(flowctl.load_project(root))
    assert cases == []
    found = {(d.code, d.file) for d in diags}
    assert ("FT101", "orchestration/tests/fx/a.yaml") in found
    assert ("FT101", "orchestration/tests/f/b.yaml") in found
    assert ("FT104", "orchestration/tests/stray.yaml") in found
    fx = next(d for d in diags if d.file.endswith("fx/a.yaml"))
    assert "did you mean 'f'" in fx.hint


def test_unknown_states_and_tools_are_warnings_and_the_case_still_runs(tmp_path):
    text = GOOD.replace("path: [lookup, pay, done]", "path: [lookup, pya, done]").replace(
        "  pay:\n    output: {payment: P-1, amount: 10, key: pay-1}",
        "  pay:\n    output: {payment: P-1, amount: 10, key: pay-1}\n  pay@^1:\n    output: {}")
    cases, diags = load(tmp_path, {"w.yaml": text})
    assert len(cases) == 1
    assert sorted((d.code, d.severity) for d in diags) == [("FT102", "warning"), ("FT103", "warning")]
    assert any("did you mean 'pay'" in d.hint for d in diags if d.code == "FT103")
    assert any("keyed by tool id: 'pay'" in d.hint for d in diags if d.code == "FT102")


def test_the_case_schema_ships_with_the_package():
    from flowctl.testing.cases import case_schema

    schema = case_schema()
    assert schema["$schema"].endswith("2020-12/schema")
    assert set(schema["properties"]) >= {"input", "mocks", "reviews", "expect"}


def test_a_printed_path_reads_back_as_the_same_path():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from flowctl.cli.commands._common import one_line_path

    assert one_line_path(["bump", "check"] * 50 + ["finished"]) == "(bump → check) ×50 → finished"

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from(["a", "b", "c", "d_1"]), max_size=40))
    def roundtrip(path):
        assert (parse_path(one_line_path(path)) or []) == path

    roundtrip()


def test_a_mocked_error_name_close_to_a_flowctl_error_is_a_typo_warning(tmp_path):
    # `ToolUnavailble` would raise a plain ToolError: the retry on ToolUnavailable never runs
    text = GOOD.replace("    output: {status: ok, amount: 10}", "    error: ToolUnavailble")
    cases, diags = load(tmp_path, {"typo.yaml": text})
    (d,) = diags
    assert (d.code, d.severity) == ("FT105", "warning") and "ToolUnavailable" in d.hint
    assert d.line == text.lstrip("\n").splitlines().index("    error: ToolUnavailble") + 1
    assert cases  # the case still runs
    for name in ("ToolUnavailable", "ValueError", "Payments.CardDeclined"):  # real or free names: silent
        assert load(tmp_path, {"ok.yaml": GOOD.replace("    output: {status: ok, amount: 10}", f"    error: {name}")},
                    name=f"p-{name}")[1] == []
