"""JMESPath parse trees turned into plain Python closures, once per expression.

jmespath's ``TreeInterpreter`` walks the parse tree on every evaluation: a method lookup and a
dict read per node. The expressions of a flow are evaluated on every step, and most are a field
path (``context.order.id``) or a comparison with a literal (``response.n > `0```), so
:func:`compile_tree` builds one closure per node at load time instead: ``fn(value) -> result``.

The closures follow the interpreter node for node (jmespath 1.0, ``visitor.py``), so they give the
same value and raise the same exceptions on the same input:

* a field of anything that is not an object is ``null``; a path stops being evaluated at nothing;
* ``==``/``!=`` use JMESPath equality (``1 == true`` is false); ``<``, ``<=``, ``>``, ``>=`` give
  ``null`` unless both sides are numbers or strings (a number against a string raises TypeError,
  which :class:`~flowctl.expr.expressions.Expression` reports as an ExpressionError);
* ``&&``, ``||`` and ``!`` use JMESPath truthiness (``0`` is true; ``!0`` is false);
* functions are called through the same function table, with its argument type checks.

Node types without a closure here (projections, filters, flatten, slices, ``&expr``) are handed,
whole, to the interpreter: correctness first, speed where the common forms are. A differential
test (``tests/test_exprcompile.py``) compares both on generated expressions and data.
"""
from __future__ import annotations

import operator
from numbers import Number

_ORDER = {"lt": operator.lt, "gt": operator.gt, "lte": operator.le, "gte": operator.ge}
_FAST_NUMBERS = (int, float)


def _actual_number(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, Number)


def _comparable(x) -> bool:
    return _actual_number(x) or isinstance(x, str)


def _equals(x, y) -> bool:
    """JMESPath equality: 0 and 1 never equal false and true."""
    if _actual_number(x) and x in (0, 1):
        if isinstance(y, bool):
            return False
    elif _actual_number(y) and y in (0, 1):
        if isinstance(x, bool):
            return False
    return x == y


def truthy(value) -> bool:
    """JMESPath truthiness, the one definition flowctl uses (transitions' ``when``, ``||``/``&&``,
    policy ``review_when``, mocks' ``when``): ``false``, ``null``, ``""``, ``[]`` and ``{}`` are
    false; everything else, ``0`` included, is true."""
    return not (value is None or value is False or value == "" or value == [] or value == {})


def _get(value, name):
    try:
        return value.get(name)
    except AttributeError:
        return None


def compile_tree(node: dict, visit, functions) -> callable:
    """A closure ``fn(value)`` evaluating the parse-tree ``node`` as ``visit(node, value)`` would.

    ``visit`` is the interpreter's ``visit`` (used for node types compiled nowhere here) and
    ``functions`` its function table (``call_function(name, args)``)."""
    make = _COMPILERS.get(node["type"])
    if make is None:
        return lambda value: visit(node, value)
    return make(node, visit, functions)


def _children(node, visit, functions) -> list:
    return [compile_tree(c, visit, functions) for c in node["children"]]


def _field(node, visit, functions):
    name = node["value"]

    def field(value):
        if type(value) is dict:
            return value.get(name)
        return _get(value, name)
    return field


def _path(names: tuple):
    if len(names) == 2:
        first, second = names

        def path2(value):
            value = value.get(first) if type(value) is dict else _get(value, first)
            return value.get(second) if type(value) is dict else _get(value, second)
        return path2

    def path(value):
        for name in names:
            value = value.get(name) if type(value) is dict else _get(value, name)
        return value
    return path


def _chain(node, visit, functions):
    children = node["children"]
    if node["type"] == "subexpression" and all(c["type"] == "field" for c in children):
        return _path(tuple(c["value"] for c in children))
    steps = _children(node, visit, functions)

    def chain(value):
        for step in steps:
            value = step(value)
        return value
    return chain


def _literal(node, visit, functions):
    constant = node["value"]
    return lambda value: constant


def _current(node, visit, functions):
    return lambda value: value


def _comparator(node, visit, functions):
    left, right = _children(node, visit, functions)
    op = node["value"]
    if op == "eq":
        return lambda value: _equals(left(value), right(value))
    if op == "ne":
        return lambda value: not _equals(left(value), right(value))
    compare = _ORDER[op]
    right_node = node["children"][1]
    if right_node["type"] == "literal" and type(right_node["value"]) in _FAST_NUMBERS:
        constant = right_node["value"]

        def against_number(value):
            found = left(value)
            if type(found) in _FAST_NUMBERS:
                return compare(found, constant)
            return compare(found, constant) if _comparable(found) else None
        return against_number

    def ordered(value):
        a, b = left(value), right(value)
        if not (_comparable(a) and _comparable(b)):
            return None
        return compare(a, b)
    return ordered


def _or(node, visit, functions):
    left, right = _children(node, visit, functions)

    def either(value):
        found = left(value)
        return found if truthy(found) else right(value)
    return either


def _and(node, visit, functions):
    left, right = _children(node, visit, functions)

    def both(value):
        found = left(value)
        return right(value) if truthy(found) else found
    return both


def _not(node, visit, functions):
    (inner,) = _children(node, visit, functions)

    def negate(value):
        found = inner(value)
        if _actual_number(found) and found == 0:
            return False  # !0 is false: 0 is not falsy in JMESPath
        return not found
    return negate


def _index(node, visit, functions):
    position = node["value"]

    def index(value):
        if not isinstance(value, list):
            return None
        try:
            return value[position]
        except IndexError:
            return None
    return index


def _multi_dict(node, visit, functions):
    pairs = [(c["value"], compile_tree(c["children"][0], visit, functions)) for c in node["children"]]

    def multi_dict(value):
        if value is None:
            return None
        return {key: fn(value) for key, fn in pairs}
    return multi_dict


def _multi_list(node, visit, functions):
    items = _children(node, visit, functions)

    def multi_list(value):
        if value is None:
            return None
        return [fn(value) for fn in items]
    return multi_list


def _function(node, visit, functions):
    name = node["value"]
    args = _children(node, visit, functions)
    call = functions.call_function
    return lambda value: call(name, [fn(value) for fn in args])


_COMPILERS = {
    "field": _field, "subexpression": _chain, "index_expression": _chain, "pipe": _chain,
    "literal": _literal, "current": _current, "identity": _current, "comparator": _comparator,
    "or_expression": _or, "and_expression": _and, "not_expression": _not, "index": _index,
    "multi_select_dict": _multi_dict, "multi_select_list": _multi_list, "function_expression": _function,
}
