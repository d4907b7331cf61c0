"""The shortcut for trivial schemas ({type: object}, with required names) answers like the validators."""
from __future__ import annotations

import pytest

from flowctl.definition.runtime_schemas import check_instance

OBJECT = {"type": "object"}
REQUIRED = {"type": "object", "required": ["n", "m"]}


@pytest.mark.parametrize("schema,instance,valid", [
    (OBJECT, {}, True), (OBJECT, {"a": [1]}, True), (OBJECT, [], False), (OBJECT, "x", False), (OBJECT, None, False),
    (REQUIRED, {"n": 1, "m": None}, True), (REQUIRED, {"n": 1}, False), (REQUIRED, [], False),
])
def test_trivial_schemas(schema, instance, valid):
    problem = check_instance(schema, instance)
    assert (problem is None) is valid
    if not valid:
        assert problem.startswith("at /")


def test_missing_required_name_is_worded_by_the_validator():
    assert "'m' is a required property" in check_instance(REQUIRED, {"n": 1})


def test_every_missing_required_field_is_named_not_only_the_first():
    schema = {"type": "object", "required": ["email", "plan", "name"]}
    problem = check_instance(schema, {})
    assert all(f"'{n}' is a required property" in problem for n in ("email", "plan", "name")), problem


def test_problems_of_different_fields_are_all_named_and_capped():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}
    problem = check_instance(schema, {"a": 3})
    assert "at /a: 3 is not of type 'string'" in problem and "'b' is a required property" in problem
    many = {"type": "object", "required": [f"f{i}" for i in range(50)]}
    problem = check_instance(many, {})
    assert problem.count("is a required property") == 10 and problem.endswith("and more (the first 10 are shown)")
