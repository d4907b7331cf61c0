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
