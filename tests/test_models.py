"""The provider layer (flowctl.models): reading a reply's JSON, the fake provider, the wire
formats and the SDK error mapping (the providers against real HTTP: tests/engine/states/)."""
from __future__ import annotations

import pytest

from flowctl.errors import ToolError, ToolThrottled, ToolTimeout, ToolUnavailable
from flowctl.models import ModelRequest
from flowctl.models.fake import FakeProvider
from flowctl.models.replies import extract_json

SCHEMA = {"type": "object", "required": ["intent"], "properties": {"intent": {"enum": ["refund", "other"]}}}


@pytest.mark.parametrize("text", ['{"intent": "refund"}', 'Sure! {"intent": "refund"} Anything else?',
                                  '```json\n{"intent": "refund"}\n```', 'First {"x": 1} then {"intent": "refund"}'])
def test_the_json_is_found_among_prose_and_fences(text):
    assert extract_json(text, SCHEMA) == ({"intent": "refund"}, None)


def test_json_that_does_not_match_says_why_and_no_json_says_so():
    value, problem = extract_json('{"intent": "maybe"}', SCHEMA)
    assert value is None and "output_schema" in problem and "maybe" in problem
    assert extract_json("I cannot help with that.", SCHEMA) == (None, "the reply holds no JSON value")


def test_the_fake_provider_answers_by_state_and_call_index_and_repeats_the_last():
    fake = FakeProvider({"s": [{"text": "one"}, {"json": {"a": 1}, "usage": {"input_tokens": 5}},
                               {"tool_calls": [{"name": "t", "arguments": {"x": 1}}]}]})
    replies = [fake.complete(ModelRequest(None, [{"role": "user", "content": "hi"}], state="s", index=i)) for i in range(4)]
    assert [r.text for r in replies[:2]] == ["one", '{"a": 1}']
    assert replies[1].usage["input_tokens"] == 5
    assert [(c.name, c.arguments) for c in replies[3].tool_calls] == [("t", {"x": 1})]
    with pytest.raises(ToolError, match="no reply for state 'other'"):
        fake.complete(ModelRequest(None, [], state="other"))


def test_the_wire_formats_of_a_tool_turn():
    from flowctl.models.anthropic import wire_messages as anthropic_wire
    from flowctl.models.openai import wire_messages as openai_wire

    turn = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "refund A1"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "get", "arguments": {"id": "A1"}},
                                                               {"id": "c2", "name": "get", "arguments": {"id": "A2"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "get", "content": "{}"},
            {"role": "tool", "tool_call_id": "c2", "name": "get", "content": "{\"error\": 1}", "is_error": True}]
    oa = openai_wire(turn)
    assert oa[2]["tool_calls"][0] == {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"id": "A1"}'}}
    assert [m["role"] for m in oa] == ["system", "user", "assistant", "tool", "tool"]
    system, an = anthropic_wire(turn)
    assert system == "be brief" and [m["role"] for m in an] == ["user", "assistant", "user"]
    assert [b["tool_use_id"] for b in an[2]["content"]] == ["c1", "c2"] and an[2]["content"][1]["is_error"] is True


@pytest.mark.parametrize("sdk_name", ["openai", "anthropic"])
def test_sdk_errors_map_onto_flowctls(sdk_name):
    sdk = pytest.importorskip(sdk_name)
    from flowctl.models.base import map_sdk_error

    try:  # the SDKs' HTTP client: httpx2 in their newer majors, httpx before
        import httpx2 as httpx
    except ImportError:
        import httpx

    request = httpx.Request("POST", "http://127.0.0.1/v1")

    def status(code, cls):
        return cls(f"status {code}", response=httpx.Response(code, request=request), body=None)

    assert isinstance(map_sdk_error(status(429, sdk.RateLimitError), sdk, sdk_name), ToolThrottled)
    assert isinstance(map_sdk_error(status(503, sdk.InternalServerError), sdk, sdk_name), ToolUnavailable)
    assert isinstance(map_sdk_error(sdk.APITimeoutError(request=request), sdk, sdk_name), ToolTimeout)
    assert isinstance(map_sdk_error(sdk.APIConnectionError(request=request), sdk, sdk_name), ToolUnavailable)
    rejected = map_sdk_error(status(401, sdk.AuthenticationError), sdk, sdk_name)
    assert type(rejected) is ToolError and rejected.error_type == "Model.AuthenticationError"
