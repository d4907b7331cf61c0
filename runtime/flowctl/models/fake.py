"""The ``fake`` provider: scripted replies, no network (flow tests, examples, CI).

The script maps a state id to its replies in order: the *n*-th model call of one visit of that
state (``ModelRequest.index``, re-asks and agent turns counted) gets reply *n*, and the last reply
repeats (a key ``STATE#VISIT`` holds the replies of that visit only: a replayed run's). A reply is ``{text: "…"}``, ``{json: VALUE}`` (its text is the value as JSON), and/or
``{tool_calls: [{name, arguments}]}`` (each with an optional ``id``, the call's id the model gave:
a replay keeps the recorded ones, so later messages are the same), with an optional ``usage: {input_tokens, output_tokens}``
(default: about four characters a token of the messages and of the text).
"""
from __future__ import annotations

import json

from flowctl.errors import ToolError
from flowctl.models.base import ModelReply, ModelRequest, ToolCallRequest


class FakeProvider:
    """Replies from ``script`` (``{state id: [reply, …]}``, see the module docstring)."""

    name = "fake"

    def __init__(self, script):
        self.script = script or {}

    def complete(self, request: ModelRequest) -> ModelReply:
        replies = self.script.get(f"{request.state}#{request.visit}") or self.script.get(request.state)
        if not replies:
            raise ToolError("Model.NoScriptedReply", f"the fake model has no reply for state '{request.state}'",
                            hint=f"add replies: {{{request.state}: [...]}} to the fake profile (or mock it in the case)")
        reply = replies[min(request.index, len(replies) - 1)]
        if "json" in reply:
            text = json.dumps(reply["json"])
        else:
            text = reply.get("text", "")
        calls = [ToolCallRequest(str(t.get("id") or f"call_{request.index}_{i}"), t["name"], dict(t.get("arguments") or {}),
                                 json.dumps(t.get("arguments") or {}))
                 for i, t in enumerate(reply.get("tool_calls") or ())]
        prompt = sum(len(str(m.get("content") or "")) for m in request.messages)
        usage = {"input_tokens": (prompt + 3) // 4, "output_tokens": (len(text) + 3) // 4}
        usage.update(reply.get("usage") or {})
        raw = {"scripted": request.index, "text": text, "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]}
        return ModelReply(text, calls, usage, raw, None, "tool_calls" if calls else "stop")


__all__ = ["FakeProvider"]
