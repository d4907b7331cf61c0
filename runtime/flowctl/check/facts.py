"""Scope facts for the data-flow analysis (:mod:`flowctl.check.dataflow`): operations on the
:class:`~flowctl.check.shapes.Shape` of the scope — a root replaced (:func:`with_roots`), a
dotted ``set`` key written (:func:`write_key`), the keys a true ``when`` proves set
(:func:`asserted`, :func:`refine`), and a contract's output shape (:func:`contract_output`).
Pure functions of shapes; they never raise for project content.
"""
from __future__ import annotations

from flowctl.check import shapes as S
from flowctl.check.shapes import ANY, Shape
from flowctl.check.infer import parse


def sets_key(mapping, key) -> bool:
    if not isinstance(mapping, dict):
        return False
    return any(str(k) == key or str(k).startswith(key + ".") for k in mapping)


def with_roots(fact: Shape, **roots) -> Shape:
    props = dict(fact.props)
    for k, v in roots.items():
        props[k] = (v, True)
    return Shape(fact.types, props, fact.closed, fact.items, fact.prefix)


def widen(fact: Shape) -> Shape:
    props = dict(fact.props)
    for k in ("context", "response", "review", "error"):
        props[k] = (ANY, True)
    return Shape(fact.types, props, fact.closed)


def strip_null(shape: Shape) -> Shape:
    if shape.types is None or shape.types == {"null"}:
        return shape
    return Shape(shape.types - {"null"}, shape.props, shape.closed, shape.items, shape.prefix)


def write_key(ctx: Shape, parts, value: Shape) -> Shape:
    """``ctx`` with ``value`` written at the dotted key ``parts`` (objects created on the way)."""
    if ctx.types is None:
        return ctx
    props = dict(ctx.props) if "object" in ctx.types else {}
    closed = ctx.closed if ctx.types == {"object"} else ("object" not in ctx.types or ctx.closed)
    head = parts[0]
    if len(parts) == 1:
        props[head] = (value, True)
    else:
        found = props.get(head)
        if found is None:
            child = S.obj({}, closed=closed)
        else:
            child_shape, always = found
            if child_shape.types is None:
                child = ANY
            elif child_shape.types == {"object"} and always:
                child = child_shape
            else:  # not always an object: a non-object is replaced by {}
                base = child_shape if "object" in child_shape.types else S.obj({}, closed=True)
                child = Shape(("object",), {k: (s, False) for k, (s, _) in base.props.items()}, base.closed)
        props[head] = (write_key(child, parts[1:], value), True)
    return Shape(("object",), props, closed)


def contract_output(contract) -> Shape:
    if contract is None or not isinstance(contract.output_schema, dict):
        return ANY
    return S.from_schema(contract.output_schema)


_ASSERTED: dict = {}


def asserted(when) -> frozenset:
    """Context keys a true ``when`` proves set (not null): bare paths, ``== literal``, ``!= null``,
    orderings, joined by ``&&``."""
    if not isinstance(when, str):
        return frozenset()
    found = _ASSERTED.get(when)
    if found is None:
        found = _ASSERTED[when] = frozenset(_asserted_keys(parse(when)))
    return found


def _asserted_keys(tree) -> set:
    out: set = set()
    if tree is None:
        return out
    terms = [tree]
    while terms:
        node = terms.pop()
        kind = node.get("type")
        if kind == "and_expression":
            terms.extend(node.get("children") or ())
            continue
        paths = []
        if kind in ("subexpression", "field"):
            paths = [node]
        elif kind == "comparator" and len(node.get("children") or ()) == 2:
            a, b = node["children"]
            op = node.get("value")
            for p, other in ((a, b), (b, a)):
                null = _is_null(other)
                if (op == "ne" and null) or (op != "ne" and not null and other.get("type") == "literal"):
                    paths.append(p)
        for p in paths:
            key = _context_key(p)
            if key:
                out.add(key)
    return out


def _is_null(node) -> bool:
    if node.get("type") == "literal":
        return node.get("value") is None
    return node.get("type") == "field" and node.get("value") == "null"


def _context_key(node):
    if node.get("type") == "subexpression":
        ch = node.get("children") or ()
        if len(ch) >= 2 and ch[0].get("type") == "field" and ch[0].get("value") == "context" \
                and ch[1].get("type") == "field":
            return ch[1].get("value")
    return None


def refine(fact: Shape, when) -> Shape:
    """``fact`` on the way through a transition whose ``when`` held: keys it proves set are set."""
    if not when:
        return fact
    keys = asserted(when)
    if not keys:
        return fact
    ctx, _ = fact.field("context")
    if ctx.types is None:
        return fact
    props = dict(ctx.props)
    for k in keys:
        if k in props:
            props[k] = (strip_null(props[k][0]), True)
    return with_roots(fact, context=Shape(ctx.types, props, ctx.closed))
