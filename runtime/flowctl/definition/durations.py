"""Durations as written in definition files: ``500ms``, ``3s``, ``5m``, ``1h``, ``1d``, ``1h30m``.

:func:`parse_duration` returns **seconds** as a float and raises ``ValueError`` for text without
units (``"3"``), unknown units, anything that is not a string, or more than :data:`MAX_SECONDS`.
"""
from __future__ import annotations

import re

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: the longest duration accepted, in seconds (36500d, about a century): past it a time computed
#: from it (now + a wait, now - a ``--since``) no longer fits a date
MAX_SECONDS = 36500 * 86400.0


class DurationTooLong(ValueError):
    """A well-formed duration over :data:`MAX_SECONDS`."""


def parse_duration(text) -> float:
    """``"1h30m"`` -> ``5400.0`` seconds. Raises ``ValueError`` with a hint-like message
    (:class:`DurationTooLong`, a ``ValueError``, past :data:`MAX_SECONDS`)."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise ValueError(f"{text!r} has no unit; write it as '{text}s' (units: ms, s, m, h, d)")
    if not _WHOLE.match(text):
        raise ValueError(f"{text!r} is not a duration; write e.g. 500ms, 3s, 5m, 1h, 1d or 1h30m")
    seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(text))
    if not seconds <= MAX_SECONDS:
        raise DurationTooLong(f"{text[:40]!r} is longer than {MAX_SECONDS / 86400:.0f}d, the longest duration accepted")
    return seconds


def format_duration(seconds: float) -> str:
    """Short human form: ``0.25`` -> ``250ms``, ``90`` -> ``1m30s``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return out or "0s"
