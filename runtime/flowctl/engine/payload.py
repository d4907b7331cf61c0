"""Cheap answers about JSON payloads, so a step pays for JSON encoding only when it must.

A step moves small JSON values: a tool input of a few fields, an output of a few more. Encoding
each of them only to learn that it is JSON and under the 1 MiB payload limit costs more than the
rest of the step. The two functions here decide the common case by looking at the value:

* :func:`flat_copy` — a copy of a flat JSON object (string keys; values null, booleans, numbers,
  short strings), or ``None`` when the value is anything else (the caller then encodes it);
* :func:`fits` — ``True`` when a value is certainly under :data:`MAX_PAYLOAD` bytes as compact
  UTF-8 JSON without encoding it: at most :data:`FIT_LEAVES` scalars and keys in all, none of them
  a string longer than :data:`FIT_STRING` characters or an integer beyond 64 bits (containers
  count as one). A string of n characters encodes to at most 6n bytes (``\\u00XX`` escapes), so
  the bound is 64 x (6 x 1024 + 32) < 1 MiB. ``False`` means "not known": the caller encodes
  and measures. Values JSON cannot hold (objects, NaN) are never "known": they go the slow way.
"""
from __future__ import annotations

import json
import math

MAX_PAYLOAD = 1 << 20  # bytes of one event's data or of the checkpoint (compact UTF-8 JSON)
#: levels of nesting a stored value may have (lists and objects inside one another): what every
#: reader of the record (audit verify's redaction check, replay, the views) walks recursively
#: (breaker finding: input 350 deep was run and stored, then `audit verify` crashed on it)
MAX_DEPTH = 100
FIT_LEAVES = 64
FIT_STRING = 1024
FLAT_KEYS = 32
_BIG = 1 << 64


def flat_copy(value):
    """A shallow copy of ``value`` if it is a flat JSON object (see the module docstring), else
    None. Floats must be finite (JSON has no NaN or Infinity)."""
    return dict(value) if _flat(value) else None


def _flat(value) -> bool:
    if type(value) is not dict or len(value) > FLAT_KEYS:
        return False
    for key, item in value.items():
        if type(key) is not str or len(key) > FIT_STRING or not (key.isascii() or _utf8(key)):
            return False
        kind = type(item)
        if kind is str:
            if len(item) > FIT_STRING or not (item.isascii() or _utf8(item)):
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif kind is int:
            if not -_BIG < item < _BIG:
                return False
        elif item is not None and kind is not bool:
            return False
    return True


def _utf8(text: str) -> bool:
    """False for text UTF-8 cannot hold (lone surrogates): it is not JSON that can be stored."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def fits(value) -> bool:
    """True when ``value`` is certainly at most :data:`MAX_PAYLOAD` bytes of JSON (no encoding)."""
    if _flat(value):  # the common case, without the walk (at most 32 keys and values)
        return True
    budget = FIT_LEAVES
    stack = [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        budget -= 1
        if budget < 0:
            return False
        if kind is str:
            if len(item) > FIT_STRING or not (item.isascii() or _utf8(item)):
                return False
        elif kind is dict:
            budget -= len(item)  # its keys
            if budget < 0:
                return False
            for key in item:
                if type(key) is not str or len(key) > FIT_STRING:
                    return False
            extend(item.values())
        elif kind is list or kind is tuple:
            if len(item) > budget:
                return False
            extend(item)
        elif kind is int:
            if not -_BIG < item < _BIG:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif item is not None and kind is not bool:
            return False
    return True


_STRICT = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def not_json(value) -> tuple | None:
    """``(pointer, why)`` of the first part of ``value`` that JSON stored as UTF-8 cannot hold —
    NaN or an infinity (``why``: ``"NaN is not JSON (use null or a number)"``), a string or key
    with a lone surrogate (``"\\ud800"``), a value that is not JSON at all (a set, an object, a
    list holding itself) — or None when it is all JSON. ``pointer`` is a JSON Pointer (RFC 6901)
    into ``value`` (``""`` for the whole; a bad key's own characters escaped as ``\\udXXX``, so
    the pointer itself is text). The common case costs one C-encoder pass; only a refused value is
    walked to locate the part."""
    try:
        text = _STRICT.encode(value)
        if text.isascii() or _utf8(text):
            deep = too_deep(value)
            return None if deep is None else (deep, f"the value nests more than {MAX_DEPTH} levels deep (lists and "
                                                     "objects inside one another), which flowctl does not keep")
    except (TypeError, ValueError, RecursionError):
        pass
    stack = [("", value, ())]
    while stack:
        at, item, above = stack.pop()
        kind = type(item)
        if kind is str:
            if not _utf8(item):
                return at, "the text holds a lone surrogate (such as \\ud800), which UTF-8 cannot hold"
        elif kind is float:
            if not math.isfinite(item):
                name = "NaN" if item != item else "Infinity" if item > 0 else "-Infinity"
                return at, f"{name} is not JSON (use null or a number)"
        elif kind is dict or kind is list or kind is tuple:
            if id(item) in above:
                return at, "the value holds itself, which JSON cannot"
            above += (id(item),)
            pairs = item.items() if kind is dict else enumerate(item)
            for key, inner in reversed(list(pairs)):
                name = str(key)
                ok = _utf8(name)
                step = at + "/" + (name if ok else name.encode("utf-8", "backslashreplace").decode("utf-8")) \
                    .replace("~", "~0").replace("/", "~1")
                if not ok:
                    return step, "the key holds a lone surrogate (such as \\ud800), which UTF-8 cannot hold"
                stack.append((step, inner, above))
        elif item is not None and kind not in (bool, int):
            return at, f"a {kind.__name__} is not JSON"
    return "", "the value nests too deeply to be JSON"


_NESTS = (dict, list, tuple)


def too_deep(value, limit: int = MAX_DEPTH) -> str | None:
    """The JSON Pointer of the first list or object of ``value`` (JSON) nested deeper than
    ``limit`` levels (the value itself is level 1), or None. Walks the containers only, without
    recursion: its cost is the number of lists and objects, not of their scalars."""
    stack = [(value, 1, "")]
    while stack:
        item, depth, at = stack.pop()
        if depth > limit:
            return at
        if type(item) is dict:
            stack.extend((inner, depth + 1, f"{at}/{str(key).replace('~', '~0').replace('/', '~1')}")
                         for key, inner in item.items() if type(inner) in _NESTS)
        elif type(item) in _NESTS:  # a list, or a tuple (JSON's array too: a tool may return one)
            stack.extend((inner, depth + 1, f"{at}/{i}") for i, inner in enumerate(item) if type(inner) in _NESTS)
    return None
