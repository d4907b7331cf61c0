"""The run scope every expression sees, and the two ways data moves through it.

Scope (a dict)::

    {input, params, context, response, error, review, item, index, visits, state, run}

``error`` is ``{type, code, message, state, attempt}`` from the moment an error is caught until
the next state completes; ``visits`` maps state id -> times entered; ``state`` is
``{id, entered_at, attempt}`` (an agent state's also ``calls``: ``[{tool, ok, error}]``, its tool calls) and ``run`` is ``{id, flow, flow_version, started_at, parent}``
(times ISO 8601, UTC).

:func:`build` evaluates an input mapping (strings are JMESPath, nested mappings and lists are
walked, other JSON values are literals). :func:`apply_set` evaluates every value of a ``set``
against the scope as it was *before* any assignment, then writes them; a dotted key
(``results.step1``) writes a nested field, creating objects on the way.
"""
from __future__ import annotations

from flowctl.expr.compile import truthy  # noqa: F401 - re-exported: flowctl.expr.scope.truthy
from flowctl.expr.expressions import compile_expr


def build(mapping, scope: dict, where: str = ""):
    """Value of an input mapping (or of a single expression string) on ``scope``."""
    if isinstance(mapping, str):
        return compile_expr(mapping, where).evaluate(scope)
    if isinstance(mapping, dict):
        return {k: build(v, scope, where) for k, v in mapping.items()}
    if isinstance(mapping, list):
        return [build(v, scope, where) for v in mapping]
    return mapping


def compile_mapping(mapping, where: str = ""):
    """:func:`build` compiled once: a function ``scope -> value`` (each expression compiled to
    closures by :mod:`flowctl.expr.compile`). Raises jmespath's ParseError on bad syntax."""
    if isinstance(mapping, str):
        expr = compile_expr(mapping, where)
        return expr.unchecked if expr.cannot_fail else expr.evaluate
    if isinstance(mapping, dict):
        items = [(k, compile_mapping(v, where)) for k, v in mapping.items()]
        return lambda scope: {k: fn(scope) for k, fn in items}
    if isinstance(mapping, list):
        fns = [compile_mapping(v, where) for v in mapping]
        return lambda scope: [fn(scope) for fn in fns]
    return lambda scope: mapping


def compile_set(assignments: dict | None, where=""):
    """:func:`apply_set` compiled once for these ``assignments``: a function
    ``(context, scope, check=None) -> new context``, or None when there is nothing to set.
    ``where``: the ``file:line:column`` an ExpressionError names, or a function ``key -> where``
    (each key's own value located)."""
    if not assignments:
        return None
    at = where if callable(where) else (lambda key: where)
    plan = [(key, compile_mapping(expr, at(key))) for key, expr in assignments.items()]
    if any("." in key for key in assignments):
        def apply(context: dict, scope: dict, check=None) -> dict:
            return _write(context, [(key, fn(scope)) for key, fn in plan], check)
        return apply

    def apply_flat(context: dict, scope: dict, check=None) -> dict:  # top-level keys only: _write, inlined
        values = {key: fn(scope) for key, fn in plan}  # every value first, against the same scope
        if check is not None:
            check(values, "values written to context")
        out = dict(context)
        out.update(values)
        return out
    return apply_flat


def apply_set(context: dict, assignments: dict | None, scope: dict, where: str = "", check=None) -> dict:
    """``context`` updated by ``assignments`` (evaluated first, all against the same ``scope``).
    ``check(values, what)`` may refuse the new values (the engine's payload limit)."""
    if not assignments:
        return context
    return _write(context, [(key, build(expr, scope, where)) for key, expr in assignments.items()], check)


def _write(context: dict, values: list, check) -> dict:
    if check is not None:
        check(dict(values), "values written to context")
    out = dict(context)
    for key, value in values:
        if "." not in key:
            out[key] = value
            continue
        parts = key.split(".")
        target = out
        for part in parts[:-1]:
            child = target.get(part)
            child = dict(child) if isinstance(child, dict) else {}
            target[part] = child
            target = child
        target[parts[-1]] = value
    return out
