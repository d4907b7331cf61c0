"""A review's form, made from its state's ``data_schema``, and the data a posted form gives.

:func:`form_fields` turns an object schema into fields: a ``string`` is a text input, an ``enum``
(of scalars) a select, ``number``/``integer`` a number input, ``boolean`` a checkbox, an object
property with ``properties`` a group of its own fields (one level down), an array of scalars a list
field (a textarea, one item a line); whatever else the form cannot show (deeper objects, arrays of
objects, ``anyOf``, ``$ref`` …) is a JSON textarea for that property. A schema that is not an object
with ``properties`` gets one JSON textarea for the whole data (``kind: json`` at pointer ``/``).

Each field is ``{key, pointer, label, kind, required, enum, options, title, item}``: ``key`` the posted name
(``data`` + the JSON Pointer, e.g. ``data/refund/amount``), ``kind`` one of
``string number integer boolean enum list json``, ``item`` a list's item type. :func:`data_from`
builds the data from the posted values; the schema itself is checked afterwards, by the engine
(:func:`flowctl.engine.states.review.check_data`), so the form is a convenience, never the check.
"""
from __future__ import annotations

import json
import math

from flowctl.engine.payload import not_json

SCALARS = ("string", "number", "integer", "boolean")


def _escape(name: str) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")


def _kind(prop) -> tuple:
    """``(kind, item type)`` of one property's schema."""
    if not isinstance(prop, dict) or any(k in prop for k in ("anyOf", "oneOf", "allOf", "$ref", "not", "if")):
        return "json", None
    enum = prop.get("enum")
    if isinstance(enum, list) and enum and all(v is None or isinstance(v, (str, int, float, bool)) for v in enum):
        return "enum", None
    t = prop.get("type")
    if t in SCALARS:
        return t, None
    if t == "array":
        items = prop.get("items")
        if isinstance(items, dict) and items.get("type") in ("string", "number", "integer") and "enum" not in items:
            return "list", items["type"]
    return "json", None


def _option(value) -> str:
    """An enum value as its select option's text (a string as itself, anything else as JSON)."""
    return value if isinstance(value, str) else json.dumps(value)


def _field(pointer: str, label: str, prop, required: bool) -> dict:
    kind, item = _kind(prop)
    prop = prop if isinstance(prop, dict) else {}
    enum = list(prop.get("enum") or ()) if kind == "enum" else []
    return {"key": "data" + pointer, "pointer": pointer, "label": label, "kind": kind, "required": required,
            "enum": enum, "options": [_option(v) for v in enum], "item": item,
            "title": str(prop.get("title") or prop.get("description") or "")}


def _is_object(schema) -> bool:
    return isinstance(schema, dict) and schema.get("type") in (None, "object") \
        and isinstance(schema.get("properties"), dict) and schema["properties"] \
        and not any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref", "not", "if"))


def form_fields(schema) -> list:
    """The fields of a review's form (see the module); ``[]`` without a schema (the data is then an
    optional JSON object)."""
    if not schema:
        return []
    if not _is_object(schema):
        return [_field("/", "data", schema, True)]
    required = set(schema.get("required") or ())
    out = []
    for name, prop in schema["properties"].items():
        pointer = "/" + _escape(name)
        if _is_object(prop):
            inner = set(prop.get("required") or ())
            group = {"key": "data" + pointer, "pointer": pointer, "label": str(name), "kind": "group",
                     "required": name in required, "title": str(prop.get("title") or prop.get("description") or ""),
                     "fields": []}
            for sub, subprop in prop["properties"].items():
                child = _field(pointer + "/" + _escape(sub), str(sub), subprop, name in required and sub in inner)
                child["within"] = sub in inner  # required once its group is given
                if _is_object(subprop):
                    child.update(kind="json", enum=[], options=[], item=None)  # two levels down: JSON
                group["fields"].append(child)
            out.append(group)
        else:
            out.append(_field(pointer, str(name), prop, name in required))
    return out


def _number(raw: str, kind: str):
    try:
        value = int(raw) if kind == "integer" else float(raw)
    except ValueError:
        raise ValueError("must be a whole number" if kind == "integer" else "must be a number") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        if value.is_integer() and "." not in raw and "e" not in raw.lower():
            value = int(value)
    return value


def _value(f: dict, raw):
    """The typed value of one field (None: not given). Raises ``ValueError`` saying what is wrong."""
    kind = f["kind"]
    if kind == "boolean":
        return raw in ("on", "true", "1")
    if raw is None or raw.strip() == "":
        return None
    if kind in ("number", "integer"):
        return _number(raw.strip(), kind)
    if kind == "enum":
        for v, text in zip(f["enum"], f["options"]):
            if raw == text:
                return v
        raise ValueError(f"is not one of {', '.join(f['options'])}")
    if kind == "list":
        lines = [line.strip() for line in raw.splitlines() if line.strip()]
        return [_number(x, f["item"]) for x in lines] if f["item"] in ("number", "integer") else lines
    if kind == "json":
        return parse_json(raw, "is not JSON")
    return raw


def _no_constant(name):
    raise ValueError(f"{name} is not JSON (use null or a number)")


def parse_json(text: str, what: str):
    """``text`` parsed as JSON that can be stored: no NaN or Infinity (JSON has none, Python's
    parser takes them), no lone surrogate (``"\\ud800"``). Raises ``ValueError``."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{what} (or nests too deeply): {exc}") from None
    except ValueError as exc:  # NaN, Infinity, an integer too long to convert
        raise ValueError(f"{what}: {exc}") from None
    bad = not_json(value)
    if bad is not None:
        raise ValueError(f"{what}: at {bad[0] or '/'}: {bad[1]}")
    return value


class FormError(ValueError):
    """A posted value the form cannot read; ``pointer`` is where in the data it would go."""

    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(f"at {pointer}: {message}")
        self.pointer = pointer


def _read(f: dict, posted: dict):
    try:
        return _value(f, posted.get(f["key"]))
    except ValueError as exc:
        raise FormError(f["pointer"], str(exc)) from None


def data_from(fields: list, posted: dict):
    """The decision's data from the posted form (``{key: text}``), typed by ``fields``; without
    fields, the JSON object posted as ``data_json`` (None when empty). Fields left empty are left
    out (a group whose fields are all empty too). Raises :class:`FormError` (a ``ValueError``) for a
    value that is not what its field reads (a number that is not one, JSON that does not parse) or
    that JSON cannot store (NaN, Infinity, a lone surrogate)."""
    if not fields:
        text = (posted.get("data_json") or "").strip()
        if not text:
            return None
        try:
            data = parse_json(text, "the data is not JSON")
        except ValueError as exc:
            raise FormError("/", str(exc)) from None
        if not isinstance(data, dict):
            raise FormError("/", "the data must be a JSON object")
        return data
    if len(fields) == 1 and fields[0]["pointer"] == "/":
        return _checked(_read(fields[0], posted))
    data = {}
    for f in fields:
        name = f["label"]
        if f["kind"] == "group":
            inner = {}
            for sub in f["fields"]:
                value = _read(sub, posted)
                if value is not None and not (sub["kind"] == "boolean" and value is False and not sub["within"]):
                    inner[sub["label"]] = value
            if inner or f["required"]:
                data[name] = inner
            continue
        value = _read(f, posted)
        if value is not None:
            data[name] = value
    return _checked(data)


def _checked(data):
    """``data``, unless a text field gave a lone surrogate (a browser sends text; a script may not)."""
    bad = not_json(data)
    if bad is not None:
        raise FormError(bad[0] or "/", bad[1])
    return data


__all__ = ["FormError", "data_from", "form_fields", "parse_json"]
