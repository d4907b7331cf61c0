"""flowctl.engine.adhoc: a session's run has the synthetic flow ``session:<name>``."""
from __future__ import annotations

import pytest

from flowctl.engine.adhoc import SessionFlow, flow_of, is_session


class _Project:
    flows = {"charge": "the charge flow"}


def test_a_session_row_gets_a_flow_without_states_and_others_their_own():
    flow = flow_of(_Project(), {"flow": "session:ticket-1"})
    assert isinstance(flow, SessionFlow) and flow.id == "session:ticket-1"
    assert flow.start == "" and flow.params == {} and flow.input_schema is None and flow.every_contract
    assert flow_of(_Project(), {"flow": "charge"}) == "the charge flow"
    with pytest.raises(KeyError):
        flow_of(_Project(), {"flow": "gone"})
    assert is_session("session:x") and not is_session("sessions") and not is_session(None)
