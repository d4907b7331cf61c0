"""A short string that a JSON Schema ``pattern`` matches, for the stand-in values of sample inputs
(:func:`flowctl.testing.suggest.sample`) and of redacted fields in a replay.

Built from the pattern's parse tree (Python's own regular-expression parser, the dialect
:mod:`jsonschema` checks ``pattern`` with): literals, ``.``, classes (ranges, ``\\d \\w \\s``, negated),
repeats (each at its minimum), groups, alternation (the first branch) and anchors. What it does not build (look-arounds,
back-references) gives None, and so does a result the pattern does not match: the caller keeps
its own fallback.
"""
from __future__ import annotations

import re

try:  # Python 3.11+: the parser of the re module
    from re import _constants as _c, _parser as _p
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

#: characters tried, in order, for a class or ``.``
_CANDIDATES = "a0A_-. @x1Z"


class _Unsupported(Exception):
    pass


def example(pattern: str) -> str | None:
    """A string ``re.search(pattern, s)`` matches, or None when none can be built here."""
    try:
        tree = _p.parse(pattern)
        text = _build(tree)
    except (_Unsupported, re.error, RecursionError, TypeError, ValueError):
        return None
    return text if re.search(pattern, text) else None


def _build(items) -> str:
    return "".join(_one(op, av) for op, av in items)


def _one(op, av) -> str:
    if op is _c.LITERAL:
        return chr(av)
    if op is _c.NOT_LITERAL:
        return next(ch for ch in _CANDIDATES if ord(ch) != av)
    if op is _c.ANY:
        return "a"
    if op is _c.IN:
        return _in_class(av)
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
        low, _high, sub = av
        return _build(sub) * low
    if op is _c.SUBPATTERN:
        return _build(av[-1])
    if op is getattr(_c, "ATOMIC_GROUP", None):
        return _build(av)
    if op is _c.BRANCH:
        return _build(av[1][0])
    if op is _c.AT:
        return ""
    raise _Unsupported(str(op))


def _in_class(items) -> str:
    negate = bool(items) and items[0][0] is _c.NEGATE
    members = items[1:] if negate else items
    for ch in _CANDIDATES + "".join(chr(c) for c in range(33, 127)):
        if _member(ch, members) != negate:
            return ch
    raise _Unsupported("no character fits the class")


def _member(ch: str, members) -> bool:
    code = ord(ch)
    for op, av in members:
        if op is _c.LITERAL and code == av:
            return True
        if op is _c.RANGE and av[0] <= code <= av[1]:
            return True
        if op is _c.CATEGORY and re.fullmatch(_category_re(av), ch):
            return True
    return False


def _category_re(category) -> str:
    return {_c.CATEGORY_DIGIT: r"\d", _c.CATEGORY_WORD: r"\w", _c.CATEGORY_SPACE: r"\s",
            _c.CATEGORY_NOT_DIGIT: r"\D", _c.CATEGORY_NOT_WORD: r"\W", _c.CATEGORY_NOT_SPACE: r"\S"}.get(category, r"(?!)")


__all__ = ["example"]
