"""The JSON Schemas (Draft 2020-12) of the kinds of file (four definition kinds, the optional
``orchestration/project.yaml`` and ``orchestration/models.yaml``), and schema errors as diagnostics.

Schemas ship as ``flowctl/definition/schemas/<kind>.json``; ``flowctl schema KIND`` prints one. Validation
uses ``jsonschema`` with validators built once per kind. Each schema error becomes a located
:class:`~flowctl.diagnostics.Diagnostic`: unknown fields are ``FC011`` with a "did you mean"
hint, durations without units ``FC502``, everything else ``FC010``.
"""
from __future__ import annotations

import json
from functools import lru_cache

from flowctl.diagnostics import Diagnostic
from flowctl.definition.yamlio import Document

KINDS = ("state", "flow", "contract", "policy", "project", "models")
#: every kind ``flowctl schema`` prints: the definition kinds and golden case files
SCHEMA_KINDS = KINDS + ("case",)
#: fields holding a JSON Schema (checked against the metaschema in ``$defs/json_schema``: FC609)
EMBEDDED_SCHEMAS = frozenset({"input_schema", "output_schema"})
DURATION_FIELDS = frozenset({"timeout", "interval", "max_delay", "duration", "remind_after", "window"})


@lru_cache(maxsize=None)
def schema_text(kind: str) -> str:
    """The schema of ``kind`` (one of :data:`SCHEMA_KINDS`) as JSON text. Raises ``KeyError`` for
    an unknown kind."""
    if kind not in SCHEMA_KINDS:
        raise KeyError(kind)
    from importlib import resources

    return resources.files("flowctl").joinpath("definition", "schemas", f"{kind}.json").read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def schema(kind: str) -> dict:
    return json.loads(schema_text(kind))


@lru_cache(maxsize=None)
def validator(kind: str):
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema(kind))


def did_you_mean(word: str, choices) -> str:
    """``"did you mean 'x'?"`` for the closest of ``choices`` to ``word``, or ``""`` if none is close."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def misspelt_error(name) -> str:
    """``"did you mean 'X'?"`` when ``name`` (an error name a retry rule, a handler or a test mock
    gives) is close to a flowctl error class name but is none, nor a Python exception name; else
    ``""`` (dotted names such as ``Payments.Declined`` are how tools name their own errors)."""
    import builtins

    from flowctl import errors

    if not isinstance(name, str) or "." in name or name == "*" or hasattr(errors, name) or hasattr(builtins, name):
        return ""
    known = [n for n in dir(errors) if isinstance(getattr(errors, n), type)
             and issubclass(getattr(errors, n), errors.FlowctlError)]
    return did_you_mean(name, known)


def unknown_flow_hint(flow_id: str, flows) -> str:
    """The hint for a flow id that names no flow of the project (``flows``: the ids): ``did you
    mean 'x'?`` for a close one, else the ids there are (``flows: a, b``, or ``flows: none``)."""
    return did_you_mean(flow_id, flows) or "flows: " + (", ".join(sorted(flows)) or "none")


def no_flow(flow_id: str, flows):
    """The :class:`~flowctl.errors.UsageError` (to raise) for a flow id that names no flow:
    ``no flow 'x'`` with :func:`unknown_flow_hint`."""
    from flowctl.errors import UsageError

    return UsageError(f"no flow '{flow_id}'", hint=unknown_flow_hint(flow_id, flows), field="flow")


def _fast(kind: str):
    """The generated validator of ``kind`` (flowctl/definition/_validators), or None if unavailable."""
    import importlib

    try:
        return importlib.import_module(f"flowctl.definition._validators.{kind}").validate
    except ImportError:  # pragma: no cover - generated modules missing from a broken install
        return None


_FAST: dict = {}


def check(kind: str, doc: Document) -> list[Diagnostic]:
    """Validate ``doc.data`` against the schema of ``kind``; return located diagnostics.

    Valid files take the fast path (code generated from the same schema, no jsonschema import);
    only a failing file is re-checked by jsonschema to produce located messages.
    """
    fast = _FAST.get(kind) or _FAST.setdefault(kind, _fast(kind))
    if fast is not None:
        try:
            fast(doc.data)
            return []
        except ValueError:
            pass
        except Exception:  # noqa: BLE001 - a generated-code edge case: let jsonschema decide
            pass
    v = validator(kind)
    if v.is_valid(doc.data):
        return []
    errors = sorted(v.iter_errors(doc.data), key=lambda e: list(map(str, e.absolute_path)))
    # A misspelt required field is one mistake: keep "unknown field 'decisons' (did you mean
    # 'decisions'?)" and drop "'decisions' is a required property" of the same mapping.
    suggested = set()
    for e in errors:
        if e.validator == "additionalProperties" and isinstance(e.instance, dict):
            known = e.schema.get("properties", {})
            for key in _unknown_keys(e.instance, known)[:UNKNOWN_REPORTED]:
                close = did_you_mean(key, known)
                if close:
                    suggested.add((tuple(e.absolute_path), close.split("'")[1]))
    out: list[Diagnostic] = []
    for error in errors:
        if error.validator == "required" and isinstance(error.instance, dict):
            missing = error.message.split("'")[1] if "'" in error.message else None
            if (tuple(error.absolute_path), missing) in suggested:
                continue
        out.extend(_translate(error, doc, kind))
    if any(d.code == "FC609" for d in out):  # the file is refused: say everything wrong with its schemas at once
        from flowctl.definition.schema_lint import schema_problems

        seen = {d.location for d in out}
        for key in sorted(EMBEDDED_SCHEMAS):
            if isinstance(doc.data.get(key), dict):
                for sub, message in schema_problems(doc.data[key], (key,), doc.data[key]):
                    d = doc.diag("FC609", message, sub, hint=_SCHEMA_HINT)
                    if d.location not in seen:
                        seen.add(d.location)
                        out.append(d)
    return out


def _known_fields(error, kind: str) -> dict:
    """The fields an unknown field is told of: a state's those of its own ``type`` (the schema's
    properties are every type's), else the schema's."""
    known = error.schema.get("properties", {})
    if kind == "state" and not error.absolute_path:
        from flowctl.definition.model import STATE_FIELDS

        own = STATE_FIELDS.get(error.instance.get("type")) if isinstance(error.instance.get("type"), str) else None
        if own is not None:
            return {k: v for k, v in known.items() if k in own or k in ("id", "type", "description")}
    return known


def _translate(error, doc: Document, kind: str = "") -> list[Diagnostic]:
    from jsonschema.exceptions import best_match

    path = tuple(error.absolute_path)
    if path and path[0] in EMBEDDED_SCHEMAS:
        return [_embedded(error, doc, path)]
    if error.validator in ("anyOf", "oneOf") and error.context:
        if path and path[-1] in DURATION_FIELDS:
            return [_duration(doc, path, error.instance)]
        inner = best_match(error.context)
        if inner is not None and len(inner.absolute_path) >= len(error.absolute_path):
            return _translate(inner, doc, kind)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = _known_fields(error, kind)
        of_type = f" of a {error.instance['type']} state" if known is not error.schema.get("properties") else ""
        out = []
        unknown = _unknown_keys(error.instance, known)
        for key in unknown[:UNKNOWN_REPORTED]:
            hint = did_you_mean(key, known) or f"known fields{of_type}: " + ", ".join(sorted(known))
            out.append(doc.diag("FC011", f"unknown field '{key}'", path + (key,), key=True, hint=hint))
        if len(unknown) > UNKNOWN_REPORTED:
            rest = unknown[UNKNOWN_REPORTED:]
            out.append(doc.diag("FC011", f"… and {len(rest):,} more unknown fields here ('{rest[0]}' first)",
                                path + (rest[0],), key=True, hint=f"known fields{of_type}: " + ", ".join(sorted(known))))
        return out
    if path and path[-1] in DURATION_FIELDS and error.validator in ("type", "pattern"):
        return [_duration(doc, path, error.instance)]
    where = "/".join(map(str, path)) or "the file"
    if error.validator == "required":
        if "then" in error.schema_path and isinstance(error.instance, dict) and "type" not in error.instance:
            # state.json's `if: {properties: {type: {const: task}}}` holds vacuously when `type` is
            # missing, so every type's `then: required` fires; the missing `type` is reported once.
            return []
        return [doc.diag("FC010", f"{where}: {error.message}", path)]
    if error.validator == "enum":
        choices = error.validator_value
        hint = did_you_mean(str(error.instance), [str(c) for c in choices]) or "one of: " + ", ".join(map(str, choices))
        return [doc.diag("FC010", f"{where}: {error.instance!r} is not allowed", path, hint=hint)]
    if error.validator == "pattern" and path and path[-1] in ("id", "flow", "policy"):
        return [doc.diag("FC010", f"{where}: {error.instance!r} is not a valid id (no spaces or slashes)", path)]
    return [doc.diag("FC010", f"{where}: {error.message}", path)]


_SCHEMA_HINT = "see https://json-schema.org/understanding-json-schema/"


def _embedded(error, doc: Document, path) -> Diagnostic:
    """FC609 for a JSON Schema written inside a file: the deepest reason (of ``anyOf`` branches, the
    one that went furthest into the value), a non-local ``$ref`` said as such."""
    while error.validator in ("anyOf", "oneOf", "allOf") and error.context:
        error = max(error.context, key=lambda e: (len(e.absolute_path), e.validator != "type"))
    path = tuple(error.absolute_path)
    where = "/".join(map(str, path))
    if path and path[-1] == "type" or len(path) > 1 and path[-2] == "type" and error.validator == "enum":
        close = did_you_mean(str(error.instance), error.validator_value) if error.validator == "enum" else ""
        if close:
            return doc.diag("FC609", f"{where}: unknown JSON Schema type {error.instance!r} ({close})", path,
                            hint=_SCHEMA_HINT)
    if path and path[-1] in ("$ref", "$dynamicRef", "$recursiveRef") and error.validator == "pattern":
        return doc.diag("FC609", f"{where}: {error.instance!r} is not a local reference; flowctl never fetches "
                        "schemas", path, hint="define it under $defs and write $ref: '#/$defs/NAME'")
    return doc.diag("FC609", f"{where}: {error.message}", path, hint=_SCHEMA_HINT)


#: Unknown fields of one mapping reported one by one; the rest are counted in one more diagnostic
#: (10^5 unknown keys stay a second's work, not a minute of "did you mean").
UNKNOWN_REPORTED = 20


def _unknown_keys(instance: dict, known) -> list:
    return [key for key in instance if key not in known]


def _duration(doc: Document, path, value) -> Diagnostic:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        hint = f"write '{value}s' (or 500ms, 5m, 1h)"
        msg = f"{path[-1]}: {value!r} has no unit"
    else:
        hint = "durations are a number and a unit: 500ms, 3s, 5m, 1h, 1d, or {expr: …} where allowed"
        msg = f"{path[-1]}: {value!r} is not a duration"
    return doc.diag("FC502", msg, path, hint=hint)
