"""The step's event texts (flowctl.engine.eventtext) are exactly what encode_data stores.

The hash chain covers the stored text, so a text made by the fast path must be the very bytes the
general encoder gives for the same dict; otherwise `audit verify` of a run would still pass, but
a store written by one path and a reader re-encoding by the other would disagree."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.engine.eventtext import entered_text, flat_text, invoked_text, succeeded_text
from flowctl.store.audit import encode_data

atoms = (st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
         | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40))
keys = st.text(max_size=12)
flat = st.dictionaries(keys, atoms, max_size=6)
values = st.recursive(atoms, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
                      max_leaves=8)


@settings(max_examples=400, deadline=None)
@given(values)
def test_flat_text_is_the_stored_text_or_declines(value):
    text = flat_text(value)
    if text is not None:
        assert text == encode_data(value)


@settings(max_examples=200, deadline=None)
@given(flat)
def test_flat_objects_of_plain_ascii_values_are_formatted(value):
    plain = {k: v for k, v in value.items() if k.isascii() and not isinstance(v, float) and
             not (isinstance(v, str) and not v.isascii()) and not (isinstance(v, int) and abs(v) >= 1 << 64)}
    if all(k.isascii() for k in plain):
        assert flat_text(plain) == encode_data(plain)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20), st.integers(min_value=0), st.integers(min_value=0))
def test_entered_text(kind, step, visit):
    text = entered_text(kind, step, visit)
    if kind.isascii():
        assert text == encode_data({"type": kind, "step": step, "visit": visit})
    else:
        assert text is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20), values, st.text(max_size=40), st.integers(1, 10**6) | st.floats(min_value=0.001))
def test_invoked_and_succeeded_texts(tool, value, key, number):
    given = flat_text(value)
    if given is None:
        return
    text = invoked_text(tool, given, key, number)
    if text is not None:
        assert text == encode_data({"tool": tool, "input": value, "idempotency_key": key, "timeout_s": number})
    text = succeeded_text(tool, given, number)
    if text is not None:
        assert text == encode_data({"tool": tool, "output": value, "duration_ms": number})


def test_declines_what_it_does_not_format():
    assert flat_text({"a": {"nested": 1}}) is None
    assert flat_text({"a": float("nan")}) is None
    assert flat_text({"é": 1}) is None
    assert flat_text({1: 1}) is None
    assert flat_text([1]) is None
    assert flat_text({"a": True, "b": None, "c": 1.5, "d": "x\n\"y"}) == '{"a":true,"b":null,"c":1.5,"d":"x\\n\\"y"}'
    assert invoked_text("t@1", '{"n":1}', "k", float("inf")) is None
    assert invoked_text("t@1", '{"n":1}', "k", 30.0) == '{"tool":"t@1","input":{"n":1},"idempotency_key":"k","timeout_s":30.0}'
    assert entered_text("task", True, 1) is None
