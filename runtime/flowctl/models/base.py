"""The one small interface every model provider implements: a :class:`ModelRequest` in, a
:class:`ModelReply` out (:class:`Provider`).

Messages are provider-neutral dicts, in order::

    {"role": "system" | "user" | "assistant", "content": str}
    {"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments": dict}]}
    {"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}

Each provider module (:mod:`~flowctl.models.openai`, :mod:`~flowctl.models.anthropic`,
:mod:`~flowctl.models.fake`) turns them into its wire format and maps its SDK's errors onto
flowctl's (:func:`map_sdk_error`): rate limit -> ``ToolThrottled``, 5xx and connection errors ->
``ToolUnavailable``, timeout -> ``ToolTimeout``, any other refusal -> ``ToolError`` named
``Model.<SDK error class>``; so a state's ``retry`` and ``on_error`` apply as to any tool.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from flowctl.errors import ToolError, ToolThrottled, ToolTimeout, ToolUnavailable


@dataclass
class ModelRequest:
    """One model call. ``model``: the provider's model name (None for fake); ``messages`` as in
    the module docstring; ``output_schema``: the JSON Schema the final answer must satisfy (None:
    any text); ``tools``: ``[{name, description, parameters}]``, ``parameters`` a JSON Schema of
    the arguments; ``timeout`` seconds; ``structured``: ask the server to enforce
    ``output_schema`` where it can. ``state``, ``visit`` (1-based) and ``index`` (the 0-based model
    call of this state visit) say which call this is (the fake provider's script is keyed by them)."""

    model: str | None
    messages: list
    output_schema: dict | None = None
    tools: list = field(default_factory=list)
    timeout: float = 60.0
    max_output_tokens: int | None = None
    temperature: float | None = None
    structured: bool = False
    state: str = ""
    index: int = 0
    visit: int = 1


@dataclass
class ToolCallRequest:
    """A tool the model asked to call: ``id`` (the provider's call id), ``name`` and ``arguments``
    (the decoded object, or None when ``arguments_text`` is not a JSON object)."""

    id: str
    name: str
    arguments: dict | None
    arguments_text: str = ""


@dataclass
class ModelReply:
    """What a model answered: ``text`` (may be empty when it only calls tools), ``tool_calls``,
    ``usage`` ``{input_tokens, output_tokens}``, ``raw`` (the provider's response as JSON data),
    ``model`` (as the server named it) and ``stop`` (its finish/stop reason)."""

    text: str
    tool_calls: list = field(default_factory=list)
    usage: dict = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    raw: Any = None
    model: str | None = None
    stop: str | None = None


class Provider(Protocol):
    """``name`` (openai | anthropic | fake) and ``complete(request) -> ModelReply``; raises the
    flowctl errors of :func:`map_sdk_error`."""

    name: str

    def complete(self, request: ModelRequest) -> ModelReply:  # pragma: no cover - protocol
        ...


def map_sdk_error(exc: BaseException, sdk, provider: str) -> Exception:
    """The flowctl error for an exception of the official ``openai`` or ``anthropic`` SDK (both
    name their errors alike), or ``exc`` itself when it is not one of the SDK's."""
    status = getattr(exc, "status_code", None)
    text = f"{provider}: {type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
    if isinstance(exc, sdk.APITimeoutError):
        return ToolTimeout(text)
    if isinstance(exc, sdk.RateLimitError) or status == 529:  # 529: overloaded (slow down)
        return ToolThrottled(text)
    if isinstance(exc, sdk.APIConnectionError):
        return ToolUnavailable(text)
    if isinstance(exc, sdk.APIStatusError):
        if status is not None and (status >= 500 or status in (408, 409)):
            return ToolUnavailable(text)
        return ToolError(f"Model.{type(exc).__name__}", text)
    if isinstance(exc, getattr(sdk, "APIError", ())):
        return ToolError(f"Model.{type(exc).__name__}", text)
    return exc


def missing_sdk(provider: str) -> ToolError:
    """The error for a provider whose SDK is not installed: names the extra to install."""
    return ToolError("ModelProviderMissing", f"the {provider} provider needs the official {provider} SDK, which is not "
                     f"installed: pip install 'flowctl[{provider}]'", hint=f"pip install 'flowctl[{provider}]'")


_CLIENTS: dict = {}
_CLIENTS_LOCK = threading.Lock()


def import_sdk(provider: str):
    """The official SDK module of ``provider`` (``openai``, ``anthropic``), imported now (never at
    start-up); raises :func:`missing_sdk`'s error when it is not installed."""
    import importlib

    try:
        return importlib.import_module(provider)
    except ImportError:
        raise missing_sdk(provider) from None


def sdk_client(sdk, factory: str, base_url_env: str, key_env: str):
    """One SDK client (``sdk.<factory>(max_retries=0, api_key=…)``: the state's ``retry`` decides, not
    the SDK) per (base URL, key) as the environment names them now (tests point it elsewhere)."""
    key = (factory, os.environ.get(base_url_env), os.environ.get(key_env))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = getattr(sdk, factory)(max_retries=0, api_key=key[2] or "not-set")
        return client


__all__ = ["ModelRequest", "ModelReply", "ToolCallRequest", "Provider", "map_sdk_error", "missing_sdk", "import_sdk",
           "sdk_client"]
