"""Property tests: no file content makes reading, loading or validating raise.

read_document, load_files and validate only ever *return* diagnostics. Example counts are kept
moderate so the whole suite stays fast: ``FLOWCTL_FUZZ_EXAMPLES`` (default 200) sets the count
per test; ``make fuzz`` runs 12,000 per test, 108,000 generated inputs in all.
"""
from __future__ import annotations

import json
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowctl.diagnostics import CODES, Diagnostic
from flowctl.expr.expressions import lint
from flowctl.definition.loader import FOLDERS, load_files
from flowctl.check import dataflow as flowdata
from flowctl.check.checks import validate
from flowctl.definition.yamlio import read_document

EXAMPLES = int(os.environ.get("FLOWCTL_FUZZ_EXAMPLES") or 200)
flowdata.RAISE = True  # a failure of the data-flow analysis is a finding here, not a silence
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
KIND_PATHS = {
    "state": "orchestration/states/{}.yaml",
    "flow": "orchestration/transitions/{}.yaml",
    "contract": "orchestration/contracts/{}.v1.0.0.yaml",
    "policy": "orchestration/policies/{}.yaml",
}


def well_formed(diags, files=None):
    for d in diags:
        assert isinstance(d, Diagnostic)
        assert d.code in CODES, d
        assert d.severity in ("error", "warning")
        assert isinstance(d.line, int) and d.line >= 1, d
        assert isinstance(d.column, int) and d.column >= 1, d
        if files is not None:
            assert d.file in files, d


def load_and_validate(files):
    project = load_files(files, ".")
    well_formed(project.diagnostics, files)
    diags = validate(project)
    well_formed(diags, files)
    return project, diags


# ------------------------------------------------------------------ arbitrary text and bytes
@FUZZ
@given(st.text())
def test_read_document_never_raises_on_text(text):
    doc = read_document("orchestration/states/x.yaml", text)
    well_formed(doc.diagnostics)
    # the loader turns every document that is not one mapping into a located error
    project = load_files({"orchestration/states/x.yaml": text}, ".")
    if not isinstance(doc.data, dict):
        assert any(d.severity == "error" for d in project.diagnostics)


@FUZZ
@given(st.binary())
def test_read_document_never_raises_on_bytes(data):
    doc = read_document("orchestration/transitions/x.json", data)
    well_formed(doc.diagnostics)


@FUZZ
@given(st.sampled_from(sorted(KIND_PATHS)), st.one_of(st.text(), st.binary()))
def test_load_files_and_validate_never_raise_on_junk(kind, content):
    files = {KIND_PATHS[kind].format("x"): content}
    project, diags = load_and_validate(files)
    if project.diagnostics:
        assert diags  # loading problems are always part of validate's answer


YAMLISH_TEXT = st.text(alphabet=st.sampled_from(list("ab:-[]{},&*!|>'\"#%@` \n\t?~01.yno")), max_size=80)


@FUZZ
@given(YAMLISH_TEXT)
def test_yaml_punctuation_soup_never_raises(text):
    files = {"orchestration/states/x.yaml": text, "orchestration/transitions/f.yaml": text}
    load_and_validate(files)


# ------------------------------------------------------------------ structured documents
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["on", "no", "y", "010", "12:30", "3s", "5", "^1", "a@^1", "*", "input.x", "`x`", '"a" == b', "none"]),
)
KEYS = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["id", "type", "tool", "flow", "start", "transitions", "from", "to", "when", "set", "on_error",
                     "errors", "goto", "retry", "version", "entrypoint", "side_effects", "policy", "applies_to",
                     "allow", "field", "range", "regex", "timeout", "input", "branches", "items", "compensate"]),
)
JSONISH = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(KEYS, inner, max_size=5)), max_leaves=25)


@FUZZ
@given(st.sampled_from(sorted(KIND_PATHS)), JSONISH)
def test_any_yaml_document_loads_and_validates_without_raising(kind, data):
    text = yaml.safe_dump(data, allow_unicode=True)
    load_and_validate({KIND_PATHS[kind].format("x"): text})


IDS = st.sampled_from(["a", "b", "c", "done", "failed", "on", "no", "missing"])
TYPES = st.sampled_from(["task", "choice", "pass", "review", "wait", "parallel", "map", "subflow", "succeed", "fail"])
ERRORS = st.lists(st.sampled_from(["*", "ToolTimeout", "ToolError", "SchemaMismatch", "X"]), min_size=1, max_size=3)
HANDLER = st.fixed_dictionaries({"errors": ERRORS}, optional={"goto": IDS, "fallback": st.just("pay@^1"),
                                                              "fail": st.just("Boom"), "compensate": st.booleans()})
STATE = st.fixed_dictionaries(
    {"type": TYPES},
    optional={
        "tool": st.sampled_from(["pay@^1", "pay@~1.0", "pay@2.0.0", "pay", "nope@^1", "pay@>=1"]),
        "input": st.dictionaries(st.sampled_from(["x", "y"]), st.sampled_from(["input.x", "foo(", "`ok`", "a == \"b\""])),
        "timeout": st.sampled_from(["3s", 3, {"expr": "input.t"}]),
        "retry": st.lists(st.fixed_dictionaries({"errors": ERRORS}, optional={
            "interval": st.sampled_from(["1s", "10s"]), "max_delay": st.sampled_from(["2s", "1m"]),
            "backoff": st.sampled_from([1, 2.0, 0.5])}), max_size=2),
        "on_error": st.lists(HANDLER, max_size=3),
        "decisions": st.just(["ok", "no"]),
        "on_timeout": st.sampled_from([{"goto": "a"}, {"fail": "Late"}]),
        "duration": st.just("5m"),
        "branches": st.lists(st.sampled_from(["f", "g"]), min_size=1, max_size=2),
        "flow": st.sampled_from(["f", "g"]),
        "items": st.just("input.items"),
        "error": st.sampled_from(["Boom", {"expr": "error.type"}]),
        "set": st.dictionaries(st.sampled_from(["k"]), st.just("input.k")),
    },
)
TRANSITION = st.fixed_dictionaries({"from": IDS, "to": IDS}, optional={"when": st.sampled_from(
    ["input.x", "visits.a < `3`", "input.[", "x == `ok`"])})
FLOW = st.fixed_dictionaries({"start": IDS, "transitions": st.lists(TRANSITION, max_size=8)},
                             optional={"on_error": st.lists(HANDLER, max_size=3)})
CONTRACT = st.fixed_dictionaries(
    {"version": st.sampled_from(["1.0.0", "1.2.0", "2.0.0", "2.0.0-rc.1"])},
    optional={"verify": st.just("m:v"), "compensate": st.sampled_from(["m:u", "none"]), "reason": st.just("r"),
              "side_effects": st.just([{"type": "database_write", "target": "t"}]),
              "compensate_on_failure": st.booleans(), "idempotency_key": st.sampled_from(["input.x", "join("])},
)
POLICY = st.fixed_dictionaries({"applies_to": st.lists(st.sampled_from(["pay", "nope"]), min_size=1, max_size=2)},
                               optional={"allow": st.lists(st.sampled_from([
                                   {"field": "input.x", "regex": "([a-"}, {"field": "input.n", "range": [10, 1]},
                                   {"field": "input.n", "range": [None, 3]}, {"field": "input.x", "in": [1]},
                                   {"field": "input.x", "in": [1], "equals": 2}]), max_size=3)})


@st.composite
def projects(draw):
    files = {}
    for sid in draw(st.sets(IDS, max_size=6)):
        files[f"orchestration/states/{sid}.yaml"] = yaml.safe_dump({"id": sid, **draw(STATE)})
    for fid in draw(st.sets(st.sampled_from(["f", "g"]), min_size=1)):
        files[f"orchestration/transitions/{fid}.yaml"] = yaml.safe_dump({"flow": fid, **draw(FLOW)})
    for c in draw(st.lists(CONTRACT, max_size=3)):
        files[f"orchestration/contracts/pay.v{c['version']}.yaml"] = yaml.safe_dump({"id": "pay", "entrypoint": "m:f", **c})
    if draw(st.booleans()):
        files["orchestration/policies/p.yaml"] = yaml.safe_dump({"policy": "p", **draw(POLICY)})
    return files


@FUZZ
@given(projects())
def test_random_projects_validate_without_raising(files):
    project, diags = load_and_validate(files)
    assert diags == sorted(diags, key=lambda d: (d.file, d.line, d.column, d.code))


# ------------------------------------------------------------------ schemas and expressions of any shape
SCHEMA_KEYS = st.sampled_from(["type", "required", "properties", "additionalProperties", "items", "enum", "const",
                               "anyOf", "oneOf", "allOf", "$ref", "pattern", "patternProperties", "default"])
SCHEMA = st.recursive(
    st.one_of(st.dictionaries(SCHEMA_KEYS, JSONISH, max_size=4), st.booleans()),
    lambda inner: st.one_of(st.dictionaries(SCHEMA_KEYS, inner, max_size=3),
                            st.fixed_dictionaries({"type": st.just("object")},
                                                  optional={"properties": st.dictionaries(st.sampled_from(["a", "b"]), inner),
                                                            "required": st.one_of(JSONISH, st.just(["a"])),
                                                            "additionalProperties": st.booleans()})),
    max_leaves=8)
EXPR = st.one_of(
    st.sampled_from(["input.a", "context.a", "context.a.b == `1`", "response.a > '1'", "review.decision", "error.type",
                     "length(context.a)", "input.a != null", "item.a", "visits.a < `2`", "context.a && context.a > `1`",
                     "input[" + "9" * 4400 + "]", " | ".join(["a"] * 300), " && ".join(["a"] * 300), "abs(`1`)",
                     "response[0].a", "context.*", "input.a[?b == 'x'].c", "true", "null", "`null`"]),
    st.text(alphabet=st.sampled_from(list("abcinput.context[]*?`'()|&!=<>0123 ")), max_size=40))


@st.composite
def schema_projects(draw):
    """Flows, states and contracts whose schemas and expressions are anything at all."""
    when = draw(EXPR)
    files = {
        "orchestration/states/a.yaml": yaml.safe_dump({"id": "a", "type": draw(st.sampled_from(["task", "map", "subflow", "parallel"])),
                                                      "tool": "pay@^1", "flow": "g", "branches": ["g"], "items": draw(EXPR),
                                                      "input": {"a": draw(EXPR), "b": draw(JSONISH)},
                                                      "item_input": {"a": draw(EXPR)}}),
        "orchestration/states/b.yaml": yaml.safe_dump({"id": "b", "type": "pass", "set": {draw(st.sampled_from(["a", "a.b", "b"])): draw(EXPR)}}),
        "orchestration/states/done.yaml": "id: done\ntype: succeed\n",
        "orchestration/transitions/f.yaml": yaml.safe_dump({"flow": "f", "start": "a", "input_schema": draw(SCHEMA),
                                                           "transitions": [{"from": "a", "to": "b", "when": when},
                                                                           {"from": "a", "to": "done"},
                                                                           {"from": "b", "to": "a", "when": draw(EXPR)},
                                                                           {"from": "b", "to": "done"}],
                                                           "output": draw(st.one_of(st.none(), EXPR))}),
        "orchestration/transitions/g.yaml": yaml.safe_dump({"flow": "g", "start": "done", "input_schema": draw(SCHEMA),
                                                           "transitions": [], "output": draw(EXPR)}),
        "orchestration/contracts/pay.v1.0.0.yaml": yaml.safe_dump({"id": "pay", "version": "1.0.0", "entrypoint": "m:f",
                                                                   "input_schema": draw(SCHEMA), "output_schema": draw(SCHEMA)}),
    }
    return files


@FUZZ
@given(schema_projects())
def test_any_schema_and_expression_validates_without_raising(files):
    load_and_validate(files)


CRASHERS = {  # found by fuzzing (issue 15): each once ended in "internal error"
    "a type that is a mapping": {"orchestration/transitions/f.yaml": "flow: f\nstart: done\ninput_schema: {type: {a: 1}}\ntransitions: []\n"},
    "an index of 4,400 digits": {"orchestration/transitions/f.yaml": "flow: f\nstart: done\ntransitions:\n"
                                 "  - {from: done, when: 'input[" + "9" * 4400 + "]', to: done}\n"},
    "a contract's required: true under an input mapping": {
        "orchestration/states/a.yaml": "id: a\ntype: task\ntool: pay@^1\ninput: {x: input.x}\n",
        "orchestration/transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: done}\n",
        "orchestration/contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:f\ninput_schema: {required: true}\n"},
    "a child flow's required: 5 under a map": {
        "orchestration/states/a.yaml": "id: a\ntype: map\nitems: input.items\nflow: g\nitem_input: {x: item}\n",
        "orchestration/transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: done}\n",
        "orchestration/transitions/g.yaml": "flow: g\nstart: done\ninput_schema: {required: 5}\ntransitions: []\n"},
}


@pytest.mark.parametrize("name", sorted(CRASHERS))
def test_inputs_that_once_crashed_validate_are_diagnosed(name):
    files = {"orchestration/states/done.yaml": "id: done\ntype: succeed\n", **CRASHERS[name]}
    project, diags = load_and_validate(files)
    expected = {"an index of 4,400 digits": "FC401", "a type that is a mapping": "FC609"}.get(name)
    if expected:  # the other two are the schema checks' to judge
        assert expected in [d.code for d in diags if d.severity == "error"]


# ------------------------------------------------------------------ JSON files read exactly as JSON
PRINTABLE = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Cn", "Co")), max_size=20)
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), PRINTABLE),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(PRINTABLE, inner, max_size=4)),
    max_leaves=20,
)


@FUZZ
@given(JSON_VALUES, st.sampled_from([None, 2, "\t"]))
def test_json_files_read_exactly_as_json(value, indent):
    text = json.dumps({"v": value}, ensure_ascii=False, indent=indent)
    doc = read_document("orchestration/states/x.json", text)
    assert [d for d in doc.diagnostics if d.severity == "error"] == []
    assert doc.data == json.loads(text)


# ------------------------------------------------------------------ expressions
@FUZZ
@given(st.text(max_size=60))
def test_lint_never_raises(text):
    for code, offset, message, hint in lint(text):
        assert code in ("FC401", "FC402", "FC403", "FC404")
        assert 0 <= offset <= len(text)
        assert message


def test_the_loader_knows_each_kind_folder():
    assert set(FOLDERS.values()) == set(KIND_PATHS)
