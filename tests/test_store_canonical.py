"""flowctl.store.audit.canonical: the text every service-log and policy digest hash is taken over is
exactly ``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)``,
for any value (a prebuilt C encoder must never change a stored hash)."""
from __future__ import annotations

import enum
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.store.audit import canonical


def _reference(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class _Text(str):
    pass


class _Int(int):
    pass


class _Level(enum.IntEnum):
    HIGH = 3


class _Odd:
    def __str__(self) -> str:
        return "odd \ud800 \u2028"


_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-10**300, max_value=10**300),
    st.floats(allow_nan=True, allow_infinity=True), st.text(),
    st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010)),  # lone surrogates too
    st.builds(_Text, st.text()), st.builds(_Int, st.integers()), st.just(_Level.HIGH), st.just(_Odd()),
    st.decimals(allow_nan=True), st.datetimes(), st.binary(max_size=4), st.sets(st.integers(), max_size=3))
_TREE = st.recursive(_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(), inner, max_size=4),
    st.dictionaries(st.one_of(st.integers(), st.floats(), st.booleans(), st.none()), inner, max_size=4)),
    max_leaves=25)


def _outcome(fn, obj):
    try:
        return "text", fn(obj)
    except Exception as exc:  # noqa: BLE001 - the same error as json.dumps gives (mixed keys, cycles)
        return "error", type(exc).__name__


@settings(max_examples=400, deadline=None)
@given(_TREE)
def test_canonical_is_json_dumps_sorted_compact_for_any_value(obj):
    assert _outcome(canonical, obj) == _outcome(_reference, obj)


def test_canonical_fails_as_json_dumps_does_on_cycles_mixed_keys_and_depth():
    loop: list = []
    loop.append(loop)
    deep: list = []
    node = deep
    for _ in range(100_000):
        node.append([])
        node = node[0]
    for obj in (loop, {1: 1, "1": 2}, deep):
        assert _outcome(canonical, obj) == _outcome(_reference, obj) and _outcome(canonical, obj)[0] == "error"
