"""JSON Schema checks of run-time data (run input, state input, tool input and output).

Each distinct schema (keyed by its JSON text) is compiled once: into plain Python by
``fastjsonschema`` for the hot path, with ``jsonschema`` (Draft 2020-12) as the authority — it
decides when the fast validator cannot compile a schema, and it words the message of every
failure. :func:`check_instance` returns ``None`` when ``instance`` is valid, else one readable line
naming the first problem and where in the instance it is (``at /carrier: 'ups' is not one of …``).
"""
from __future__ import annotations

import json

_validators: dict = {}


def _compile(schema: dict):
    found = _validators.get(id(schema))
    if found is not None and found[2] is schema:
        return found
    key = json.dumps(schema, sort_keys=True, default=str)
    found = _validators.get(key)
    if found is None:
        fast = None
        try:
            import fastjsonschema

            fast = fastjsonschema.compile(schema)
        except Exception:  # noqa: BLE001 - a schema the fast compiler does not support
            fast = None
        found = _validators[key] = [fast, None, schema]
    _validators[id(schema)] = [found[0], found[1], schema]  # definition schemas live as long as their project
    return found


def _slow(entry, schema):
    if entry[1] is None:
        from jsonschema import Draft202012Validator

        entry[1] = Draft202012Validator(schema)
    return entry[1]


def check_instance(schema, instance):
    if not schema:
        return None
    entry = _compile(schema)
    fast = entry[0]
    if fast is not None:
        try:
            fast(instance)
            return None
        except Exception:  # noqa: BLE001 - fall through to the authority for the message
            pass
    v = _slow(entry, schema)
    if v.is_valid(instance):
        return None
    from jsonschema.exceptions import best_match

    error = best_match(v.iter_errors(instance))
    where = "/" + "/".join(map(str, error.absolute_path))
    return f"at {where}: {error.message}"
