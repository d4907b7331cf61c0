"""The ``anthropic`` provider: the Messages API (``POST /v1/messages``) through the official
``anthropic`` SDK (``pip install 'flowctl[anthropic]'``); ``ANTHROPIC_BASE_URL`` and
``ANTHROPIC_API_KEY`` choose the server and key.

System messages become the ``system`` parameter; an assistant's tool calls are ``tool_use`` blocks
and their results ``tool_result`` blocks of the next user message. ``max_tokens`` is required by
the API: the state's or profile's ``max_output_tokens``, else 1024. The JSON answer is extracted from
the reply's text (no server-side schema). SDK retries are off (a state's ``retry`` decides); the SDK
is imported when the first request is made.
"""
from __future__ import annotations


from flowctl.models.base import ModelReply, ModelRequest, ToolCallRequest, import_sdk, map_sdk_error, sdk_client

DEFAULT_MAX_TOKENS = 1024


def wire_messages(messages: list):
    """``(system text, messages)`` of neutral messages (:mod:`flowctl.models.base`) for the Messages API."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    out: list = []
    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if m.get("is_error"):
                block["is_error"] = True
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list) \
                    and all(b.get("type") == "tool_result" for b in out[-1]["content"]):
                out[-1]["content"].append(block)  # one user message holds every result of one turn
            else:
                out.append({"role": "user", "content": [block]})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": t["id"], "name": t["name"], "input": t.get("arguments") or {}}
                       for t in m["tool_calls"]]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return system, out


class AnthropicProvider:
    """The Messages API through the official SDK (see the module docstring)."""

    name = "anthropic"

    def complete(self, request: ModelRequest) -> ModelReply:
        sdk = import_sdk("anthropic")
        system, messages = wire_messages(request.messages)
        kwargs = {"model": request.model, "messages": messages, "timeout": request.timeout,
                  "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS}
        if system:
            kwargs["system"] = system
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.tools:
            kwargs["tools"] = [{"name": t["name"], "description": t.get("description", ""),
                                "input_schema": t["parameters"]} for t in request.tools]
        try:
            response = sdk_client(sdk, "Anthropic", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY").messages.create(**kwargs)
        except sdk.AnthropicError as exc:
            raise map_sdk_error(exc, sdk, "anthropic") from exc
        texts, calls = [], []
        for block in response.content or ():
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(block.text)
            elif kind == "tool_use":
                args = block.input if isinstance(block.input, dict) else None
                calls.append(ToolCallRequest(block.id, block.name, args, ""))
        usage = getattr(response, "usage", None)
        return ModelReply(
            text="".join(texts), tool_calls=calls,
            usage={"input_tokens": getattr(usage, "input_tokens", 0) or 0,
                   "output_tokens": getattr(usage, "output_tokens", 0) or 0},
            raw=response.model_dump(mode="json", exclude_none=True), model=getattr(response, "model", None),
            stop=getattr(response, "stop_reason", None))


__all__ = ["AnthropicProvider", "wire_messages"]
