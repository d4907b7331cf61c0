"""The policy gate of one call (flowctl.engine.gatecall): a side effect no policy allows is denied
before the tool runs, as is one a policy check denies (its decision recorded); a technical retry
of an allowed call is not a new call for rate or dedupe."""
from __future__ import annotations

from support.enginekit import Harness, build, effect_contract, task
from support.engineflows import SAGA, TOOLS, flow, linear, saga_states


def test_side_effect_is_denied_without_a_policy(tmp_path):
    files = {k: v for k, v in SAGA.items() if not k.startswith("policies/")}
    root = build(tmp_path, {**files, **saga_states(1), **flow("p1", linear("p1"))}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.error["code"] == "POLICY_DENIED"
    assert "default-deny" in result.error["message"] and "no policy applies" in result.error["message"]
    assert h.ledger() == []

def test_retries_of_a_side_effect_are_not_duplicates_for_the_gate(tmp_path):
    tools = TOOLS + """
def flaky_pay(input, call):
    LEDGER.append(("try", call.attempt))
    if call.attempt < 2:
        raise ConnectionError("reset")
    return {"ok": True}

def verify_flaky_pay(input, output, call):
    return True

def undo_flaky_pay(input, output, call):
    pass
"""
    root = build(tmp_path, {
        **effect_contract("fp", "flaky_pay"),
        "policies/p.yaml": "policy: p\napplies_to: [fp]\nallow: []\ndedupe: {window: 1h}\nrate: {max: 1, window: 1h}\n",
        **task("a", "fp@1.0.0", extra="retry: [{errors: [ConnectionError], max_attempts: 3, interval: 1s}]\n"),
        **flow("a", linear("a")),
    }, tools)
    h = Harness(root)
    assert h.run().status == "succeeded"
    assert h.ledger() == [("try", 1), ("try", 2)]


def test_a_call_a_policy_denies_records_the_decision_and_never_reaches_the_tool(tmp_path):
    root = build(tmp_path, {
        **effect_contract("pay", "pay"),
        "policies/p.yaml": "policy: p\napplies_to: [pay]\nallow:\n  - {field: input.id, in: ['1']}\n",
        **task("p1", "pay@1.0.0", extra="input: {id: \"'2'\"}\n"), **flow("p1", linear("p1")),
    }, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.error["code"] == "POLICY_DENIED" and "denied by p" in result.error["message"]
    (decided,) = [e["data"] for e in h.events if e["type"] == "policy_decided"]
    assert (decided["tool"], decided["outcome"], decided["policy"]) == ("pay@1.0.0", "deny", "p")
    assert decided["rule"].startswith("allow[0]") and '"2"' in decided["reason"]
    assert h.ledger() == []  # the tool never ran
    assert "tool_invoked" not in h.types()


def test_a_sensitive_run_records_its_calls_input_digest_keyed_and_its_review_still_matches_the_call(tmp_path):
    """(breaker finding: a gate review's pending call recorded the plain SHA-256 of the tool input,
    shown by GET /v1/runs/{id}/events: with the rest of the input readable, a CVV or PIN in it was
    found in at most 10,000 tries; now keyed by the store's key in a sensitive run)"""
    import json

    from flowctl.gate.policy import input_digest
    from flowctl.store.sql import open_store
    from support.serverkit import make_server_project

    store = open_store(f"sqlite:///{tmp_path}/flowctl.db", create=True)
    try:
        h = Harness(make_server_project(tmp_path), store=store)
        tool_input = {"amount": 60, "card": "7371"}
        paused = h.run("charge", tool_input)  # refund: sensitive card; review_when amount > 50
        assert paused.status == "paused" and paused.review["token"]
        recorded = json.dumps([e["data"] for e in store.events(paused.run_id)])
        assert '"digest": "' in recorded and input_digest(tool_input) not in recorded
        assert "7371" not in recorded
        done = h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve", by="alice")
        assert done.status == "paused" and done.review["state"] == "ask"  # the approved call ran; the flow's own review
        assert h.ledger() == [("refund", 60)]
    finally:
        store.close()
