"""Time, injectable: the engine reads time and sleeps only through a :class:`Clock`.

``SystemClock`` is real time. ``FakeClock`` (tests, replay, ``flowctl test``) starts at a fixed
instant and advances only when something sleeps on it, so no test waits for real backoff.
All values are **seconds**; ``now()`` is a timezone-aware UTC ``datetime``.
"""
from __future__ import annotations

import math
import time
from datetime import datetime, timezone


class SystemClock:
    def time(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock for tests: ``sleep`` advances ``time`` instantly and records each sleep in ``slept``."""

    def __init__(self, start: float = 1_767_225_600.0):  # 2026-01-01T00:00:00Z
        self._t = float(start)
        self.slept: list[float] = []

    def time(self) -> float:
        return self._t

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._t, timezone.utc)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self._t += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self._t += seconds


_last_second = (None, "")  # (epoch second, its "YYYY-MM-DDTHH:MM:SS"): most steps enter states in the same second


def iso(ts: float) -> str:
    """Epoch seconds -> ``2026-01-01T00:00:00.000Z`` (UTC, milliseconds truncated after rounding
    to microseconds, exactly as ``datetime.fromtimestamp(ts, utc).isoformat(timespec="milliseconds")``)."""
    frac, whole = math.modf(ts)
    us = round(frac * 1e6)  # half-even, as datetime.fromtimestamp rounds
    if us >= 1_000_000:
        whole, us = whole + 1, us - 1_000_000
    elif us < 0:
        whole, us = whole - 1, us + 1_000_000
    global _last_second
    second = int(whole)
    cached = _last_second  # one read of an immutable pair: safe with threads
    if cached[0] != second:
        cached = _last_second = (second, datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{cached[1]}.{us // 1000:03d}Z"
