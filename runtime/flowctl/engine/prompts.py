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

import contextvars
import time

from flowctl.definition.profiles import prompt_file
from flowctl.errors import ExpressionError

#: The budget of rendering one template: seconds of work and characters of output. A template that
#: loops for ever (``{% for a in range(n) %}{% for b in range(n) %}…``) is stopped, not left hanging.
RENDER_SECONDS = 2.0
MAX_RENDERED = 1 << 20
#: the largest ``range()`` a template may make (Jinja2's own default is 100,000)
MAX_RANGE = 10_000
_DEADLINE: contextvars.ContextVar = contextvars.ContextVar("flowctl_render_deadline", default=None)


def environment(project):
    """The project's sandboxed Jinja2 environment (made once per project)."""
    env = project._resolved.get(("jinja",))
    if env is None:
        from jinja2 import FunctionLoader, StrictUndefined
        from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

        class Budgeted(ImmutableSandboxedEnvironment):
            """The sandbox, with a time budget checked on every call a template makes."""

            def call(self, __context, __obj, *args, **kwargs):  # noqa: N807 - Jinja2's signature
                deadline = _DEADLINE.get()
                if deadline is not None and time.monotonic() > deadline:
                    raise SecurityError(f"the template ran past its budget of {RENDER_SECONDS:g}s")
                return super().call(__context, __obj, *args, **kwargs)


        def load(name):
            data = prompt_file(project.files, name)
            return None if data is None else data.decode("utf-8", "replace")

        env = project._resolved[("jinja",)] = Budgeted(
            loader=FunctionLoader(load), undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False,
            auto_reload=False)
        env.globals["range"] = _range
    return env


def _range(*args):
    """``range`` in a template: at most :data:`MAX_RANGE` numbers."""
    found = range(*args)
    if len(found) > MAX_RANGE:
        raise OverflowError(f"range too big: {len(found):,} numbers, at most {MAX_RANGE:,} in a template")
    return found


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
    started = time.monotonic()
    token = _DEADLINE.set(started + RENDER_SECONDS)
    try:
        parts, size = [], 0
        for chunk in _template(project, state, key, source).generate(names):
            parts.append(chunk)
            size += len(chunk)
            if size > MAX_RENDERED:
                raise ExpressionError(f"{where}: the template of '{state.id}' rendered over {MAX_RENDERED:,} characters")
            if time.monotonic() - started > RENDER_SECONDS:
                raise ExpressionError(f"{where}: the template of '{state.id}' ran past its budget of {RENDER_SECONDS:g}s")
        return "".join(parts)
    except ExpressionError:
        raise
    except Exception as exc:  # noqa: BLE001 - TemplateError, SecurityError, or an error in an expression
        raise ExpressionError(f"{where}: the template of '{state.id}' did not render: {type(exc).__name__}: {exc}") from None
    finally:
        _DEADLINE.reset(token)


__all__ = ["environment", "render"]
