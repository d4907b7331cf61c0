"""``type: llm`` against a real HTTP server speaking the Chat Completions and Messages wire formats,
driven through the official openai and anthropic SDKs (tests/support/modelserver.py)."""
from __future__ import annotations

import json
import sys

import pytest

from support.enginekit import Harness, build
from support.modelserver import ModelServer

pytest.importorskip("openai")
pytest.importorskip("anthropic")
pytest.importorskip("jinja2")

PROVIDERS = ["openai", "anthropic"]

MODELS = """
profiles:
  default: {provider: openai, model: gpt-test, timeout: 10s}
  claude: {provider: anthropic, model: claude-test, max_output_tokens: 256}
prices:
  gpt-test: {input: 1.0, output: 2.0}
  claude-test: {input: 3.0, output: 15.0}
"""

CLASSIFY = """
id: classify
type: llm
model: {profile}
prompt: classify.md
output_schema:
  type: object
  required: [intent, confidence]
  properties:
    intent: {{enum: [refund, shipping, other]}}
    confidence: {{type: number, minimum: 0, maximum: 1}}
retry:
  - {{errors: [ToolThrottled, ToolUnavailable], max_attempts: 3, interval: 2s}}
"""

GOOD = {"intent": "refund", "confidence": 0.9}


def project(tmp_path, provider, limits=""):
    profile = "default" if provider == "openai" else "claude"
    return build(tmp_path, {
        "models.yaml": MODELS,
        "prompts/classify.md": "Classify this ticket from {{ input.customer }}:\n{{ input.text }}\n",
        "states/classify.yaml": CLASSIFY.format(profile=profile),
        "transitions/f.yaml": "flow: f\nstart: classify\noutput: {intent: response.intent}\n" + limits
                              + "transitions:\n  - {from: classify, to: done}\n",
    })


@pytest.fixture
def server(monkeypatch):
    with ModelServer() as s:
        s.env(monkeypatch)
        yield s


def model_events(h, kind="model_called"):
    return [e for e in h.events if e["type"] == kind]


def user_text(body) -> str:
    """Every message's text of one request, whatever the wire format."""
    out = [body.get("system") or ""]
    for m in body["messages"]:
        content = m.get("content")
        if isinstance(content, list):
            out += [b.get("text") or json.dumps(b.get("content")) for b in content]
        else:
            out.append(content or "")
    return "\n".join(out)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_prompt_is_rendered_from_the_run_input_and_the_reply_is_the_response(tmp_path, server, provider):
    server.script = [{"text": "Sure! Here you go: " + json.dumps(GOOD) + " Anything else?"}]
    h = Harness(project(tmp_path, provider))
    result = h.run(input={"customer": "Ada", "text": "I want my money back"})
    assert result.status == "succeeded", result.error
    assert result.output == {"intent": "refund"}
    [request] = server.bodies()
    assert "Classify this ticket from Ada:\nI want my money back" in user_text(request)
    assert request["model"] == ("gpt-test" if provider == "openai" else "claude-test")
    [called] = model_events(h)
    data = called["data"]
    assert data["provider"] == provider and data["parsed"] == GOOD and data["problem"] is None
    assert data["usage"] == {"input_tokens": 11, "output_tokens": 7}
    assert data["cost"] == pytest.approx(11 * (1.0 if provider == "openai" else 3.0) / 1e6
                                         + 7 * (2.0 if provider == "openai" else 15.0) / 1e6)
    assert len(data["digest"]) == 64 and data["latency_ms"] >= 0 and data["call_id"] == "classify:1:1"


def test_openai_asks_the_server_for_structured_output_and_anthropic_does_not(tmp_path, server):
    server.script = [{"json": GOOD}]
    assert Harness(project(tmp_path, "openai")).run(input={"customer": "a", "text": "b"}).status == "succeeded"
    assert Harness(project(tmp_path, "anthropic", ), ).run(input={"customer": "a", "text": "b"}).status == "succeeded"
    openai_body, anthropic_body = server.bodies()
    assert openai_body["response_format"]["type"] == "json_schema"
    assert openai_body["response_format"]["json_schema"]["schema"]["required"] == ["intent", "confidence"]
    assert "response_format" not in anthropic_body
    assert anthropic_body["max_tokens"] == 256 and "JSON Schema" in anthropic_body["system"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_invalid_reply_is_re_asked_with_the_validation_error_then_accepted(tmp_path, server, provider):
    server.script = [{"json": {"intent": "refund", "confidence": 7}}, {"json": GOOD}]
    h = Harness(project(tmp_path, provider))
    result = h.run(input={"customer": "a", "text": "b"})
    assert result.status == "succeeded", result.error
    first, second = server.bodies()
    assert "Your reply was not valid" in user_text(second) and "7" in user_text(second)
    calls = model_events(h)
    assert [c["data"]["reask"] is None for c in calls] == [True, False]
    assert calls[0]["data"]["problem"] and calls[1]["data"]["reask"] == calls[0]["data"]["problem"]
    # each message is stored once: the first call's system and user messages, then the reply and the re-ask
    assert [c["data"]["messages_from"] for c in calls] == [0, 2]
    assert [m["role"] for c in calls for m in c["data"]["messages"]] == ["system", "user", "assistant", "user"]
    assert calls[0]["data"]["digest"] != calls[1]["data"]["digest"]

    from flowctl.store.history import steps_of

    stored = [dict(e, data=e["data"]) for e in h.events if e["run_id"] == result.run_id]
    [step, _done] = steps_of(stored)
    assert step["reasks"] == 1 and step["model_calls"] == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_replies_invalid_past_max_reasks_fail_with_schema_mismatch(tmp_path, server, provider):
    server.script = [{"text": "I am not sure, sorry."}]
    h = Harness(project(tmp_path, provider))
    result = h.run(input={"customer": "a", "text": "b"})
    assert result.status == "failed"
    assert result.error["type"] == "SchemaMismatch" and "after 2 re-asks" in result.error["message"]
    assert len(server.requests) == 3  # the first ask and max_reasks (2) re-asks


@pytest.mark.parametrize("provider", PROVIDERS)
def test_throttling_429_is_a_tool_throttled_the_state_retries(tmp_path, server, provider):
    server.script = [{"status": 429}, {"status": 503}, {"json": GOOD}]
    h = Harness(project(tmp_path, provider))
    result = h.run(input={"customer": "a", "text": "b"})
    assert result.status == "succeeded", result.error
    assert len(server.requests) == 3  # the SDK's own retries are off: every attempt is flowctl's, recorded
    assert [e["data"]["error"] for e in model_events(h, "model_failed")] == ["ToolThrottled", "ToolUnavailable"]
    assert [e["data"]["error"] for e in h.events if e["type"] == "retry_scheduled"] == ["ToolThrottled", "ToolUnavailable"]
    assert model_events(h)[0]["attempt"] == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_flows_token_limit_raises_budget_exceeded(tmp_path, server, provider):
    server.script = [{"json": GOOD, "usage": {"input_tokens": 40, "output_tokens": 20}}]
    h = Harness(project(tmp_path, provider, limits="limits: {tokens: 50}\n"))
    result = h.run(input={"customer": "a", "text": "b"})
    assert result.status == "failed"
    assert result.error["type"] == "BudgetExceeded" and "60 tokens" in result.error["message"]
    assert len(model_events(h)) == 1  # the call that went over is recorded


def test_a_missing_sdk_is_an_error_naming_the_extra(tmp_path, server, monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` raises ImportError
    h = Harness(project(tmp_path, "openai"))
    result = h.run(input={"customer": "a", "text": "b"})
    assert result.status == "failed"
    assert "pip install 'flowctl[openai]'" in result.error["message"]
    assert server.requests == []


def test_an_undefined_template_name_fails_the_step_naming_the_template(tmp_path, server):
    server.script = [{"json": GOOD}]
    h = Harness(project(tmp_path, "openai"), check=False)
    result = h.run(input={"text": "no customer"})
    assert result.status == "failed"
    assert result.error["type"] == "ExpressionError" and "classify.md" in result.error["message"]
    assert server.requests == []


def test_the_fake_profile_replays_scripted_replies_without_a_network(tmp_path):
    root = build(tmp_path, {
        "models.yaml": "profiles:\n  default:\n    provider: fake\n    replies:\n      classify:\n"
                       "        - {text: 'no json here'}\n        - {json: {intent: other, confidence: 0.2}}\n",
        "prompts/classify.md": "{{ input.text }}",
        "states/classify.yaml": CLASSIFY.format(profile="default"),
        "transitions/f.yaml": "flow: f\nstart: classify\noutput: {intent: response.intent}\n"
                              "transitions:\n  - {from: classify, to: done}\n",
    })
    result = Harness(root).run(input={"text": "hello"})
    assert result.status == "succeeded" and result.output == {"intent": "other"}


def test_a_replay_uses_the_recorded_replies_and_says_when_a_prompt_changed(tmp_path, server):
    import flowctl
    from flowctl.testing.replay import load_recording, replay
    from support.enginekit import sqlite_store

    server.script = [{"text": "hmm"}, {"json": GOOD}]
    root = project(tmp_path, "openai")
    store = sqlite_store(tmp_path)
    run = Harness(root, store=store).run(input={"customer": "a", "text": "b"})
    assert run.status == "succeeded" and len(server.requests) == 2
    stored = [e["data"] for e in store.events(run.run_id) if e["type"] == "model_called"]
    assert [d["content"] for d in stored] == ["hmm", json.dumps(GOOD)]  # the reply is data, never the record itself
    assert all(d["call_id"].startswith("classify:1:") and len(d["digest"]) == 64 for d in stored)
    same = replay(load_recording(store, run.run_id), flowctl.load_project(root))
    assert not same.diverged and same.replayed_status == "succeeded" and same.notes == []
    (root / "orchestration" / "prompts" / "classify.md").write_text("Another prompt for {{ input.customer }}")
    changed = replay(load_recording(store, run.run_id), flowctl.load_project(root))
    assert not changed.diverged
    assert any("differ from the recorded ones" in n and "'classify'" in n for n in changed.notes), changed.notes
    assert len(server.requests) == 2  # neither replay called the model
