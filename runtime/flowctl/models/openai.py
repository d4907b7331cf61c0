"""The ``openai`` provider: the Chat Completions API (``POST /v1/chat/completions``) through the
official ``openai`` SDK (``pip install 'flowctl[openai]'``), so any OpenAI-compatible server works
(vLLM, Ollama, llama.cpp, LM Studio). The SDK's own environment variables choose the server and key:
``OPENAI_BASE_URL``, ``OPENAI_API_KEY``.

Tools are offered as ``tools: [{type: function, function: {name, description, parameters}}]`` and
come back as ``tool_calls``; with ``structured`` the request carries ``response_format: {type:
json_schema, json_schema: {name: output, schema}}``. The SDK's own retries are off
(``max_retries=0``): a state's ``retry`` rules decide, and every attempt is recorded. The SDK is
imported when the first request is made, never by ``validate`` or by flows without model states.
"""
from __future__ import annotations

import json

from flowctl.models.base import ModelReply, ModelRequest, ToolCallRequest, import_sdk, map_sdk_error, sdk_client


def wire_messages(messages: list) -> list:
    """Neutral messages (:mod:`flowctl.models.base`) as Chat Completions messages."""
    out = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            out.append({"role": "assistant", "content": m.get("content") or None, "tool_calls": [
                {"id": t["id"], "type": "function",
                 "function": {"name": t["name"], "arguments": json.dumps(t.get("arguments") or {})}}
                for t in m["tool_calls"]]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


class OpenAIProvider:
    """Chat Completions through the official SDK (see the module docstring)."""

    name = "openai"

    def complete(self, request: ModelRequest) -> ModelReply:
        sdk = import_sdk("openai")
        kwargs = {"model": request.model, "messages": wire_messages(request.messages), "timeout": request.timeout}
        if request.max_output_tokens:
            kwargs["max_completion_tokens"] = request.max_output_tokens
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.tools:
            kwargs["tools"] = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                                 "parameters": t["parameters"]}} for t in request.tools]
        if request.structured and request.output_schema is not None and not request.tools:
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "output", "schema": request.output_schema}}
        try:
            response = sdk_client(sdk, "OpenAI", "OPENAI_BASE_URL", "OPENAI_API_KEY").chat.completions.create(**kwargs)
        except sdk.OpenAIError as exc:
            raise map_sdk_error(exc, sdk, "openai") from exc
        choice = response.choices[0] if response.choices else None
        message = choice.message if choice is not None else None
        calls = []
        for t in (getattr(message, "tool_calls", None) or ()):
            fn = getattr(t, "function", None)
            if fn is None:
                continue
            text = fn.arguments or ""
            try:
                args = json.loads(text) if text.strip() else {}
            except ValueError:
                args = None
            calls.append(ToolCallRequest(t.id, fn.name, args if isinstance(args, dict) else None, text))
        usage = getattr(response, "usage", None)
        return ModelReply(
            text=(getattr(message, "content", None) or ""), tool_calls=calls,
            usage={"input_tokens": getattr(usage, "prompt_tokens", 0) or 0,
                   "output_tokens": getattr(usage, "completion_tokens", 0) or 0},
            raw=response.model_dump(mode="json", exclude_none=True), model=getattr(response, "model", None),
            stop=getattr(choice, "finish_reason", None))


__all__ = ["OpenAIProvider", "wire_messages"]
