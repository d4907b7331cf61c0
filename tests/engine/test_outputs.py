"""flowctl.engine.outputs: a tool's output as the record keeps it (a fresh copy, JSON only)."""
from __future__ import annotations

import pytest

from flowctl.engine.outputs import parse_output
from flowctl.engine.payload import MAX_DEPTH
from flowctl.errors import SchemaMismatch


class _Contract:
    ref = "t@1.0.0"


def _deep(n):
    out: dict = {}
    for _ in range(n - 1):
        out = {"x": out}
    return out


def _tuples(n):
    out: tuple = ()
    for _ in range(n - 1):
        out = (out,)
    return {"x": out}


def test_a_dict_is_kept_as_a_copy_the_tool_cannot_change_afterwards():
    given = {"a": 1, "nested": {"b": [1, 2]}}
    output = parse_output(given, _Contract)[0]
    given["nested"]["b"].append(3)
    assert output == {"a": 1, "nested": {"b": [1, 2]}}


def test_json_text_and_bytes_are_parsed_and_none_is_an_empty_object():
    assert parse_output('{"status": "sent"}', _Contract)[:2] == ({"status": "sent"}, '{"status": "sent"}')
    assert parse_output(b'{"n": 1}', _Contract)[0] == {"n": 1}
    assert parse_output(None, _Contract)[0] == {}


@pytest.mark.parametrize("raw, said", [
    ({"x": float("nan")}, "not JSON"), ("sent", "returned the text 'sent', which is not JSON"),
    ({"x": "\ud800"}, "not JSON"), ('{"x": "\\ud800"}', "not JSON"), ({1, 2}, "returned set"),
    (_deep(MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} levels deep"),
    ("[" * 5000 + "]" * 5000, f"nested more than {MAX_DEPTH} levels deep"),
    (_tuples(MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} levels deep"),  # (breaker finding: tuples passed)
])
def test_what_json_stored_as_utf8_cannot_hold_is_a_schema_mismatch_naming_the_contract(raw, said):
    with pytest.raises(SchemaMismatch) as info:
        parse_output(raw, _Contract)
    assert "t@1.0.0" in str(info.value) and said in str(info.value)


def test_nesting_up_to_the_limit_is_kept():
    assert parse_output(_deep(MAX_DEPTH), _Contract)[0] == _deep(MAX_DEPTH)
