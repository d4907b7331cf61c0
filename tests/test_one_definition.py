"""Helpers that exist once (issue 16): JMESPath truthiness, the unknown-flow error, an exception's
first line. Each is asserted by what a user sees, plus that the copies are gone."""
from __future__ import annotations

import pytest

from flowctl.definition.kinds import no_flow, unknown_flow_hint
from flowctl.errors import first_line
from flowctl.errors import UsageError
from flowctl.expr import compile as expr_compile
from flowctl.expr.compile import truthy
from flowctl.expr.expressions import compile_expr


@pytest.mark.parametrize("value, expected", [
    (None, False), (False, False), ("", False), ([], False), ({}, False),
    (0, True), (0.0, True), (True, True), ("false", True), ([0], True), ({"a": None}, True), (-1, True),
])
def test_truthiness_is_jmespaths(value, expected):
    assert truthy(value) is expected
    # `||` and `&&` in an expression decide by the same rule: a false left side gives the right one
    assert compile_expr("v || 'other'").evaluate({"v": value}) == (value if expected else "other")
    assert compile_expr("v && 'other'").evaluate({"v": value}) == ("other" if expected else value)


def test_every_reader_of_truthiness_uses_the_one_definition():
    from flowctl.expr import scope
    from flowctl.gate import policy

    assert scope.truthy is policy.truthy is truthy  # review_when is decided as `when` is
    assert not hasattr(policy, "_truthy") and not hasattr(expr_compile, "is_false")


def test_no_flow_names_a_close_flow_or_lists_them():
    assert unknown_flow_hint("ordr", ["order", "refund"]) == "did you mean 'order'?"
    assert unknown_flow_hint("zzz", ["refund", "order"]) == "flows: order, refund"
    assert unknown_flow_hint("zzz", []) == "flows: none"
    err = no_flow("ordr", {"order": object()})
    assert isinstance(err, UsageError)
    assert str(err).startswith("no flow 'ordr'") and err.hint == "did you mean 'order'?"


def test_graph_and_test_commands_say_no_flow_the_same_way(tmp_path):
    from flowctl.definition.loader import load_project
    from flowctl.graph.flowgraph import build_graph
    from support.helpers import MINIMAL, write_project

    project = load_project(write_project(tmp_path / "p", MINIMAL))
    with pytest.raises(UsageError) as found:
        build_graph(project, "flwo")
    assert str(found.value).startswith("no flow 'flwo'")
    assert found.value.hint == unknown_flow_hint("flwo", project.flows)


def test_first_line_of_an_exception():
    assert first_line(ValueError("  connection refused\n  detail: port 5432\n")) == "connection refused"
    assert first_line(RuntimeError("")) == "RuntimeError"
    assert first_line(KeyError()) == "KeyError"
