"""A tool's output as the record keeps it: :func:`parse_output`.

A tool returns a dict (or JSON text, or bytes of it, or None for ``{}``). What the run keeps is a
fresh copy, so the tool cannot change it after the fact, and only what JSON stored as UTF-8 can
hold: no NaN or infinity, no lone surrogate, no object JSON has no form for, and no nesting past
:data:`~flowctl.engine.payload.MAX_DEPTH`. Anything else is a :class:`~flowctl.errors.SchemaMismatch`
naming the contract (the call still returned: :func:`flowctl.engine.calls.record_failure` then
verifies its effect and keeps it in the saga).
"""
from __future__ import annotations

import json

from flowctl.engine.eventtext import flat_text
from flowctl.engine.payload import MAX_DEPTH, MAX_PAYLOAD, flat_copy, too_deep
from flowctl.errors import SchemaMismatch


def parse_output(raw, contract):
    """``(output, raw JSON text or None, owned, output text or None)``. ``owned`` (see :meth:`RunContext.emit <flowctl.engine.context.RunContext.emit>`): ``True`` for a
    fresh output known to be small, else a tuple of the values to measure. The output is always a
    fresh object: a copy of what the tool returned, or parsed from the text it returned."""
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8")
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw, parse_constant=_no_constant)
            if "\\u" in raw or not raw.isascii():  # a lone surrogate (escaped or not): UTF-8 cannot hold it
                _STRICT.encode(parsed).encode("utf-8")
            _not_too_deep(parsed, contract)
            return parsed, raw, (parsed, raw), None  # fresh, size unknown: measured by the event
        except RecursionError:
            _not_too_deep(None, contract, deep=True)
        except ValueError as exc:  # (new-user finding: a plain message returned read as a JSON parser's error)
            shown = raw if len(raw) <= 60 else raw[:57] + "..."
            raise SchemaMismatch(f"{contract.ref} returned the text {shown!r}, which is not JSON ({exc}): a tool returns "
                                 "a dict, or JSON text such as '{\"status\": \"sent\"}'") from None
    if raw is None:
        return {}, None, True, "{}"
    text = flat_text(raw)  # the stored text of a flat output (eventtext), made once
    if text is not None:
        return dict(raw), None, True, text
    flat = flat_copy(raw)
    if flat is not None:  # JSON by construction, small, and a copy the tool cannot change later
        return flat, None, True, None
    if not isinstance(raw, (dict, list, int, float, bool)):
        raise SchemaMismatch(f"{contract.ref} returned {type(raw).__name__}; tools return a dict or JSON text")
    try:
        text = _STRICT.encode(raw)  # JSON only: no NaN, no objects JSON cannot hold
        text.encode("utf-8")  # ... and no text UTF-8 cannot hold (lone surrogates)
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise SchemaMismatch(f"{contract.ref} returned data that is not JSON: {exc}") from None
    except RecursionError:
        _not_too_deep(None, contract, deep=True)
    _not_too_deep(raw, contract)
    # a copy: the tool may keep the object it returned and change it later (the run must not see that)
    parsed = json.loads(text)
    return parsed, None, True if len(text) <= MAX_PAYLOAD // 8 else (parsed,), None


def _not_too_deep(value, contract, deep: bool = False) -> None:
    """Raise :class:`SchemaMismatch` for an output nested deeper than :data:`MAX_DEPTH` levels
    (``deep``: known already), which no reader of the record could walk."""
    if deep or too_deep(value) is not None:
        raise SchemaMismatch(f"{contract.ref} returned data nested more than {MAX_DEPTH} levels deep, which flowctl "
                             "does not keep") from None


_STRICT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=True)


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


__all__ = ["parse_output"]
