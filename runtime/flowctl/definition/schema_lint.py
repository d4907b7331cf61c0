"""Embedded JSON Schemas past their metaschema: what a schema library would choke on at run time.

The metaschema (``$defs/json_schema`` in each kind's schema, from scripts/json_schema_defs.json)
checks the shape of every keyword, and that a ``$ref`` is local, while the file loads.
:func:`schema_problems` finds the rest, as ``(path, message)`` pairs for FC609: patterns that do
not compile, or that RE2 (the linear-time engine runs match with, :mod:`flowctl.definition.runtime_schemas`)
cannot run; local references that do not resolve inside the schema, or that lead back to the same value
without descending into it (``$ref: "#"`` at the root: checking would never end). Light: no
jsonschema import (RE2 only when a schema has a pattern).
"""
from __future__ import annotations

#: keywords whose value is a schema / a list of schemas / a mapping of names to schemas
_ONE_SCHEMA = frozenset({"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
                         "unevaluatedProperties", "unevaluatedItems", "additionalItems", "contentSchema"})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})
#: keywords that apply their schema to the same value (a $ref cycle through only these never ends)
_IN_PLACE = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies"})


def _subschemas(schema, path):
    """``(keyword, path, subschema)`` of every schema directly inside ``schema``."""
    for key, value in schema.items():
        if key in _ONE_SCHEMA and isinstance(value, dict):
            yield key, path + (key,), value
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                if isinstance(sub, dict):
                    yield key, path + (key, i), sub
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            for k, sub in value.items():
                if isinstance(sub, dict):
                    yield key, path + (key, k), sub


def _ref_target(root, ref: str):
    target = root
    for part in [p.replace("~1", "/").replace("~0", "~") for p in ref[1:].split("/") if p]:
        if isinstance(target, dict):
            target = target.get(part)
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return None
    return target


def schema_problems(schema, path, root):
    """(path, message) for what a schema library would choke on at run time, past the metaschema
    (``$defs/json_schema`` of the kind's schema): patterns that do not compile or that RE2 (the
    linear-time engine runs use) cannot run, $refs that do not resolve inside the schema or
    that loop back to the same value without descending into it. No jsonschema import."""
    import re

    if not isinstance(schema, dict):
        return
    patterns = [(path + ("pattern",), schema["pattern"])] if isinstance(schema.get("pattern"), str) else []
    if isinstance(schema.get("patternProperties"), dict):
        patterns += [(path + ("patternProperties", k), k) for k in schema["patternProperties"]]
    for where, pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            yield where, f"pattern {pattern!r} does not compile: {exc}"
            continue
        try:
            from flowctl.definition.runtime_schemas import linear_regex

            linear_regex(pattern)
        except Exception as exc:  # noqa: BLE001 - re2.error: look-around, back-references …
            why = str(exc).strip("b'\"")
            yield where, (f"pattern {pattern!r} needs a backtracking regex engine ({why}); runs match patterns "
                          "with RE2, in linear time, so look-around and back-references are not available")
    ref = schema.get("$ref")
    if isinstance(ref, str):
        if not ref.startswith("#"):
            yield path + ("$ref",), f"$ref {ref!r} points outside the schema; only local refs (#/...) are resolved"
        elif _ref_target(root, ref) is None:
            yield path + ("$ref",), f"$ref {ref!r} does not resolve inside the schema"
        elif _ref_loops(root, schema):
            yield path + ("$ref",), (f"$ref {ref!r} leads back to this schema for the same value; checking it "
                                     "would never end")
    for _key, sub_path, sub in _subschemas(schema, path):
        yield from schema_problems(sub, sub_path, root)


def _ref_loops(root, start) -> bool:
    """Whether following $ref and in-place keywords (allOf, not, if …) from ``start`` comes back to
    ``start`` without descending into a property or item."""
    seen = set()
    stack = [start]
    first = True
    while stack:
        node = stack.pop()
        if node is start and not first:
            return True
        first = False
        if id(node) in seen or not isinstance(node, dict):
            continue
        seen.add(id(node))
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            target = _ref_target(root, ref)
            if isinstance(target, dict):
                stack.append(target)
        for key, _path, sub in _subschemas(node, ()):
            if key in _IN_PLACE:
                stack.append(sub)
    return False
