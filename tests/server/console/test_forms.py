"""A review's form from its ``data_schema`` (flowctl.server.console.forms): which field each part
of a schema becomes, and the typed data a posted form gives."""
from __future__ import annotations

import pytest

from flowctl.server.console.forms import FormError, data_from, form_fields

SCHEMA = {"type": "object", "required": ["limit", "contact"],
          "properties": {"limit": {"type": "integer", "title": "Limit"}, "rate": {"type": "number"},
                         "ok": {"type": "boolean"}, "tier": {"enum": ["a", "b", 3]}, "note": {"type": "string"},
                         "contact": {"type": "object", "required": ["name"],
                                     "properties": {"name": {"type": "string"}, "vip": {"type": "boolean"},
                                                    "deep": {"type": "object", "properties": {"x": {}}}}},
                         "tags": {"type": "array", "items": {"type": "string"}},
                         "scores": {"type": "array", "items": {"type": "integer"}},
                         "rows": {"type": "array", "items": {"type": "object"}},
                         "either": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                         "a/b": {"type": "string"}}}


def test_each_part_of_the_schema_becomes_the_field_that_can_hold_it():
    fields = {f["pointer"]: f for f in form_fields(SCHEMA)}
    kinds = {p: f["kind"] for p, f in fields.items()}
    assert kinds == {"/limit": "integer", "/rate": "number", "/ok": "boolean", "/tier": "enum", "/note": "string",
                     "/contact": "group", "/tags": "list", "/scores": "list", "/rows": "json", "/either": "json",
                     "/a~1b": "string"}
    assert fields["/limit"]["required"] and not fields["/rate"]["required"] and fields["/limit"]["title"] == "Limit"
    assert fields["/tier"]["options"] == ["a", "b", "3"] and fields["/scores"]["item"] == "integer"
    inner = {f["pointer"]: (f["kind"], f["required"]) for f in fields["/contact"]["fields"]}
    assert inner == {"/contact/name": ("string", True), "/contact/vip": ("boolean", False),
                     "/contact/deep": ("json", False)}  # two levels down: a JSON field
    assert fields["/a~1b"]["key"] == "data/a~1b"


def test_a_schema_that_is_not_an_object_of_properties_is_one_json_field_and_none_is_no_field():
    assert [(f["pointer"], f["kind"]) for f in form_fields({"type": "array"})] == [("/", "json")]
    assert data_from(form_fields({"type": "array"}), {"data/": "[1, 2]"}) == [1, 2]
    assert form_fields(None) == [] and data_from([], {"data_json": " "}) is None
    assert data_from([], {"data_json": '{"a": 1}'}) == {"a": 1}
    with pytest.raises(FormError, match="must be a JSON object"):
        data_from([], {"data_json": "[1]"})


def test_the_posted_values_become_typed_data_and_empty_ones_are_left_out():
    fields = form_fields(SCHEMA)
    posted = {"data/limit": "5", "data/rate": "0.5", "data/ok": "on", "data/tier": "3", "data/note": "",
              "data/contact/name": "Ann", "data/tags": "x\n\n y \n", "data/scores": "1\n2",
              "data/rows": '[{"a": 1}]', "data/either": "", "data/a~1b": "slash"}
    assert data_from(fields, posted) == {"limit": 5, "rate": 0.5, "ok": True, "tier": 3,
                                         "contact": {"name": "Ann"}, "tags": ["x", "y"], "scores": [1, 2],
                                         "rows": [{"a": 1}], "a/b": "slash"}
    assert data_from(fields, {"data/rate": "10"}) == {"ok": False, "rate": 10, "contact": {}}  # a required group stays


@pytest.mark.parametrize("posted, where, why", [
    ({"data/limit": "five"}, "/limit", "must be a whole number"),
    ({"data/rate": "nan"}, "/rate", "must be a finite number"),
    ({"data/tier": "c"}, "/tier", "is not one of a, b, 3"),
    ({"data/scores": "1\nx"}, "/scores", "must be a whole number"),
    ({"data/contact/deep": "{"}, "/contact/deep", "is not JSON"),
    # (break-it: json.loads took NaN and "\ud800", which the store then could not hold or show)
    ({"data/rows": '[{"a": NaN}]'}, "/rows", "NaN is not JSON"),
    ({"data/either": "Infinity"}, "/either", "Infinity is not JSON"),
    ({"data/rows": '[{"a": "\\ud800"}]'}, "/rows", "at /0/a: the text holds a lone surrogate"),
    ({"data/note": "\ud800"}, "/note", "lone surrogate"),
])
def test_a_value_its_field_cannot_read_is_refused_saying_where(posted, where, why):
    with pytest.raises(FormError, match=why) as caught:
        data_from(form_fields(SCHEMA), posted)
    assert caught.value.pointer == where and str(caught.value).startswith(f"at {where}: ")


@pytest.mark.parametrize("text, why", [('{"cap": NaN}', "NaN is not JSON"), ('{"cap": "\\udc00"}', "lone surrogate")])
def test_the_free_json_data_of_a_review_without_a_schema_refuses_what_json_cannot_hold(text, why):
    with pytest.raises(FormError, match=why) as caught:
        data_from([], {"data_json": text})
    assert caught.value.pointer == "/"
