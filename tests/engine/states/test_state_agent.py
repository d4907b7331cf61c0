"""``type: agent`` against a real HTTP server speaking the Chat Completions and Messages wire formats
(tests/support/modelserver.py), through the official SDKs: every tool call the model asks for goes
through the gate, the started record, verify and the saga; refusals go back to the model; a crash
mid-loop resumes without asking the model again for recorded turns or repeating an effect."""
from __future__ import annotations

import json

import pytest

import flowctl
from support.enginekit import Harness, build, sqlite_store
from support.modelserver import ModelServer

pytest.importorskip("openai")
pytest.importorskip("anthropic")

PROVIDERS = ["openai", "anthropic"]

TOOLS = '''
import os
LEDGER = []
EFFECTS = {}
CRASH = {"after_refund": False}

def get_order(input, call):
    LEDGER.append(("get_order", input["order_id"]))
    return {"order_id": input["order_id"], "total": 80, "card": "4111111111111111"}

def refund_payment(input, call):
    if call.idempotency_key not in EFFECTS:
        EFFECTS[call.idempotency_key] = input["amount"]
        LEDGER.append(("refund", input["amount"]))
    if CRASH["after_refund"]:
        CRASH["after_refund"] = False
        raise KeyboardInterrupt("the process dies right after the effect")
    return {"refunded": input["amount"], "key": call.idempotency_key}

def verify_refund_payment(input, output, call):
    if call.idempotency_key not in EFFECTS:
        return False
    return {"refunded": EFFECTS[call.idempotency_key], "key": call.idempotency_key}

def undo_refund_payment(input, output, call):
    EFFECTS.pop(call.idempotency_key, None)
    LEDGER.append(("undo_refund", input["amount"]))

def notify(input, call):
    raise ConnectionError("mail server down")
'''

FILES = {
    "models.yaml": "profiles:\n  default: {provider: openai, model: gpt-test}\n"
                   "  claude: {provider: anthropic, model: claude-test}\n",
    "prompts/resolve.md": "Resolve ticket {{ input.ticket }} about order {{ input.order_id }}.",
    "contracts/get_order.v1.0.0.yaml": """
        id: get_order
        version: 1.0.0
        description: Look up an order by id.
        entrypoint: tk:get_order
        sensitive: [card]
        input_schema: {type: object, required: [order_id], properties: {order_id: {type: string}},
                       additionalProperties: false}
        """,
    "contracts/refund_payment.v1.0.0.yaml": """
        id: refund_payment
        version: 1.0.0
        description: Refund part of an order's payment.
        entrypoint: tk:refund_payment
        verify: tk:verify_refund_payment
        compensate: tk:undo_refund_payment
        side_effects:
          - {type: payment, target: payments}
        input_schema: {type: object, required: [order_id, amount],
                       properties: {order_id: {type: string}, amount: {type: number}}}
        """,
    "contracts/notify.v1.0.0.yaml": "id: notify\nversion: 1.0.0\nentrypoint: tk:notify\n",
    "policies/refunds.yaml": "policy: refunds\napplies_to: [refund_payment]\nallow:\n"
                             "  - {field: input.amount, range: [0, 100]}\n",
    "states/resolve.yaml": """
        id: resolve
        type: agent
        model: {profile}
        prompt: resolve.md
        tools: [get_order@^1, refund_payment@^1]
        output_schema: {{type: object, required: [resolution], properties: {{resolution: {{enum: [refunded, answered, escalate]}}}}}}
        max_turns: {max_turns}
        max_tool_calls: 5
        retry:
          - {{errors: [ToolThrottled], max_attempts: 3, interval: 1s}}
        """,
    "states/tell.yaml": "id: tell\ntype: task\ntool: notify@^1\n",
    "transitions/f.yaml": "flow: f\nstart: resolve\noutput: {resolution: response.resolution}\ntransitions:\n"
                          "  - {from: resolve, to: tell, when: \"response.resolution == 'refunded'\"}\n"
                          "  - {from: resolve, to: done}\n  - {from: tell, to: done}\n",
}

INPUT = {"ticket": "T-1", "order_id": "A1"}
FINAL = {"json": {"resolution": "answered"}}


def project(tmp_path, provider, max_turns=6):
    files = dict(FILES)
    files["states/resolve.yaml"] = FILES["states/resolve.yaml"].format(
        profile="default" if provider == "openai" else "claude", max_turns=max_turns)
    return build(tmp_path, files, tools=TOOLS)


@pytest.fixture
def server(monkeypatch):
    with ModelServer() as s:
        s.env(monkeypatch)
        yield s


def tool_results(body) -> list:
    """``[(tool call id, decoded content)]`` of every tool result in one request, either wire format."""
    out = []
    for m in body["messages"]:
        if m.get("role") == "tool":
            out.append((m["tool_call_id"], json.loads(m["content"])))
        elif isinstance(m.get("content"), list):
            out += [(b["tool_use_id"], json.loads(b["content"])) for b in m["content"] if b.get("type") == "tool_result"]
    return out


def offered(body) -> list:
    return sorted(t["function"]["name"] if "function" in t else t["name"] for t in body.get("tools") or ())


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_model_calls_a_declared_tool_and_answers(tmp_path, server, provider):
    server.script = [{"tool_calls": [("get_order", {"order_id": "A1"})]}, FINAL]
    h = Harness(project(tmp_path, provider))
    result = h.run(input=INPUT)
    assert result.status == "succeeded", result.error
    assert result.output == {"resolution": "answered"}
    first, second = server.bodies()
    assert offered(first) == ["get_order", "refund_payment"]
    params = next(t.get("parameters") or t.get("input_schema") for t in
                  ([t.get("function", t) for t in first["tools"]]) if t["name"] == "get_order")
    assert params["required"] == ["order_id"]  # the contract's input_schema, as the function's parameters
    [(call_id, content)] = tool_results(second)
    assert call_id == "call_0_0" and content["total"] == 80
    assert content["card"] == "***redacted***"  # a contract's sensitive field never goes to the model
    assert h.ledger() == [("get_order", "A1")]
    asked = [e for e in h.events if e["type"] == "agent_tool_call"]
    assert [(e["data"]["call_id"], e["data"]["tool"]) for e in asked] == [("resolve:1:1", "get_order@1.0.0")]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_call_the_gate_denies_goes_back_to_the_model_which_recovers(tmp_path, server, provider):
    server.script = [{"tool_calls": [("refund_payment", {"order_id": "A1", "amount": 500})]},
                     {"tool_calls": [("refund_payment", {"order_id": "A1", "amount": 50})]},
                     {"json": {"resolution": "escalate"}}]
    h = Harness(project(tmp_path, provider))
    result = h.run(input=INPUT)
    assert result.status == "succeeded", result.error
    _first, second, third = server.bodies()
    [(_, denied)] = tool_results(second)
    assert denied["error"] == "PolicyDenied" and "refunds" in denied["message"]
    assert tool_results(third)[-1][1]["refunded"] == 50
    assert h.ledger() == [("refund", 50)]  # the denied call never reached the tool
    decisions = [e["data"]["outcome"] for e in h.events if e["type"] == "policy_decided"]
    assert decisions == ["deny", "allow"]
    results = [(e["data"]["ok"], e["data"]["error"]) for e in h.events if e["type"] == "agent_tool_result"]
    assert results == [(False, "PolicyDenied"), (True, None)]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_unknown_tool_and_invalid_arguments_are_told_to_the_model(tmp_path, server, provider):
    server.script = [{"tool_calls": [("delete_everything", {}), ("get_order", {"id": 3})]}, FINAL]
    h = Harness(project(tmp_path, provider))
    assert h.run(input=INPUT).status == "succeeded"
    results = tool_results(server.bodies()[1])
    assert [r[1]["error"] for r in results] == ["UnknownTool", "SchemaMismatch"]
    assert "get_order, refund_payment" in results[0][1]["message"]
    assert h.ledger() == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_run_failing_after_the_loop_compensates_what_the_model_did(tmp_path, server, provider):
    server.script = [{"tool_calls": [("refund_payment", {"order_id": "A1", "amount": 30})]},
                     {"tool_calls": [("refund_payment", {"order_id": "A1", "amount": 20})]},
                     {"json": {"resolution": "refunded"}}]
    h = Harness(project(tmp_path, provider))
    result = h.run(input=INPUT)
    assert result.status == "failed" and result.error["state"] == "tell"
    assert h.ledger() == [("refund", 30), ("refund", 20), ("undo_refund", 20), ("undo_refund", 30)]  # newest first
    keys = [e["data"]["idempotency_key"] for e in h.events
            if e["type"] == "tool_invoked" and e["data"]["tool"] == "refund_payment@1.0.0"]
    assert len(keys) == len(set(keys)) == 2  # one idempotency key per tool call (stored as a keyed digest here)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_max_turns_raises_agent_limit_exceeded(tmp_path, server, provider):
    server.script = [{"tool_calls": [("get_order", {"order_id": "A1"})]}]
    h = Harness(project(tmp_path, provider, max_turns=3))
    result = h.run(input=INPUT)
    assert result.status == "failed" and result.error["type"] == "AgentLimitExceeded"
    assert len(server.requests) == 3 and "max_turns 3" in result.error["message"]


def test_max_tool_calls_raises_agent_limit_exceeded(tmp_path, server):
    server.script = [{"tool_calls": [("get_order", {"order_id": str(i)}) for i in range(6)]}]
    result = Harness(project(tmp_path, "openai")).run(input=INPUT)
    assert result.error["type"] == "AgentLimitExceeded" and "max_tool_calls 5" in result.error["message"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_throttled_model_call_is_retried_and_the_loop_goes_on_from_its_last_turn(tmp_path, server, provider):
    server.script = [{"tool_calls": [("get_order", {"order_id": "A1"})]}, {"status": 429}, FINAL]
    h = Harness(project(tmp_path, provider))
    assert h.run(input=INPUT).status == "succeeded"
    assert len(server.requests) == 3
    assert h.ledger() == [("get_order", "A1")]  # the retry did not call the tool again
    assert [e["data"]["error"] for e in h.events if e["type"] == "retry_scheduled"] == ["ToolThrottled"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_crash_mid_loop_resumes_without_asking_again_or_repeating_the_effect(tmp_path, server, provider):
    server.script = [{"tool_calls": [("get_order", {"order_id": "A1"})]},
                     {"tool_calls": [("refund_payment", {"order_id": "A1", "amount": 40})]},
                     {"json": {"resolution": "answered"}}]
    root = project(tmp_path, provider)
    store = sqlite_store(tmp_path)
    h = Harness(root, store=store)
    tk = __import__("flowctl.engine.tools", fromlist=["resolve"]).resolve("tk:CRASH", str(root / "orchestration" / "tools"))
    tk["after_refund"] = True
    with pytest.raises(KeyboardInterrupt):  # the process dies after the refund, before its outcome is recorded
        h.run(input=INPUT, run_id="run-crash")
    assert len(server.requests) == 2
    assert store.get_run("run-crash")["status"] == "running"

    again = flowctl.Engine(flowctl.load_project(root), sqlite_store(tmp_path), clock=h.clock, listener=h.events.append)
    result = again.resume("run-crash")
    assert result.status == "succeeded", result.error
    assert len(server.requests) == 3  # turns 1 and 2 were recorded: only turn 3 is asked
    assert h.ledger() == [("get_order", "A1"), ("refund", 40)]  # verify settled the refund: not made twice
    [(_, content)] = tool_results(server.bodies()[2])[-1:]
    assert content["refunded"] == 40
    recovered = [e for e in h.events if e["type"] == "step_recovered"]
    assert [e["data"]["happened"] for e in recovered] == [True]


@pytest.mark.parametrize("decision, refunds, told", [("approve", [("refund", 60)], True), ("reject", [], False)])
def test_a_gate_review_pauses_the_loop_and_the_decided_call_goes_on_without_asking_again(
        tmp_path, server, decision, refunds, told):
    server.script = [{"tool_calls": [("refund_payment", {"order_id": "A1", "amount": 60})]}, FINAL]
    root = project(tmp_path, "openai")
    (root / "orchestration" / "policies" / "refunds.yaml").write_text(
        "policy: refunds\napplies_to: [refund_payment]\nallow:\n  - {field: input.amount, range: [0, 100]}\n"
        "review_when: \"input.amount > `50`\"\n")
    h = Harness(root)
    paused = h.run(input=INPUT)
    assert paused.status == "paused" and paused.review["show"]["tool"] == "refund_payment@1.0.0"
    assert len(server.requests) == 1 and h.ledger() == []
    done = h.engine.resume(paused.run_id, token=paused.review["token"], decision=decision)
    assert done.status == "succeeded", done.error
    assert len(server.requests) == 2  # the recorded turn is not asked again
    assert h.ledger() == refunds
    [(_, result)] = tool_results(server.bodies()[1])
    assert ("error" not in result) is told and (told or result["error"] == "PolicyDenied")


def test_trace_shows_the_re_asks_and_the_tools_the_model_called(tmp_path, server):
    from click.testing import CliRunner

    from flowctl.cli.main import main

    server.script = [{"tool_calls": [("get_order", {"order_id": "A1"})]},
                     {"tool_calls": [("refund_payment", {"order_id": "A1", "amount": 10})]},
                     {"text": "done!"}, {"json": {"resolution": "answered"}}]
    root = project(tmp_path, "openai")
    h = Harness(root, store=sqlite_store(tmp_path))
    result = h.run(input=INPUT)
    assert result.status == "succeeded", result.error
    out = CliRunner().invoke(main, ["trace", result.run_id, "--root", str(root), "--db", f"sqlite:///{tmp_path}/flowctl.db"])
    assert out.exit_code == 0, out.output
    assert "resolve (re-asked ×1) [get_order, refund_payment] → done" in out.output


def test_one_approval_lets_one_call_through_the_same_call_again_is_reviewed_again(tmp_path, server):
    # (break-it finding: one approval covered every identical call the model made later in the visit)
    refund = ("refund_payment", {"order_id": "A1", "amount": 60})
    server.script = [{"tool_calls": [refund]}, {"tool_calls": [refund]}, FINAL]
    root = project(tmp_path, "openai")
    (root / "orchestration" / "policies" / "refunds.yaml").write_text(
        "policy: refunds\napplies_to: [refund_payment]\nallow:\n  - {field: input.amount, range: [0, 100]}\n"
        "review_when: \"input.amount > `50`\"\n")
    h = Harness(root)
    paused = h.run(input=INPUT)
    again = h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    assert again.status == "paused", "the second identical refund must wait for its own review"
    assert h.ledger() == [("refund", 60)]
    done = h.engine.resume(again.run_id, token=again.review["token"], decision="reject")
    assert done.status == "succeeded" and h.ledger() == [("refund", 60)]


def test_the_transitions_see_what_happened_not_what_the_model_claims(tmp_path, server):
    """``state.calls``: the tool calls of the visit as flowctl saw them; a model that claims a
    refund after the gate denied it is routed on the facts. ``trace`` notes the refusal."""
    from click.testing import CliRunner

    from flowctl.cli.main import main

    server.script = [{"tool_calls": [("refund_payment", {"order_id": "A1", "amount": 500})]},
                     {"json": {"resolution": "refunded"}}]
    root = project(tmp_path, "openai")
    flow = root / "orchestration" / "transitions" / "f.yaml"
    flow.write_text(flow.read_text().replace(
        "when: \"response.resolution == 'refunded'\"",
        "when: \"response.resolution == 'refunded' && length(state.calls[?tool == 'refund_payment' && ok]) > `0`\""))
    h = Harness(root, store=sqlite_store(tmp_path))
    result = h.run(input=INPUT)
    assert result.status == "succeeded", result.error
    assert result.path[-2:] == ["resolve", "done"] and h.ledger() == []  # not `tell`: nothing was refunded
    found = [d for d in flowctl.validate(flowctl.load_project(root)) if d.file.endswith("f.yaml")]
    assert found == []  # state.calls is known to the data-flow analysis
    out = CliRunner().invoke(main, ["trace", result.run_id, "--root", str(root), "--db", f"sqlite:///{tmp_path}/flowctl.db"])
    assert "resolve: refund_payment: PolicyDenied: " in out.output and "(sent back to the model)" in out.output
