"""The stored text of the step's own audit events, built without the general JSON encoder.

Every audit event is stored as its data's JSON text (:func:`flowctl.store.audit.encode_data`:
compact, keys in insertion order, UTF-8), and that text is what the hash chain covers. The four
events of an ordinary step (``state_entered``, ``tool_invoked``, ``tool_succeeded``,
``transition_taken``) have fixed shapes, so their text is put together here from pieces: the
engine's own strings and numbers formatted directly, the tool's flat input or output formatted by
:func:`flat_text`. Each function returns exactly the text :func:`~flowctl.store.audit.encode_data`
gives for the same dict (a differential test holds them to it), or ``None`` when a value is outside
what it formats (non-ASCII or unusual text, nested values, non-finite numbers): the caller then
encodes the dict the general way. The texts are short by construction (see
:mod:`flowctl.engine.payload`), so they are under the payload limit without measuring.
"""
from __future__ import annotations

import math
from json.encoder import encode_basestring as _string  # what the encoder behind encode_data escapes strings with

from flowctl.engine.payload import FIT_STRING, FLAT_KEYS

_BIG = 1 << 64
_NAMES: dict = {}  # engine strings and object keys seen (up to 64 characters) -> their JSON text
_NAMES_KEPT = 4096


def _name(value):
    """JSON text of a string of at most 1,024 ASCII characters (state type, tool ref, key), else None."""
    if type(value) is not str:
        return None
    found = _NAMES.get(value)
    if found is not None:
        return found
    if len(value) > FIT_STRING or not value.isascii():
        return None
    text = _string(value)
    if len(value) <= 64 and len(_NAMES) < _NAMES_KEPT:  # names and keys, not long values
        _NAMES[value] = text
    return text


def _number(value):
    """JSON text of an int or a finite float, else None."""
    kind = type(value)
    if kind is int or (kind is float and math.isfinite(value)):
        return repr(value)
    return None


def flat_text(value):
    """JSON text of a flat object (at most 32 keys, each an ASCII string of at most 1,024 characters;
    values null, booleans, 64-bit integers, finite floats, such strings), or None."""
    if type(value) is not dict or len(value) > FLAT_KEYS:
        return None
    parts = []
    add = parts.append
    names = _NAMES
    for key, item in value.items():
        k = names.get(key) if type(key) is str else None
        if k is None:
            k = _name(key)
            if k is None:
                return None
        kind = type(item)
        if kind is str:
            if len(item) > FIT_STRING or not item.isascii():
                return None
            add(f"{k}:{_string(item)}")
        elif kind is int:
            if not -_BIG < item < _BIG:
                return None
            add(f"{k}:{item!r}")
        elif kind is float:
            if not math.isfinite(item):
                return None
            add(f"{k}:{item!r}")
        elif item is None:
            add(f"{k}:null")
        elif item is True:
            add(f"{k}:true")
        elif item is False:
            add(f"{k}:false")
        else:
            return None
    return "{" + ",".join(parts) + "}"


_ENTERED: dict = {}  # state type -> the text of state_entered up to its step number


def entered_text(kind: str, step: int, visit: int):
    """``state_entered``'s ``{"type", "step", "visit"}``."""
    head = _ENTERED.get(kind)
    if head is None:
        name = _name(kind)
        if name is None:
            return None
        head = f'{{"type":{name},"step":'
        if len(_ENTERED) < _NAMES_KEPT:
            _ENTERED[kind] = head
    if type(step) is not int or type(visit) is not int:
        return None
    return f'{head}{step!r},"visit":{visit!r}}}'


def invoked_frame(tool: str, timeout):
    """``(head, tail)`` of ``tool_invoked``'s text for this tool and timeout, so that the text is
    ``head + input text + ',"idempotency_key":' + key text (`key_text`) + tail``; None when either
    is outside what is formatted here. A step plan makes it once (flowctl.engine.calls.StepPlan)."""
    name, t = _name(tool), _number(timeout)
    if name is None or t is None:
        return None
    return f'{{"tool":{name},"input":', f',"timeout_s":{t}}}'


def key_text(key):
    """JSON text of an idempotency key (an ASCII string of at most 1,024 characters), else None."""
    if type(key) is not str or len(key) > FIT_STRING or not key.isascii():
        return None
    return _string(key)


def invoked_text(tool: str, given: str, key: str, timeout):
    """``tool_invoked``'s ``{"tool", "input", "idempotency_key", "timeout_s"}`` (no purpose), the
    input given as its text (:func:`flat_text`)."""
    frame, k = invoked_frame(tool, timeout), key_text(key)
    if frame is None or k is None:
        return None
    return f'{frame[0]}{given},"idempotency_key":{k}{frame[1]}'


def succeeded_head(tool: str):
    """``tool_succeeded``'s text up to the output: ``{"tool":...,"output":`` (None: see :func:`_name`)."""
    name = _name(tool)
    return None if name is None else f'{{"tool":{name},"output":'


def succeeded_text(tool: str, out: str, duration_ms):
    """``tool_succeeded``'s ``{"tool", "output", "duration_ms"}`` (no raw text, output known), the
    output given as its text (:func:`flat_text`)."""
    head, d = succeeded_head(tool), _number(duration_ms)
    if head is None or d is None:
        return None
    return f'{head}{out},"duration_ms":{d}}}'


__all__ = ["flat_text", "entered_text", "invoked_text", "invoked_frame", "key_text", "succeeded_text", "succeeded_head"]
