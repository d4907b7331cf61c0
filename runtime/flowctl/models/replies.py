"""Reading a model's answer: the JSON value in its text, checked against the output schema.

:func:`extract_json` tolerates prose around the JSON (``Sure! {"a": 1} Hope that helps``) and
Markdown code fences: the whole text is tried first, then every ``{`` or ``[`` from the left as the
start of a JSON value (the first one that satisfies the schema wins, else the first that parses).
"""
from __future__ import annotations

import json

from flowctl.definition.runtime_schemas import check_instance

_DECODER = json.JSONDecoder()
#: a reply's text is searched for JSON in at most this many characters
MAX_TEXT = 1 << 20


def extract_json(text: str, schema=None):
    """``(value, problem)``: the JSON value of ``text`` and None, or ``(None, why)`` when no JSON
    value there satisfies ``schema`` (why: it is not JSON, or the schema's message for the first
    value found)."""
    text = (text or "")[:MAX_TEXT]
    stripped = text.strip()
    first = None
    try:
        value = json.loads(stripped)
    except ValueError:
        pass
    else:
        problem = check_instance(schema, value) if schema else None
        if problem is None:
            return value, None
        first = (value, problem)
    starts = [i for i, ch in enumerate(text) if ch in "{["]
    for i in starts[:200]:
        try:
            value, _end = _DECODER.raw_decode(text, i)
        except ValueError:
            continue
        problem = check_instance(schema, value) if schema else None
        if problem is None:
            return value, None
        if first is None:
            first = (value, problem)
    if first is not None:
        return None, f"the JSON in the reply does not match the output_schema {first[1]}"
    return None, "the reply holds no JSON value"


__all__ = ["extract_json", "MAX_TEXT"]
