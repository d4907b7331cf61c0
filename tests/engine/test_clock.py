"""flowctl.engine.clock: ISO timestamps (shown in traces and the ``state.entered_at`` scope field)."""
from __future__ import annotations

import random
from datetime import datetime, timezone

from flowctl.engine.clock import FakeClock, iso


def _reference(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_iso_is_datetimes_millisecond_form_including_rounding_edges():
    rng = random.Random(7)
    edges = [0.9999995, 0.0000005, 0.9995, 0.999999, 0.5, 0.0]
    samples = [rng.uniform(0, 4e9) for _ in range(20000)]
    samples += [rng.randint(0, 2**32) + rng.choice(edges) for _ in range(20000)]
    samples += [-rng.uniform(0, 1e6) for _ in range(2000)]
    for ts in samples:
        assert iso(ts) == _reference(ts), ts


def test_iso_of_the_fake_clock_start():
    assert iso(FakeClock().time()) == "2026-01-01T00:00:00.000Z"
    assert iso(1767225600.9999996) == "2026-01-01T00:00:01.000Z"  # rounds to the next second first
