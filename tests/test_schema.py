"""flowctl.definition.kinds: JSON Schema checks as located diagnostics (FC010, FC011, FC502)."""
from __future__ import annotations

import importlib.util
import json

import pytest

from flowctl.definition import kinds as schemas
from flowctl.definition.yamlio import read_document
from support.helpers import MINIMAL, REPO, of, one, problems, where


def check(kind, text, file="f.yaml"):
    return schemas.check(kind, read_document(file, text))


# ------------------------------------------------------------------ FC011 unknown field, did you mean
def test_unknown_top_level_field_suggests_the_close_one(make_project):
    root = make_project({**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\ndescriptoin: x\n"})
    d = one(problems(root), "FC011")
    assert (d.severity, *where(d)) == ("error", "orchestration/states/done.yaml", 3, 1)
    assert "'descriptoin'" in d.message
    assert d.hint == "did you mean 'description'?"


def test_unknown_nested_field_is_located_at_its_key():
    (d,) = check("state", "id: t\ntype: task\ntool: x\nretry:\n  - errors: [A]\n    max_atempts: 3\n")
    assert (d.code, d.line, d.column) == ("FC011", 6, 5)
    assert d.hint == "did you mean 'max_attempts'?"


def test_misspelt_transition_key_is_one_error_not_two():
    diags = check("flow", "flow: f\nstart: a\ntransitions:\n  - from: a\n    too: b\n")
    unknown = one(diags, "FC011")
    assert (unknown.line, unknown.column, unknown.hint) == (5, 5, "did you mean 'to'?")
    assert [d for d in diags if d.code == "FC010"] == []  # "'to' is a required property" is the same mistake


def test_a_missing_field_elsewhere_is_still_reported():
    diags = check("flow", "flow: f\nstart: a\ntransitions:\n  - from: a\n    too: b\n  - from: b\n")
    missing = one(diags, "FC010")
    assert (missing.line, "'to'" in missing.message) == (6, True)


def test_an_unknown_state_field_lists_only_the_fields_of_its_type():
    (d,) = check("state", "id: t\ntype: succeed\nzzzqqq: 1\n")
    assert d.code == "FC011"
    assert d.hint == "known fields of a succeed state: description, id, type"
    (d,) = check("state", "id: t\ntype: task\ntool: x\nzzzqqq: 1\n")
    assert d.hint.startswith("known fields of a task state: ") and "tool" in d.hint and "decisions" not in d.hint


def test_an_unknown_state_field_suggests_a_field_of_its_own_type():
    # 'tols' is close to an agent's 'tools', but a task state has no such field: its 'tool' is meant
    (d,) = check("state", "id: t\ntype: task\ntool: x\ntimeoutt: 1s\n")
    assert d.hint == "did you mean 'timeout'?"
    (d,) = check("state", "id: t\ntype: choice\ntols: [x]\n")
    assert "tools" not in d.hint and d.hint.startswith("known fields of a choice state: ")


def test_unknown_field_without_a_close_match_lists_the_known_ones():
    (d,) = check("policy", "policy: p\napplies_to: [x]\nzzzqqq: 1\n")
    assert d.code == "FC011"
    assert d.hint.startswith("known fields: ")
    assert "applies_to" in d.hint and "review_when" in d.hint


# ------------------------------------------------------------------ FC502 durations need units
@pytest.mark.parametrize(
    "kind, text, line, column, value",
    [
        ("state", "id: w\ntype: wait\nduration: 30\n", 3, 11, "30"),
        ("state", "id: t\ntype: task\ntool: x\ntimeout: 5\n", 4, 10, "5"),
        ("state", "id: t\ntype: task\ntool: x\nretry:\n  - errors: [A]\n    interval: 2\n", 6, 15, "2"),
        ("state", "id: t\ntype: task\ntool: x\nretry:\n  - errors: [A]\n    max_delay: 1.5\n", 6, 16, "1.5"),
        ("state", "id: r\ntype: review\ndecisions: [ok]\nremind_after: 5\n", 4, 15, "5"),
        ("flow", "flow: f\nstart: a\nlimits: {timeout: 60}\ntransitions: []\n", 3, 19, "60"),
        ("policy", "policy: p\napplies_to: [x]\nrate: {max: 1, window: 10}\n", 3, 24, "10"),
        ("contract", "id: c\nversion: 1.0.0\nentrypoint: m:f\ntimeout: 3\n", 4, 10, "3"),
    ],
)
def test_a_number_without_a_unit_is_fc502_at_the_value(kind, text, line, column, value):
    (d,) = check(kind, text)
    assert (d.code, d.severity, d.line, d.column) == ("FC502", "error", line, column)
    assert "no unit" in d.message
    assert f"'{value}s'" in d.hint


@pytest.mark.parametrize("bad", ["30 seconds", "5min", "1h 30m", "-3s", "s"])
def test_malformed_duration_text_is_fc502(bad):
    (d,) = check("state", f"id: w\ntype: wait\nduration: {bad}\n")
    assert (d.code, d.line, d.column) == ("FC502", 3, 11)
    assert "is not a duration" in d.message


@pytest.mark.parametrize("good", ["500ms", "3s", "5m", "1h", "1d", "1h30m", "1.5s"])
def test_durations_with_units_pass(good):
    assert check("state", f"id: w\ntype: wait\nduration: {good}\n") == []


def test_timeout_may_be_an_expression():
    assert check("state", "id: t\ntype: task\ntool: x\ntimeout: {expr: input.seconds}\n") == []


# ------------------------------------------------------------------ FC010 other schema errors
def test_unknown_state_type_suggests_the_close_one():
    (d,) = check("state", "id: done\ntype: succed\n")
    assert (d.code, d.line, d.column) == ("FC010", 2, 7)
    assert d.hint == "did you mean 'succeed'?"


def test_missing_type_is_reported_once_not_once_per_type():
    diags = check("state", "id: done\n")
    assert [(d.code, d.line, d.column) for d in diags] == [("FC010", 1, 1)]
    assert "'type'" in diags[0].message


def test_type_specific_required_fields():
    (d,) = check("state", "id: t\ntype: task\n")
    assert d.code == "FC010" and "'tool'" in d.message
    (d,) = check("state", "id: f\ntype: fail\n")
    assert d.code == "FC010" and "'error'" in d.message
    (d,) = check("state", "id: m\ntype: map\nflow: x\n")
    assert d.code == "FC010" and "'items'" in d.message


def test_an_id_with_a_space_or_slash_is_not_an_id():
    (d,) = check("state", "id: a b\ntype: succeed\n")
    assert (d.code, d.line, d.column) == ("FC010", 1, 5)
    assert "not a valid id" in d.message
    (d,) = check("flow", "flow: a/b\nstart: x\ntransitions: []\n")
    assert (d.code, d.line, d.column) == ("FC010", 1, 7)


def test_wrong_type_of_value_is_located():
    (d,) = check("flow", "flow: f\nstart: a\ntransitions:\n  - from: a\n    to: [b]\n")
    assert (d.code, d.line, d.column) == ("FC010", 5, 9)
    assert "transitions/0/to" in d.message


def test_valid_files_of_each_kind_pass():
    assert check("state", "id: a\ntype: succeed\n") == []
    assert check("flow", "flow: f\nstart: a\ntransitions:\n  - {from: a, to: b, when: input.x}\n") == []
    assert check("contract", "id: c\nversion: 1.2.3\nentrypoint: mod.sub:fn\nside_effects:\n"
                             "  - {type: database_write, target: t}\nverify: m:v\ncompensate: none\nreason: r\n") == []
    assert check("policy", "policy: p\napplies_to: [c]\nallow:\n  - {field: input.x, in: [1, 2]}\n") == []


# ------------------------------------------------------------------ the schemas themselves
@pytest.mark.parametrize("kind", schemas.KINDS)
def test_each_schema_is_a_valid_draft_2020_12_schema(kind):
    from jsonschema import Draft202012Validator

    data = json.loads(schemas.schema_text(kind))
    assert data["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(data)


def test_unknown_kind_is_a_key_error():
    with pytest.raises(KeyError):
        schemas.schema_text("widget")


def _generator():
    spec = importlib.util.spec_from_file_location("generate_validators", REPO / "scripts" / "generate_validators.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", schemas.KINDS)
def test_generated_fast_validators_are_up_to_date(kind):
    pytest.importorskip("fastjsonschema", reason="regenerating needs fastjsonschema (make schemas)")
    expected = _generator().generate(kind)
    current = (REPO / "runtime" / "flowctl" / "definition" / "_validators" / f"{kind}.py").read_text(encoding="utf-8")
    assert current == expected, "stale generated validator: run `make schemas`"


SAMPLES = {
    "state": [
        {"id": "a", "type": "succeed"},
        {"id": "a", "type": "task"},
        {"id": "a", "type": "task", "tool": "x@^1", "timeout": "3s"},
        {"id": "a", "type": "task", "tool": "x", "timeout": 3},
        {"id": "a", "type": "wait", "duration": "5m"},
        {"id": "a b", "type": "succeed"},
        {"id": "a", "type": "review", "decisions": []},
        {"id": "a", "type": "map", "items": "x", "flow": "f", "tolerated_failures": {"count": 0, "percent": 5}},
        {"id": "a", "type": "task", "tool": "x", "input": {"a": ["b", {"c": 1}]}},
        {"id": "a", "type": "task", "tool": "x", "input": {"a": ""}},
        {"id": "a", "type": "pass", "set": {"x": None}},
        [],
        "text",
    ],
    "flow": [
        {"flow": "f", "start": "a", "transitions": []},
        {"flow": "f", "start": "a", "transitions": [{"from": "a"}]},
        {"flow": "f", "start": "a", "transitions": [], "limits": {"max_steps": 0}},
        {"flow": "f", "start": "a", "transitions": [], "output": "context"},
        {"flow": "f", "start": "a", "transitions": [], "on_error": [{"errors": []}]},
    ],
    "contract": [
        {"id": "c", "version": "1.0.0", "entrypoint": "m:f"},
        {"id": "c", "version": "1.0", "entrypoint": "m:f"},
        {"id": "c", "version": "1.0.0", "entrypoint": "m.f"},
        {"id": "c", "version": "1.0.0", "entrypoint": "m:f", "compensate": "none"},
        {"id": "c", "version": "1.0.0", "entrypoint": "m:f", "compensate": "nothing"},
    ],
    "policy": [
        {"policy": "p", "applies_to": ["x"]},
        {"policy": "p", "applies_to": []},
        {"policy": "p", "applies_to": ["x"], "allow": [{"field": "input.a"}]},
        {"policy": "p", "applies_to": ["x"], "allow": [{"field": "input.a", "range": [1, None]}]},
        {"policy": "p", "applies_to": ["x"], "rate": {"max": 1, "window": "1m", "per": "everyone"}},
    ],
}


@pytest.mark.parametrize("kind, data", [(k, d) for k, items in SAMPLES.items() for d in items])
def test_fast_validator_agrees_with_jsonschema(kind, data):
    fast = importlib.import_module(f"flowctl.definition._validators.{kind}").validate
    try:
        fast(data)
        fast_ok = True
    except ValueError:
        fast_ok = False
    assert fast_ok == schemas.validator(kind).is_valid(data)


def test_a_hundred_thousand_unknown_fields_are_reported_quickly_and_counted(make_project):
    import time

    import yaml

    text = "id: done\ntype: succeed\n" + "".join(f"k{i}: 1\n" for i in range(100_000))
    root = make_project({**MINIMAL, "states/done.yaml": text})
    started = time.perf_counter()
    yaml.compose(text, Loader=yaml.CSafeLoader)
    floor = time.perf_counter() - started
    started = time.perf_counter()
    found = of(problems(root), "FC011")
    took = time.perf_counter() - started
    assert len(found) == schemas.UNKNOWN_REPORTED + 1  # twenty by name, then one that counts the rest
    assert "99,980 more unknown fields" in found[-1].message and found[0].line == 3
    assert took < max(2.0, 4 * floor), (took, floor)  # was 24 s: a "did you mean" for every key, twice
