"""Durations as written in definition files: ``500ms``, ``3s``, ``5m``, ``1h``, ``1d``, ``1h30m``.

:func:`parse_duration` returns **seconds** as a float and raises ``ValueError`` for text without
units (``"3"``), unknown units, or anything that is not a string.
"""
from __future__ import annotations

import re

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text) -> float:
    """``"1h30m"`` -> ``5400.0`` seconds. Raises ``ValueError`` with a hint-like message."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise ValueError(f"{text!r} has no unit; write it as '{text}s' (units: ms, s, m, h, d)")
    if not _WHOLE.match(text):
        raise ValueError(f"{text!r} is not a duration; write e.g. 500ms, 3s, 5m, 1h, 1d or 1h30m")
    return sum(float(n) * _UNIT[u] for n, u in _PART.findall(text))


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
