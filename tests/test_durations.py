"""flowctl.definition.durations: durations always carry a unit."""
from __future__ import annotations

import pytest

from flowctl.definition.durations import format_duration, parse_duration


@pytest.mark.parametrize("text, seconds", [
    ("500ms", 0.5), ("3s", 3.0), ("5m", 300.0), ("1h", 3600.0), ("1d", 86400.0),
    ("1h30m", 5400.0), ("1.5s", 1.5), ("0s", 0.0), ("2m30s", 150.0), ("1d2h", 93600.0),
])
def test_parse_duration_in_seconds(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [3, 3.5, True, None, ["3s"]])
def test_values_without_units_are_refused(value):
    with pytest.raises(ValueError, match="no unit"):
        parse_duration(value)


@pytest.mark.parametrize("text", ["3", "", "3 s", "5min", "1h 30m", "-3s", "s", "3S", "1.s", "1e3s"])
def test_malformed_durations_are_refused(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize("seconds, text", [
    (0.25, "250ms"), (0, "0ms"), (3, "3s"), (1.5, "1.5s"), (90, "1m30s"), (3600, "1h"), (5400, "1h30m"), (3661, "1h1m1s"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["250ms", "3s", "1m30s", "1h", "1h30m"])
def test_format_then_parse_round_trips(text):
    assert format_duration(parse_duration(text)) == text
