"""flowctl.check.render: text, json, github and sarif renderings of diagnostics."""
from __future__ import annotations

import json
import re

import pytest

from flowctl.check import render as report
from flowctl.diagnostics import CODES, Diagnostic

DIAGS = [
    Diagnostic("FC101", "unknown state 'Missing'", "orchestration/transitions/flow.yaml", 9, 9,
               hint="add orchestration/states/Missing.yaml"),
    Diagnostic("FC104", "state 'x' is not used by any flow", "orchestration/states/x.yaml", 1, 5),
    Diagnostic("FC002", "duplicate key 'to' (first at line 7, again at line 8)", "orchestration/transitions/flow.yaml", 8, 5,
               hint="keep one 'to'"),
]


def display(d):
    return d.file


# ------------------------------------------------------------------ Diagnostic
def test_severity_defaults_from_the_codes_table():
    assert Diagnostic("FC101", "m").severity == "error"
    assert Diagnostic("FC104", "m").severity == "warning"
    assert Diagnostic("FC601", "m", severity="warning").severity == "warning"
    assert Diagnostic("FC101", "m", "f.yaml", 3, 7).location == "f.yaml:3:7"
    assert Diagnostic("FC101", "m").slug == "unknown-state"


# ------------------------------------------------------------------ text
def test_text_lines_carry_file_line_column_severity_code_and_slug():
    out = report.text(DIAGS, display, checked=4)
    lines = out.splitlines()
    assert "orchestration/transitions/flow.yaml:9:9: error FC101 unknown state 'Missing' [unknown-state]" in lines
    assert "    hint: add orchestration/states/Missing.yaml" in lines
    assert "orchestration/states/x.yaml:1:5: warning FC104 state 'x' is not used by any flow [unused-state]" in lines
    assert lines[-1] == "2 errors, 1 warning in 2 files (4 files checked)"
    assert "\x1b[" not in out  # no colour unless asked


def test_text_colour_only_when_asked():
    assert "\x1b[" in report.text(DIAGS, display, color=True)


def test_text_summary_singular_and_clean():
    assert report.text([], display) == "no problems found"
    assert report.text([], display, checked=3) == "no problems found (3 files checked)"
    assert report.text(DIAGS[:1], display).splitlines()[-1] == "1 error, 0 warnings in 1 file"


# ------------------------------------------------------------------ json
def test_json_has_every_field_and_counts():
    data = json.loads(report.as_json(DIAGS, display))
    assert (data["errors"], data["warnings"]) == (2, 1)
    first = data["diagnostics"][0]
    assert first == {
        "code": "FC101", "name": "unknown-state", "severity": "error",
        "file": "orchestration/transitions/flow.yaml", "line": 9, "column": 9,
        "message": "unknown state 'Missing'", "hint": "add orchestration/states/Missing.yaml",
    }


def test_json_uses_the_display_path():
    data = json.loads(report.as_json(DIAGS, lambda d: "../repo/" + d.file))
    assert data["diagnostics"][1]["file"] == "../repo/orchestration/states/x.yaml"


def test_json_of_nothing():
    assert json.loads(report.as_json([], display)) == {"diagnostics": [], "errors": 0, "warnings": 0}


# ------------------------------------------------------------------ github
GH = re.compile(r"^::(error|warning) file=([^,]+),line=(\d+),col=(\d+),title=([^:]+)::(.+)$")


def test_github_annotations_match_the_workflow_command_format():
    lines = report.github(DIAGS, display).splitlines()
    assert len(lines) == 3
    parsed = [GH.match(line).groups() for line in lines]
    assert parsed[0] == ("error", "orchestration/transitions/flow.yaml", "9", "9", "FC101 unknown-state",
                         "unknown state 'Missing' (hint: add orchestration/states/Missing.yaml)")
    assert parsed[1][:5] == ("warning", "orchestration/states/x.yaml", "1", "5", "FC104 unused-state")


def test_github_escapes_newlines_percent_and_property_separators():
    d = Diagnostic("FC401", "bad\nexpression 100%", "dir,with:odd/f.yaml", 2, 3)
    (line,) = report.github([d], display).splitlines()
    assert line == "::error file=dir%2Cwith%3Aodd/f.yaml,line=2,col=3,title=FC401 expression-syntax::bad%0Aexpression 100%25"


# ------------------------------------------------------------------ sarif
# The part of SARIF 2.1.0 (sarif-schema-2.1.0.json) that code scanning reads, written out here.
SARIF_SUBSET = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string"},
        "runs": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["tool", "results"],
            "properties": {
                "tool": {"type": "object", "required": ["driver"], "properties": {"driver": {
                    "type": "object", "required": ["name", "rules"],
                    "properties": {
                        "name": {"type": "string"},
                        "version": {"type": "string"},
                        "rules": {"type": "array", "items": {
                            "type": "object", "required": ["id"],
                            "properties": {
                                "id": {"type": "string"},
                                "name": {"type": "string"},
                                "shortDescription": {"type": "object", "required": ["text"]},
                                "defaultConfiguration": {"type": "object", "properties": {
                                    "level": {"enum": ["none", "note", "warning", "error"]}}},
                            }}},
                    }}}},
                "results": {"type": "array", "items": {
                    "type": "object",
                    "required": ["ruleId", "level", "message", "locations"],
                    "properties": {
                        "ruleId": {"type": "string"},
                        "ruleIndex": {"type": "integer", "minimum": 0},
                        "level": {"enum": ["none", "note", "warning", "error"]},
                        "message": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
                        "locations": {"type": "array", "minItems": 1, "items": {
                            "type": "object", "required": ["physicalLocation"],
                            "properties": {"physicalLocation": {
                                "type": "object", "required": ["artifactLocation", "region"],
                                "properties": {
                                    "artifactLocation": {"type": "object", "required": ["uri"],
                                                         "properties": {"uri": {"type": "string", "pattern": "^[^\\\\]*$"}}},
                                    "region": {"type": "object", "required": ["startLine", "startColumn"],
                                               "properties": {"startLine": {"type": "integer", "minimum": 1},
                                                              "startColumn": {"type": "integer", "minimum": 1}}},
                                }}}}},
                    }}},
            }}},
    },
}


def test_sarif_is_valid_sarif_2_1_0_shape():
    from jsonschema import Draft202012Validator

    data = json.loads(report.sarif(DIAGS, display))
    Draft202012Validator(SARIF_SUBSET).validate(data)
    assert data["version"] == "2.1.0"
    driver = data["runs"][0]["tool"]["driver"]
    assert driver["name"] == "flowctl"
    # one rule per code used, and each result points at its rule
    assert [r["id"] for r in driver["rules"]] == ["FC002", "FC101", "FC104"]
    results = data["runs"][0]["results"]
    assert len(results) == 3
    for result in results:
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
    first = results[0]
    assert (first["ruleId"], first["level"]) == ("FC101", "error")
    loc = first["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "orchestration/transitions/flow.yaml"
    assert loc["region"] == {"startLine": 9, "startColumn": 9}
    assert results[1]["level"] == "warning"
    assert "Hint: add orchestration/states/Missing.yaml" in first["message"]["text"]


def test_sarif_rule_level_is_the_codes_default_and_result_level_the_diagnostics():
    d = Diagnostic("FC601", "no verify", "c.yaml", 1, 1, severity="warning")
    data = json.loads(report.sarif([d], display))
    (rule,) = data["runs"][0]["tool"]["driver"]["rules"]
    assert rule["defaultConfiguration"]["level"] == "error"
    assert data["runs"][0]["results"][0]["level"] == "warning"


def test_sarif_uris_use_forward_slashes():
    d = Diagnostic("FC101", "m", "orchestration\\states\\a.yaml", 1, 1)
    data = json.loads(report.sarif([d], display))
    assert data["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
        "orchestration/states/a.yaml"


def test_sarif_of_nothing_is_still_a_valid_log():
    from jsonschema import Draft202012Validator

    data = json.loads(report.sarif([], display))
    Draft202012Validator(SARIF_SUBSET).validate(data)
    assert data["runs"][0]["results"] == []


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_code_renders_in_every_format(code):
    d = Diagnostic(code, "m", "f.yaml", 2, 3)
    assert f"f.yaml:2:3: {d.severity} {code} m [{CODES[code][0]}]" in report.text([d], display)
    assert json.loads(report.as_json([d], display))["diagnostics"][0]["name"] == CODES[code][0]
    assert GH.match(report.github([d], display))
    assert json.loads(report.sarif([d], display))["runs"][0]["tool"]["driver"]["rules"][0]["id"] == code
