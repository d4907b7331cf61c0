"""Prompt rendering (flowctl.engine.prompts): Jinja2 in its sandbox, over the run scope, templates
only from the definition snapshot."""
from __future__ import annotations

import pytest

from flowctl.definition.loader import load_files
from flowctl.engine.prompts import render
from flowctl.errors import ExpressionError

pytest.importorskip("jinja2")


def project(prompt_text, state_extra="prompt: p.md\n", more=None):
    files = {"orchestration/states/s.yaml": ("id: s\ntype: llm\n" + state_extra).encode(),
             "orchestration/prompts/p.md": prompt_text.encode(), **(more or {})}
    p = load_files(files)
    return p, p.states["s"]


SCOPE = {"input": {"name": "Ada", "items": [1, 2]}, "params": {}, "context": {}, "response": None, "error": None,
         "review": None, "visits": {}, "state": None, "run": {"id": "r1"}, "item": None, "index": None}


def test_a_template_renders_over_the_run_scope():
    p, s = project("Hi {{ input.name }} ({{ input['items'] | length }} items, run {{ run.id }})")
    assert render(p, s, SCOPE) == [{"role": "user", "content": "Hi Ada (2 items, run r1)"}]


def test_inline_messages_come_before_the_prompt():
    p, s = project("last", state_extra="prompt: p.md\nmessages:\n  - {role: system, content: 'sys {{ input.name }}'}\n")
    assert render(p, s, SCOPE) == [{"role": "system", "content": "sys Ada"}, {"role": "user", "content": "last"}]


def test_an_undefined_name_is_an_error_naming_the_template():
    p, s = project("{{ input.nope }}")
    with pytest.raises(ExpressionError, match="orchestration/prompts/p.md"):
        render(p, s, SCOPE)


@pytest.mark.parametrize("text", ["{{ input.__class__.__mro__ }}", "{{ ''.__class__.__subclasses__() }}",
                                  "{{ input['items'].append(3) }}"])
def test_the_sandbox_refuses_attribute_tricks_and_changes_to_the_scope(text):
    p, s = project(text)
    with pytest.raises(ExpressionError):
        render(p, s, SCOPE)
    assert SCOPE["input"]["items"] == [1, 2]


def test_an_include_reads_only_the_snapshots_prompts(tmp_path):
    secret = tmp_path / "secret.md"
    secret.write_text("SECRET")
    p, s = project("{% include 'part.md' %}", more={"orchestration/prompts/part.md": b"part"})
    assert render(p, s, SCOPE)[0]["content"] == "part"
    for name in ("../states/s.yaml", str(secret), "/etc/passwd"):
        p, s = project("{% include '" + name + "' %}")
        with pytest.raises(ExpressionError, match="TemplateNotFound"):
            render(p, s, SCOPE)


@pytest.mark.parametrize("text, says", [
    ("{% for a in range(10000) %}{% for b in range(10000) %}{% endfor %}{% endfor %}", "budget"),
    ("{% for a in range(100000) %}x{% endfor %}", "range too big"),
    ("{% for a in range(10000) %}{% for b in range(10000) %}xxxxxxxxxx{% endfor %}{% endfor %}", "characters"),
])
def test_a_template_that_would_run_for_ever_or_grow_without_end_is_stopped(text, says, monkeypatch):
    # (break-it finding: nested loops passed validate and hung the run with no render budget)
    import flowctl.engine.prompts as prompts

    monkeypatch.setattr(prompts, "RENDER_SECONDS", 0.5)
    p, s = project(text)
    with pytest.raises(ExpressionError, match=says):
        render(p, s, SCOPE)
