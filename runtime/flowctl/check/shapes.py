"""Shapes: what the static data-flow analysis (:mod:`flowctl.dataflow`) knows about a JSON value.

A :class:`Shape` is an over-approximation of the values an expression can have at run time:

- ``types``: the JSON types it may have (``null``, ``boolean``, ``number``, ``string``,
  ``array``, ``object``), or ``None`` for *unknown* (anything; the analysis stays silent);
- for objects, ``props``: key -> ``(shape, always)`` where ``always`` says the key is present in
  every object (``required``, or set on every path); ``closed``: no other key can be present
  (``additionalProperties: false``, or ``context``, which only ``set`` writes);
- for arrays, ``items`` (the shape of every element) and ``prefix`` (known shapes of the first
  elements, e.g. the outputs of a ``parallel`` state's branches in order).

Shapes are immutable and hashable; :func:`join` is the least upper bound (a value of either
shape). Nesting deeper than :data:`MAX_DEPTH` becomes unknown, so every chain of joins is finite.
Nothing here raises for malformed schemas: what cannot be read is unknown.
"""
from __future__ import annotations

JSON_TYPES = ("null", "boolean", "number", "string", "array", "object")
MAX_DEPTH = 8


class Shape:
    __slots__ = ("types", "props", "closed", "items", "prefix", "_key")

    def __init__(self, types=None, props=None, closed=False, items=None, prefix=None):
        # the arguments are owned by the new shape (never mutated after): no copies
        self.types = types if types is None or type(types) is frozenset else frozenset(types)
        self.props = props if type(props) is dict else (dict(props) if props else {})
        self.closed = bool(closed)
        self.items = items
        self.prefix = prefix if type(prefix) is tuple else (tuple(prefix) if prefix else ())
        self._key = None

    # ------------------------------------------------------------------ identity
    def key(self):
        if self._key is None:
            if self.types is None:
                self._key = ("?",)
            else:
                props = tuple(sorted((k, s.key(), a) for k, (s, a) in self.props.items())) if "object" in self.types else ()
                arr = (self.items.key() if self.items is not None else None,
                       tuple(p.key() for p in self.prefix)) if "array" in self.types else ()
                self._key = (tuple(sorted(self.types)), props, self.closed and "object" in self.types, arr)
        return self._key

    def __eq__(self, other):
        return isinstance(other, Shape) and _same(self, other)

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        return f"Shape({describe(self)})"

    # ------------------------------------------------------------------ questions
    @property
    def known(self) -> bool:
        return self.types is not None

    def only(self, *names) -> bool:
        """The value is certainly one of ``names`` (unknown: False)."""
        return self.types is not None and self.types <= set(names)

    def may_be(self, name) -> bool:
        return self.types is None or name in self.types

    def non_null(self):
        """The JSON types besides null (None: unknown)."""
        return None if self.types is None else self.types - {"null"}

    def field(self, name):
        """``(shape, presence)`` of ``value.name``: presence is ``always``, ``sometimes``, ``never``
        or ``unknown``. A value that is not an object gives null (never)."""
        if self.types is None:
            return ANY, "unknown"
        if "object" not in self.types:
            return NULL, "never"
        found = self.props.get(name)
        if found is None:
            if self.closed:
                return NULL, "never"
            return ANY, "unknown"
        shape, always = found
        if always and self.types == {"object"}:
            return shape, "always"
        return join(shape, NULL), "sometimes"

    def element(self, index=None):
        """Shape of ``value[index]`` (``index`` None: any element)."""
        if self.types is None:
            return ANY
        if "array" not in self.types:
            return NULL
        items = self.items if self.items is not None else ANY
        if isinstance(index, int) and 0 <= index < len(self.prefix):
            out = self.prefix[index]
            return out if self.types == {"array"} else join(out, NULL)
        if isinstance(index, int) and self.prefix:
            return join(items, NULL)  # past the known elements: the array may be shorter
        return join(items, NULL)


def _same(a: Shape, b: Shape) -> bool:
    """Structural equality, short-cut on shared sub-shapes (the fixpoint's common case)."""
    if a is b:
        return True
    if a.types != b.types:
        return False
    if a.types is None:
        return True
    if "object" in a.types:
        if a.closed != b.closed or a.props.keys() != b.props.keys():
            return False
        for k, pa in a.props.items():
            pb = b.props[k]
            if pa is not pb and (pa[1] != pb[1] or not _same(pa[0], pb[0])):
                return False
    if "array" in a.types:
        ia, ib = a.items, b.items
        if ia is not ib and (ia is None or ib is None or not _same(ia, ib)):
            return False
        if len(a.prefix) != len(b.prefix) or not all(x is y or _same(x, y) for x, y in zip(a.prefix, b.prefix)):
            return False
    return True


ANY = Shape(None)


def of(*types) -> Shape:
    return Shape(types)


NULL = of("null")
BOOLEAN = of("boolean")
NUMBER = of("number")
STRING = of("string")


def obj(props=None, closed=False, nullable=False) -> Shape:
    """An object shape; ``props``: key -> shape (always present) or ``(shape, always)``."""
    out = {}
    for k, v in (props or {}).items():
        out[k] = v if isinstance(v, tuple) else (v, True)
    return Shape(("object", "null") if nullable else ("object",), out, closed)


def array(items=None, prefix=None) -> Shape:
    return Shape(("array",), items=items if items is not None else ANY, prefix=prefix)


def _depth_cap(shape: Shape, depth: int) -> Shape:
    if shape.types is None:
        return shape
    if depth >= MAX_DEPTH:
        return ANY
    if not shape.props and shape.items is None and not shape.prefix:
        return shape
    props = {k: (_depth_cap(s, depth + 1), a) for k, (s, a) in shape.props.items()}
    items = _depth_cap(shape.items, depth + 1) if shape.items is not None else None
    prefix = [_depth_cap(p, depth + 1) for p in shape.prefix]
    return Shape(shape.types, props, shape.closed, items, prefix)


def capped(shape: Shape) -> Shape:
    """``shape`` with nesting past :data:`MAX_DEPTH` made unknown."""
    return _depth_cap(shape, 0)


def join(a: Shape, b: Shape) -> Shape:
    """A shape holding every value of ``a`` and every value of ``b``."""
    if a is b:
        return a
    if a.types is None or b.types is None:
        return ANY
    types = a.types | b.types
    props, closed = {}, False
    if "object" in types:
        a_obj, b_obj = "object" in a.types, "object" in b.types
        if a_obj and b_obj:
            closed = a.closed and b.closed
            bp = b.props
            for k in (a.props.keys() | bp.keys()) if a.props.keys() != bp.keys() else a.props:
                pa, pb = a.props.get(k), bp.get(k)
                if pa is not None and pb is not None:
                    if pa is pb or (pa[0] is pb[0] and pa[1] == pb[1]):
                        props[k] = pa
                    else:
                        props[k] = (join(pa[0], pb[0]) if pa[0] is not pb[0] else pa[0], pa[1] and pb[1])
                else:
                    p = pa or pb
                    other = b if pa is not None else a
                    if not other.closed:
                        continue  # the other side may hold anything under k: unknown
                    props[k] = (p[0], False)
        else:
            src = a if a_obj else b
            props, closed = dict(src.props), src.closed
    items, prefix = None, ()
    if "array" in types:
        a_arr, b_arr = "array" in a.types, "array" in b.types
        if a_arr and b_arr:
            ia = a.items if a.items is not None else ANY
            ib = b.items if b.items is not None else ANY
            items = join(ia, ib)
            if len(a.prefix) == len(b.prefix):
                prefix = tuple(join(x, y) for x, y in zip(a.prefix, b.prefix))
        else:
            src = a if a_arr else b
            items, prefix = src.items, src.prefix
    return Shape(types, props, closed, items, prefix)


def join_all(shapes) -> Shape:
    out = None
    for s in shapes:
        out = s if out is None else join(out, s)
    return out if out is not None else ANY


def of_value(value, depth: int = 0) -> Shape:
    """The exact shape of a JSON value (a literal)."""
    if depth > MAX_DEPTH:
        return ANY
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, (int, float)):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        shapes = [of_value(v, depth + 1) for v in value[:64]]
        if len(value) > 64:
            return array(ANY)
        return array(join_all(shapes) if shapes else Shape(()), prefix=shapes)
    if isinstance(value, dict):
        if len(value) > 256:
            return of("object")
        return obj({str(k): of_value(v, depth + 1) for k, v in value.items()}, closed=True)
    return ANY


_SCHEMA_TYPES = {"integer": "number", "number": "number", "string": "string", "boolean": "boolean",
                 "null": "null", "array": "array", "object": "object"}


def from_schema(schema, depth: int = 0) -> Shape:
    """What a value valid against JSON Schema ``schema`` can look like (unknown where the schema
    does not say, or says something this reader does not follow, such as ``$ref``)."""
    if schema is True or schema is None:
        return ANY
    if schema is False:
        return Shape(())
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return ANY
    types = None
    t = schema.get("type")
    if isinstance(t, str):
        t = [t]
    if isinstance(t, list) and t and all(isinstance(x, str) and x in _SCHEMA_TYPES for x in t):
        types = {_SCHEMA_TYPES[x] for x in t}
    for key in ("enum", "const"):
        values = schema.get(key) if key == "enum" else [schema.get(key)] if key in schema else None
        if isinstance(values, list) and values:
            seen = set()
            for v in values:
                s = of_value(v)
                if s.types is None:
                    seen = None
                    break
                seen |= s.types
            if seen is not None:
                types = seen if types is None else types & seen
    if types is None:
        for key in ("anyOf", "oneOf"):
            alts = schema.get(key)
            if isinstance(alts, list) and alts:
                shape = join_all(from_schema(a, depth + 1) for a in alts)
                if shape.types is not None:
                    return shape  # properties of the alternatives are kept
        return ANY if not _object_keywords(schema) else _object(schema, {"object"}, depth, loose=True)
    shape_types = set(types)
    props, closed, items, prefix = {}, False, None, ()
    if "object" in shape_types:
        return _object(schema, shape_types, depth)
    if "array" in shape_types:
        items = from_schema(schema.get("items"), depth + 1) if isinstance(schema.get("items"), (dict, bool)) else ANY
    return Shape(shape_types, props, closed, items, prefix)


def _object_keywords(schema) -> bool:
    return isinstance(schema.get("properties"), dict)


def _object(schema, types, depth, loose=False) -> Shape:
    if loose:  # no type keyword: a value that is no object at all is valid too
        return ANY
    raw = schema.get("properties")
    raw = raw if isinstance(raw, dict) else {}
    required = schema.get("required")
    required = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    props = {str(k): (from_schema(v, depth + 1), k in required) for k, v in raw.items()}
    closed = schema.get("additionalProperties") is False and not schema.get("patternProperties") \
        and not any(k in schema for k in ("allOf", "anyOf", "oneOf", "$ref", "unevaluatedProperties", "if",
                                          "dependentSchemas", "dependencies"))
    items = None
    if "array" in types:
        items = from_schema(schema.get("items"), depth + 1) if isinstance(schema.get("items"), (dict, bool)) else ANY
    return Shape(types, props, closed, items)


def accepts_null(schema) -> bool | None:
    """Whether JSON Schema ``schema`` accepts null: True, False, or None (cannot tell)."""
    shape = from_schema(schema)
    if shape.types is None:
        return None
    return "null" in shape.types


def describe(shape: Shape) -> str:
    """A short human name: ``number``, ``string or null``, ``object {a, b}``, ``unknown``."""
    if shape.types is None:
        return "unknown"
    if not shape.types:
        return "nothing"
    names = [t for t in JSON_TYPES if t in shape.types]
    return " or ".join(names)


def type_names(types) -> str:
    return " or ".join(t for t in JSON_TYPES if t in types)
