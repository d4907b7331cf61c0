"""JSON Schema checks of run-time data (run input, state input, tool input and output).

Validators are compiled once per distinct schema (keyed by its canonical JSON) and reused.
:func:`check_instance` returns ``None`` when ``instance`` is valid, else one readable line naming
the first problem and where in the instance it is (``at /carrier: 'ups' is not one of …``).
"""
from __future__ import annotations

from .audit import canonical

_validators: dict = {}


def _validator(schema: dict):
    key = canonical(schema)
    v = _validators.get(key)
    if v is None:
        from jsonschema import Draft202012Validator

        v = _validators[key] = Draft202012Validator(schema)
    return v


def check_instance(schema, instance):
    if not schema:
        return None
    v = _validator(schema)
    if v.is_valid(instance):
        return None
    from jsonschema.exceptions import best_match

    error = best_match(v.iter_errors(instance))
    where = "/" + "/".join(map(str, error.absolute_path))
    return f"at {where}: {error.message}"
