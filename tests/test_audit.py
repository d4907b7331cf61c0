"""flowctl.store.audit: the stored JSON text of event data (what the hash chain covers)."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.store.audit import encode_data, seal, verify_chain

values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text()),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=6), inner, max_size=5)),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(values)
def test_event_data_is_compact_utf8_json_exactly_as_json_dumps_writes_it(value):
    assert encode_data(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def test_sealed_events_verify_and_edits_are_found():
    events = [{"seq": i + 1, "ts": 1.5 + i, "type": "state_entered", "state": "a", "attempt": 1, "data": {"n": i}}
              for i in range(3)]
    last = seal(events, "")
    assert last == events[-1]["hash"] and events[1]["prev_hash"] == events[0]["hash"]
    assert verify_chain(events, 3, last) == []
    events[1]["data_json"] = encode_data({"n": 99})
    assert any("event 2" in p and "modified" in p for p in verify_chain(events, 3, last))
