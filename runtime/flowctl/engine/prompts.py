"""Rendering the messages of an llm or agent state: Jinja2 templates in its sandbox, over the run scope.

A state's ``messages`` (each ``content`` a template) come first, then its ``prompt`` (a template
file under ``orchestration/prompts/``) as a user message. Templates see the run scope's names
(``input``, ``params``, ``context``, ``response``, ``error``, ``review``, ``visits``, ``state``,
``run``) and nothing else: an undefined name is an error (``StrictUndefined``), and the sandbox
(:class:`jinja2.sandbox.ImmutableSandboxedEnvironment`) refuses attribute tricks and changes to the
scope. Template files, ``{% include %}`` too, come only from the definition snapshot
(:func:`flowctl.definition.profiles.prompt_file`): never from disk, never from outside the folder.
Jinja2 is imported only when a model state renders (or ``validate`` checks one).
"""
from __future__ import annotations

from flowctl.definition.profiles import prompt_file
from flowctl.errors import ExpressionError


def environment(project):
    """The project's sandboxed Jinja2 environment (made once per project)."""
    env = project._resolved.get(("jinja",))
    if env is None:
        from jinja2 import FunctionLoader, StrictUndefined
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def load(name):
            data = prompt_file(project.files, name)
            return None if data is None else data.decode("utf-8", "replace")

        env = project._resolved[("jinja",)] = ImmutableSandboxedEnvironment(
            loader=FunctionLoader(load), undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False,
            auto_reload=False)
    return env


def _template(project, state, key, source=None):
    cache = ("jinja", state.id, key)
    found = project._resolved.get(cache)
    if found is None:
        env = environment(project)
        found = env.get_template(state.prompt) if source is None else env.from_string(source)
        project._resolved[cache] = found
    return found


def render(project, state, scope: dict) -> list:
    """The state's messages, rendered: ``[{role, content}]``. Raises :class:`ExpressionError`
    naming the template for a missing template, an undefined name, or anything the sandbox refuses."""
    out = []
    names = {k: v for k, v in scope.items() if k not in ("item", "index") or v is not None}
    for i, m in enumerate(state.messages):
        where = state.where("messages", i, "content")
        out.append({"role": m["role"], "content": _render(project, state, ("messages", i), m["content"], names, where)})
    if state.prompt:
        if prompt_file(project.files, state.prompt) is None:
            raise ExpressionError(f"prompt '{state.prompt}' of '{state.id}' is not in orchestration/prompts/")
        out.append({"role": "user", "content": _render(project, state, ("prompt",), None, names,
                                                        f"orchestration/prompts/{state.prompt}")})
    return out


def _render(project, state, key, source, names, where) -> str:
    try:
        return _template(project, state, key, source).render(names)
    except Exception as exc:  # noqa: BLE001 - TemplateError, SecurityError, or an error in an expression
        raise ExpressionError(f"{where}: the template of '{state.id}' did not render: {type(exc).__name__}: {exc}") from None


__all__ = ["environment", "render"]
