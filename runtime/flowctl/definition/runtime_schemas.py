"""JSON Schema checks of run-time data (run input, state input, tool input and output).

Each distinct schema (keyed by its JSON text) is compiled once: into plain Python by
``fastjsonschema`` for the hot path, with ``jsonschema`` (Draft 2020-12) as the authority — it
decides when the fast validator cannot compile a schema, and it words the message of every
failure. :func:`check_instance` returns ``None`` when ``instance`` is valid, else one readable line
naming the first problem and where in the instance it is (``at /carrier: 'ups' is not one of …``).

Nothing is ever fetched and no pattern can stall a run:

* a schema holding a ``$ref`` (``$dynamicRef``, ``$recursiveRef``) that does not start with ``#``
  is refused before either library sees it (the answer names it); besides, ``jsonschema`` gets an
  empty ``referencing`` registry (no retrieval) and ``fastjsonschema`` a handler that refuses every
  URI scheme, so neither library can resolve a remote reference even if one slipped through;
* ``pattern`` and ``patternProperties`` (and the property names ``additionalProperties`` tests
  against them) are matched with RE2 (``google-re2``): linear time in the length of the value, so
  ``^(a+)+$`` on a long string answers at once. ``flowctl validate`` refuses patterns RE2 cannot
  run (look-around, back-references: FC609). A schema whose own text is invalid (``pattern: 5``,
  ``$ref: "#"`` at its root) is reported as a problem, never raised as a Python error.
"""
from __future__ import annotations

import json
from functools import lru_cache

_validators: dict = {}
REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


def remote_ref(schema):
    """The first ``$ref``-like value in ``schema`` (any depth) that is not local, or None."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in REF_KEYS and isinstance(value, str) and not value.startswith("#"):
                    return value
                if isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return None


@lru_cache(maxsize=4096)
def linear_regex(pattern: str):
    """``pattern`` compiled by RE2 (raises ``re2.error`` for what RE2 cannot run, e.g. look-around)."""
    import re2

    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


def re2_reason(exc) -> str:
    """Why RE2 refused a pattern, as one readable line (``re2.error`` carries bytes)."""
    arg = exc.args[0] if getattr(exc, "args", None) else exc
    text = arg.decode("utf-8", "replace") if isinstance(arg, (bytes, bytearray)) else str(arg)
    return text.strip() or type(exc).__name__


class _Refused(dict):
    """fastjsonschema's URI handlers: every scheme is "handled", by refusing it."""

    def __contains__(self, scheme):
        return True

    def __getitem__(self, scheme):
        def refuse(uri):
            raise ValueError(f"schemas are never fetched ({uri})")
        return refuse


def _compile(schema: dict):
    found = _validators.get(id(schema))
    if found is not None and found[2] is schema:
        return found
    key = json.dumps(schema, sort_keys=True, default=str)
    found = _validators.get(key)
    if found is None:
        fast = None
        remote = remote_ref(schema)
        if remote is None:
            try:
                import fastjsonschema

                fast = fastjsonschema.compile(schema, handlers=_Refused())
                patterns = fast.__globals__.get("REGEX_PATTERNS")
                if patterns:  # the original patterns (keys), by RE2 instead of backtracking `re`
                    fast.__globals__["REGEX_PATTERNS"] = {p: linear_regex(p) for p in patterns}
            except Exception:  # noqa: BLE001 - a schema the fast compiler does not support (or RE2 cannot run)
                fast = None
        found = _validators[key] = [fast, None, schema, remote, _trivial(schema)]
    _validators[id(schema)] = [found[0], found[1], schema, found[3], found[4]]  # definition schemas live as long as their project
    return found


def _trivial(schema):
    """A predicate that answers "valid" at once for the common schemas ``{type: object}`` and
    ``{type: object, required: [names]}`` (True: valid; False: ask the validators, which also word
    the message), or None for any other schema."""
    if not isinstance(schema, dict) or schema.get("type") != "object" or not set(schema) <= {"type", "required"}:
        return None
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    names = tuple(required)
    if not names:
        return lambda instance: type(instance) is dict
    return lambda instance: type(instance) is dict and all(n in instance for n in names)


@lru_cache(maxsize=1)
def _validator_class():
    """Draft 2020-12 with RE2 for ``pattern``, ``patternProperties`` and ``additionalProperties``."""
    from jsonschema import Draft202012Validator, validators
    from jsonschema.exceptions import ValidationError

    def pattern(validator, patrn, instance, schema):
        if validator.is_type(instance, "string") and not linear_regex(patrn).search(instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator, patterns, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for k, v in instance.items():
                if linear_regex(patrn).search(k):
                    yield from validator.descend(v, subschema, path=k, schema_path=patrn)

    def additional_properties(validator, additional, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        known = schema.get("properties", {})
        patterns = [linear_regex(p) for p in schema.get("patternProperties", {})]
        extras = [k for k in instance if k not in known and not any(p.search(k) for p in patterns)]
        if validator.is_type(additional, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], additional, path=extra)
        elif not additional and extras:
            yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, sorted(extras)))} "
                                  f"{'was' if len(extras) == 1 else 'were'} unexpected)")

    return validators.extend(Draft202012Validator, {"pattern": pattern, "patternProperties": pattern_properties,
                                                    "additionalProperties": additional_properties})


def _slow(entry, schema):
    if entry[1] is None:
        from referencing import Registry

        entry[1] = _validator_class()(schema, registry=Registry())  # an empty registry: nothing is retrieved
    return entry[1]


def check_instance(schema, instance):
    """None when ``instance`` satisfies ``schema``, else one line naming every problem: ``at
    /pointer: message`` for each (the most relevant first, at most :data:`REPORTED`, joined by
    ``; ``), or what is wrong with the schema itself."""
    found = _problems(schema, instance)
    if found is None:
        return None
    said = [message if where is None else f"at {where}: {message}" for where, message in found[:REPORTED]]
    return "; ".join(said) + (f"; and more (the first {REPORTED} are shown)" if len(found) > REPORTED else "")


def locate_problem(schema, instance):
    """None when ``instance`` satisfies ``schema``, else ``(pointer, message)``: the JSON Pointer
    (RFC 6901) into ``instance`` of the first problem (``"/amount"``; ``"/"`` for the whole value),
    or None when the schema itself cannot be checked, and one readable line."""
    found = _problems(schema, instance)
    return None if found is None else found[0]


#: the problems one message names at most (an input may be wrong in a thousand places)
REPORTED = 10


def _pointer(error) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in error.absolute_path)


def _problems(schema, instance):
    """None when ``instance`` satisfies ``schema``, else ``[(pointer or None, message)]``: the most
    relevant problem first, then the others (at most :data:`REPORTED` + 1; `{}` for a schema
    requiring three fields has three)."""
    if not schema:
        return None
    entry = _compile(schema)
    trivial = entry[4]
    if trivial is not None and trivial(instance):
        return None
    if entry[3] is not None:
        return [(None, f"the schema refers to {entry[3]!r}, which is not inside it; schemas are never fetched")]
    fast = entry[0]
    if fast is not None:
        try:
            fast(instance)
            return None
        except Exception:  # noqa: BLE001 - fall through to the authority for the message
            pass
    try:
        v = _slow(entry, schema)
        if v.is_valid(instance):
            return None
        from jsonschema.exceptions import best_match

        errors = []
        for error in v.iter_errors(instance):
            errors.append(error)
            if len(errors) > REPORTED:
                break
        best = best_match(errors)
        found = [(_pointer(best), best.message)]
        for other in errors:
            inner = best_match([other])
            said = (_pointer(inner), inner.message)
            if said not in found:
                found.append(said)
        return found
    except RecursionError:
        return [(None, "the schema refers to itself without end ($ref cycle); it cannot be checked")]
    except Exception as exc:  # noqa: BLE001 - an invalid schema (pattern: 5, an unresolvable $ref …)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [(None, f"the schema itself is invalid ({type(exc).__name__}: {first})")]
