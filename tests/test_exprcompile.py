"""flowctl.expr.compile: compiled closures give what jmespath's interpreter gives, value for value
and error for error, on generated expressions and data (a differential test)."""
from __future__ import annotations

import json

import jmespath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.errors import ExpressionError
from flowctl.expr.expressions import _OPTIONS, Expression, compile_expr

FIELDS = ["a", "b", "n", "items", "ok"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.5, -1.5, 0.0, 1.0]),
                    st.sampled_from(["", "x", "10", "b"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4)),
                      max_leaves=12)
literal = st.sampled_from(["`0`", "`1`", "`true`", "`false`", "`null`", "'x'", "'10'", "`2.5`", "`[]`", "`{}`",
                           "`[1, 2]`", "`{\"a\": 1}`", "''"])
field = st.sampled_from(FIELDS)
path = st.lists(field, min_size=1, max_size=3).map(".".join)


def _expressions():
    atom = st.one_of(path, literal, st.just("@"), path.map(lambda p: p + "[0]"), path.map(lambda p: p + "[-1]"),
                     path.map(lambda p: p + "[*].n"), path.map(lambda p: "length(" + p + ")"),
                     path.map(lambda p: "to_string(" + p + ")"), path.map(lambda p: "{x: " + p + ", y: n}"),
                     path.map(lambda p: "[" + p + ", a]"), path.map(lambda p: p + " | n"))
    ops = ["==", "!=", "<", "<=", ">", ">="]

    def extend(inner):
        return st.one_of(st.tuples(inner, st.sampled_from(ops), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
                         st.tuples(inner, inner).map(lambda t: f"({t[0]}) && ({t[1]})"),
                         st.tuples(inner, inner).map(lambda t: f"({t[0]}) || ({t[1]})"),
                         inner.map(lambda e: f"!({e})"))
    return st.recursive(atom, extend, max_leaves=6)


def _interpreted(text, scope):
    try:
        return ("value", jmespath.search(text, scope, options=_OPTIONS))
    except (jmespath.exceptions.JMESPathError, ValueError, TypeError, ZeroDivisionError, OverflowError, KeyError):
        return ("error", None)


def _compiled(text, scope):
    try:
        return ("value", Expression(text).evaluate(scope))
    except ExpressionError:
        return ("error", None)


def _same(a, b) -> bool:
    # json text keeps 1 and true (and 1 and 1.0 as written) apart, which == alone would not
    return a[0] == b[0] and json.dumps(a[1], sort_keys=True) == json.dumps(b[1], sort_keys=True)


@settings(max_examples=1500, deadline=None)
@given(_expressions(), st.dictionaries(st.sampled_from(FIELDS), values, max_size=5))
def test_compiled_expressions_agree_with_the_interpreter(text, scope):
    expected = _interpreted(text, scope)
    assert _same(_compiled(text, scope), expected), text
    expr = Expression(text)
    if expr.cannot_fail:  # callers skip the error wrapping for these: they must never raise
        assert _same(("value", expr.unchecked(scope)), expected), text


@pytest.mark.parametrize("text, scope, expected", [
    ("a.b.c", {"a": {"b": {"c": 3}}}, 3),
    ("a.b.c", {"a": {"b": "str"}}, None),       # a field of a string is null
    ("a.b", {"a": [1, 2]}, None),                # ... and of a list
    ("n == `1`", {"n": True}, False),            # JMESPath equality: true is not 1
    ("n == `0`", {"n": False}, False),
    ("n > `0`", {"n": True}, None),              # ordering needs numbers or strings
    ("n > `0`", {"n": 2.5}, True),
    ("n < 'b'", {"n": "a"}, True),
    ("!n", {"n": 0}, False),                     # 0 is true in JMESPath
    ("n || 'd'", {"n": []}, "d"),
    ("n && 'd'", {"n": {}}, {}),
    ("items[-1]", {"items": [1, 2, 3]}, 3),
    ("items[5]", {"items": [1]}, None),
])
def test_jmespath_rules_users_rely_on(text, scope, expected):
    assert compile_expr(text).evaluate(scope) == expected
    assert type(compile_expr(text).evaluate(scope)) is type(expected)


def test_number_against_string_is_a_located_expression_error():
    with pytest.raises(ExpressionError, match=r"'n < `5`' at states/a.yaml:3 failed"):
        Expression("n < `5`", "states/a.yaml:3").evaluate({"n": "4"})


def test_a_very_long_expression_still_evaluates_as_jmespath_does():
    text = " || ".join(f"code == 'C{i}'" for i in range(250))  # 250 levels of ||: deeper than compiling allows
    expected = jmespath.search(text, {"code": "C249"}, options=_OPTIONS)

    def from_deep_in_the_stack(depth):  # the engine compiles and evaluates well inside its own call stack
        return from_deep_in_the_stack(depth - 1) if depth else Expression(text).evaluate({"code": "C249"})

    assert from_deep_in_the_stack(300) is expected is True
