"""Model providers behind one small interface (:mod:`flowctl.models.base`): ``openai`` (Chat
Completions), ``anthropic`` (Messages) through their official SDKs (optional extras, imported only
when a request is made), and ``fake`` (scripted replies).

This package may import :mod:`flowctl.definition` and the root vocabulary only; the engine's model
states (:mod:`flowctl.engine.states.llm`, :mod:`flowctl.engine.states.agent`) use it.
"""
from __future__ import annotations

from flowctl.errors import ToolError
from flowctl.models.base import ModelReply, ModelRequest, Provider, ToolCallRequest

PROVIDERS = ("openai", "anthropic", "fake")


def provider_for(profile, script=None) -> Provider:
    """The provider of ``profile`` (a :class:`~flowctl.definition.model.ModelProfile`); ``script``
    replaces a fake profile's ``replies`` (flow tests' mocks). Raises ToolError for an unknown one."""
    if profile.provider == "openai":
        from flowctl.models.openai import OpenAIProvider

        return OpenAIProvider()
    if profile.provider == "anthropic":
        from flowctl.models.anthropic import AnthropicProvider

        return AnthropicProvider()
    if profile.provider == "fake":
        from flowctl.models.fake import FakeProvider

        return FakeProvider(script if script is not None else profile.replies)
    raise ToolError("ModelProviderMissing", f"unknown model provider '{profile.provider}'",
                    hint="providers: " + ", ".join(PROVIDERS))


__all__ = ["provider_for", "PROVIDERS", "ModelRequest", "ModelReply", "ToolCallRequest", "Provider"]
