"""flowctl.engine.payload: the cheap "small and JSON" answers that let a step skip encoding.

The promise users rely on: a value ``fits`` only if its JSON is really under the 1 MiB payload
limit (so the limit holds without measuring), and ``flat_copy`` only accepts what JSON can hold."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.store.audit import encode_data
from flowctl.engine.payload import FIT_LEAVES, FIT_STRING, FLAT_KEYS, MAX_PAYLOAD, fits, flat_copy

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40)),
    lambda inner: st.one_of(st.lists(inner, max_size=8), st.dictionaries(st.text(max_size=8), inner, max_size=8)),
    max_leaves=80)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_a_value_that_fits_encodes_under_the_limit(value):
    if fits(value):
        assert len(encode_data(value).encode()) <= MAX_PAYLOAD


def test_the_worst_case_that_fits_is_still_under_the_limit():
    # every leaf a longest string of characters JSON escapes as \u00XX (6 bytes each)
    worst = ["\x01" * FIT_STRING] * (FIT_LEAVES - 1)
    assert fits(worst)
    assert len(encode_data(worst).encode()) <= MAX_PAYLOAD
    assert not fits(worst + ["x"])  # one more leaf is no longer "known small"


@pytest.mark.parametrize("value", [
    "x" * (FIT_STRING + 1), [[]] * FIT_LEAVES, {"k" * (FIT_STRING + 1): 1}, 1 << 64, math.nan, math.inf,
    object(), {1: "non-string key"}, {"a": {"b": {"c": [0] * FIT_LEAVES}}},
])
def test_what_is_not_known_small_is_left_to_encoding(value):
    assert not fits(value)


def test_flat_copy_copies_flat_json_objects_only():
    source = {"n": 1, "s": "x", "f": 1.5, "b": True, "z": None}
    copied = flat_copy(source)
    assert copied == source and copied is not source
    for value in ({"n": {"nested": 1}}, {"n": [1]}, {"n": math.nan}, {1: 1}, {"n": 1 << 70}, {"s": "x" * (FIT_STRING + 1)},
                  {f"k{i}": i for i in range(FLAT_KEYS + 1)}, [1, 2], "text", {"o": object()}):
        assert flat_copy(value) is None, value
    assert json.loads(encode_data(copied)) == source


@pytest.mark.parametrize("value, found", [
    ({"a": [1, {"b": float("nan")}]}, ("/a/1/b", "NaN is not JSON (use null or a number)")),
    ([float("-inf")], ("/0", "-Infinity is not JSON (use null or a number)")),
    ({"x/y~z": "\ud800"}, ("/x~1y~0z", "the text holds a lone surrogate (such as \\ud800), which UTF-8 cannot hold")),
    ({"ok": 1, "\udc00": 1}, ("/\\udc00", "the key holds a lone surrogate (such as \\ud800), which UTF-8 cannot hold")),
    ({"s": {1, 2}}, ("/s", "a set is not JSON")),
    (float("nan"), ("", "NaN is not JSON (use null or a number)")),
])
def test_not_json_locates_what_json_text_cannot_hold(value, found):
    from flowctl.engine.payload import not_json

    assert not_json(value) == found
    json.dumps(found[0], ensure_ascii=False).encode("utf-8")  # the pointer itself is always text


def test_not_json_refers_a_value_that_holds_itself_and_passes_shared_parts():
    from flowctl.engine.payload import not_json

    loop = [1]
    loop.append(loop)
    shared = {"k": "é"}
    assert not_json(loop) == ("/1", "the value holds itself, which JSON cannot")
    assert not_json({"a": shared, "b": [shared], "c": "😀"}) is None


@given(json_values)
@settings(max_examples=200, deadline=None)
def test_not_json_is_none_exactly_when_strict_utf8_json_encodes_the_value(value):
    from flowctl.engine.payload import not_json

    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
        ok = True
    except (ValueError, UnicodeEncodeError):
        ok = False
    assert (not_json(value) is None) == ok


def test_a_value_nested_past_the_limit_is_not_json_flowctl_keeps_and_says_where():
    """(breaker finding: input 350 deep was run and stored, then `audit verify` crashed on it;
    500 deep was an internal error)"""
    from flowctl.engine.payload import MAX_DEPTH, not_json, too_deep

    inner = []
    for _ in range(MAX_DEPTH - 2):
        inner = [inner]
    assert not_json({"x": inner}) is None and too_deep({"x": inner}) is None  # MAX_DEPTH levels in all
    at, why = not_json({"x": [inner]})
    assert at == "/x" + "/0" * (MAX_DEPTH - 1) and f"more than {MAX_DEPTH} levels deep" in why
    assert too_deep({"a": {"b~c/d": [1, [2, {"e": {}}]]}}, limit=4) == "/a/b~0c~1d/1/1"  # the object at level 5
