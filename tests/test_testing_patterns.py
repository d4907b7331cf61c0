"""flowctl.testing.patterns: a string a JSON Schema ``pattern`` matches, for stand-in values (sample
inputs, redacted fields of a replayed run), or None where none can be built."""
from __future__ import annotations

import re

import pytest

from flowctl.testing.patterns import example
from flowctl.testing.suggest import sample


@pytest.mark.parametrize("pattern", [r"^[^@\s]+@[^@\s]+$", r"^\d{3}-\d{4}$", r"^(ORD|INV)-[A-Z0-9]{6}$",
                                     r"^[a-z]+(\.[a-z]+)*$", r"^\w+\s\S+$", r"^[^a-zA-Z0-9_.\- @]+$", r"ab?c+",
                                     r"^(?:x|y){2,3}$"])
def test_the_string_built_is_matched_by_its_pattern(pattern):
    found = example(pattern)
    assert found is not None and re.search(pattern, found), found


@pytest.mark.parametrize("pattern", [r"^(?=a)b", r"^(a)\1$", "["])
def test_what_cannot_be_built_or_is_not_a_pattern_gives_none(pattern):
    assert example(pattern) is None


def test_a_sample_of_a_string_with_a_pattern_satisfies_its_schema():
    """(new-user finding: the stand-in of a redacted e-mail was 'TODO', which its pattern refused,
    so the replay of the init template's own run did not start)"""
    from flowctl.definition.runtime_schemas import check_instance

    schema = {"type": "string", "pattern": r"^[^@\s]+@[^@\s]+$"}
    assert check_instance(schema, sample(schema)) is None
    assert sample({"type": "string", "examples": ["ada@example.com"]}) == "ada@example.com"
