"""The checks of llm and agent states: their model profile, their prompt templates, the names the
templates use.

FC901 the state's ``model`` names no profile of ``orchestration/models.yaml``; FC902 its ``prompt``
is not a template in ``orchestration/prompts/``; FC903 a template does not parse (Jinja2 syntax, at
the template's line); FC904 a template uses a name the run scope does not have (found with
``jinja2.meta``: the names a template reads and does not set itself); FC010 a state with neither
``prompt`` nor ``messages``. Jinja2 is imported only when the project has such a state.
"""
from __future__ import annotations

from flowctl.definition.kinds import did_you_mean
from flowctl.definition.model import Project
from flowctl.definition.profiles import MODELS_FILES, PROMPTS, prompt_file
from flowctl.diagnostics import Diagnostic

MODEL_TYPES = ("llm", "agent")
#: the run scope's names, what expressions and templates may start with (``flowctl.check.checks.RUN_SCOPE``)
RUN_SCOPE = ("input", "params", "context", "response", "error", "review", "visits", "state", "run", "item", "index")
#: what a template may name: the run scope (``item``/``index`` only inside map children's flows)
TEMPLATE_NAMES = frozenset(RUN_SCOPE) | {"range", "dict", "lipsum", "cycler", "joiner", "namespace", "loop"}


def check_model_states(project: Project):
    """FC901, FC902, FC903, FC904 and FC010 (see the module docstring)."""
    states = [s for s in project.states.values() if s.type in MODEL_TYPES]
    if not states:
        return
    models_broken = any(rel in project.rejected for rel in MODELS_FILES)
    parsed: dict = {}
    for state in states:
        doc = state.doc
        if not state.prompt and not state.messages:
            yield doc.diag("FC010", f"an {state.type} state needs a prompt or messages", ("type",),
                           hint="prompt: NAME.md (in orchestration/prompts/) or messages: [{role: user, content: ...}]")
        if not models_broken:
            profiles = project.models.profiles if project.models is not None else {}
            if state.model not in profiles:
                where = ("model",) if "model" in state.raw else ("type",)
                hint = (did_you_mean(state.model, profiles) or "profiles: " + ", ".join(sorted(profiles))) if profiles \
                    else "add orchestration/models.yaml with profiles: {default: {provider: openai, model: ...}}"
                yield doc.diag("FC901", f"no model profile '{state.model}'", where, hint=hint)
        if state.prompt:
            data = prompt_file(project.files, state.prompt)
            if data is None:
                have = sorted(k[len(PROMPTS):] for k in project.files if k.startswith(PROMPTS))
                yield doc.diag("FC902", f"no prompt template '{state.prompt}' in orchestration/prompts/", ("prompt",),
                               hint=did_you_mean(state.prompt, have) or "templates: " + (", ".join(have) or "none"))
            else:
                rel = PROMPTS + state.prompt
                if rel not in parsed:
                    parsed[rel] = _names(data.decode("utf-8", "replace"))
                yield from _template_problems(parsed[rel], state, None, rel)
        for i, m in enumerate(state.messages):
            found = _names(m.get("content") or "")
            yield from _template_problems(found, state, ("messages", i, "content"), None)


def _names(source: str):
    """``(undeclared names, None)`` of a template, or ``(None, (line, message))`` when it does not parse."""
    from jinja2 import TemplateSyntaxError, meta
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment()
    try:
        return meta.find_undeclared_variables(env.parse(source)), None
    except TemplateSyntaxError as exc:
        return None, (exc.lineno or 1, exc.message or str(exc))


def _template_problems(found, state, path, rel):
    names, error = found
    if error is not None:
        message = f"the template does not parse: {error[1]}"
        if rel is not None:
            yield Diagnostic("FC903", f"{message} (prompt of '{state.id}')", rel, error[0], 1)
        else:
            yield state.doc.diag("FC903", message, path)
        return
    for name in sorted(names - TEMPLATE_NAMES):
        hint = did_you_mean(name, RUN_SCOPE) or "templates see: " + ", ".join(RUN_SCOPE)
        message = f"the template uses '{name}', which the run scope does not have"
        if rel is not None:
            yield state.doc.diag("FC904", f"{message} (in {rel})", ("prompt",), hint=hint)
        else:
            yield state.doc.diag("FC904", message, path, hint=hint)


__all__ = ["check_model_states", "MODEL_TYPES"]
