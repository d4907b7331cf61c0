"""``flowctl validate`` on llm and agent states (flowctl.check.models): the profile, the prompt
template, its syntax and the names it reads (FC901-FC904); and the model files themselves."""
from __future__ import annotations

import json
import subprocess
import sys

from support.helpers import of, one, problems

MODELS = "profiles:\n  default: {provider: fake, replies: {ask: [{json: {ok: true}}]}}\n"
BASE = {
    "models.yaml": MODELS,
    "prompts/ask.md": "Hello {{ input.name }}",
    "states/ask.yaml": "id: ask\ntype: llm\nprompt: ask.md\noutput_schema: {type: object}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/flow.yaml": "flow: flow\nstart: ask\ntransitions:\n  - {from: ask, to: done}\n",
}

#: one project per code, for tests/test_validate.py's catalogue of every published code
CATALOGUE = {
    "FC901": {**BASE, "states/ask.yaml": "id: ask\ntype: llm\nmodel: fast\nprompt: ask.md\n"},
    "FC902": {**BASE, "states/ask.yaml": "id: ask\ntype: llm\nprompt: aks.md\n"},
    "FC903": {**BASE, "prompts/ask.md": "line one\n{% if input.name %}unclosed\n"},
    "FC904": {**BASE, "prompts/ask.md": "Hello {{ inptu.name }}"},
}


def test_a_valid_model_state_has_no_problems(make_project):
    assert problems(make_project(BASE)) == []


def test_an_unknown_profile_says_which_there_are(make_project):
    d = one(problems(make_project(CATALOGUE["FC901"])), "FC901")
    assert d.message == "no model profile 'fast'" and "default" in d.hint
    assert (d.file, d.line) == ("orchestration/states/ask.yaml", 3)


def test_a_project_without_models_yaml_is_told_to_add_it(make_project):
    d = one(problems(make_project({**BASE, "models.yaml": None})), "FC901")
    assert "orchestration/models.yaml" in d.hint


def test_a_missing_template_suggests_the_close_one(make_project):
    d = one(problems(make_project(CATALOGUE["FC902"])), "FC902")
    assert "did you mean 'ask.md'" in d.hint and d.line == 3


def test_a_template_syntax_error_is_located_in_the_template(make_project):
    d = one(problems(make_project(CATALOGUE["FC903"])), "FC903")
    assert d.file == "orchestration/prompts/ask.md" and d.line == 2  # the block never closed


def test_a_name_the_scope_lacks_is_reported_with_a_suggestion(make_project):
    d = one(problems(make_project(CATALOGUE["FC904"])), "FC904")
    assert "'inptu'" in d.message and "did you mean 'input'" in d.hint


def test_names_a_template_sets_itself_are_not_reported(make_project):
    text = "{% set who = input.name %}{% for x in context.items or [] %}{{ x }}{% endfor %}{{ who }} {{ run.id }}"
    assert problems(make_project({**BASE, "prompts/ask.md": text})) == []


def test_inline_messages_are_checked_at_their_own_location(make_project):
    state = ("id: ask\ntype: llm\nmessages:\n  - {role: system, content: be brief}\n"
             "  - {role: user, content: '{{ nope }}'}\n")
    d = one(problems(make_project({**BASE, "states/ask.yaml": state})), "FC904")
    assert d.line == 5


def test_a_model_state_needs_a_prompt_or_messages(make_project):
    d = one(problems(make_project({**BASE, "states/ask.yaml": "id: ask\ntype: llm\n"})), "FC010")
    assert "prompt or messages" in d.message


def test_an_agents_tools_must_exist_and_count_as_used(make_project):
    found = problems(make_project({**BASE, "states/ask.yaml": "id: ask\ntype: agent\nprompt: ask.md\ntools: [nope@^1]\n"}))
    assert one(found, "FC102").message == "no contract 'nope'"
    used = problems(make_project({**BASE, "states/ask.yaml": "id: ask\ntype: agent\nprompt: ask.md\ntools: [peek@^1]\n",
                                  "contracts/peek.v1.0.0.yaml": "id: peek\nversion: 1.0.0\nentrypoint: m:peek\n"}))
    assert of(used, "FC105") == []


def test_a_prompt_path_cannot_leave_the_prompts_folder(make_project):
    d = one(problems(make_project({**BASE, "states/ask.yaml": "id: ask\ntype: llm\nprompt: ../states/ask.yaml\n"})),
            "FC010")
    assert d.line == 3


def test_models_yaml_errors_are_located(make_project):
    found = problems(make_project({**BASE, "models.yaml": "profiles:\n  default: {provider: openai, timeout: 5}\n"}))
    assert {d.code for d in found} >= {"FC502"}
    found = problems(make_project({**BASE, "models.yaml": "profiles:\n  default: {provider: openia}\n"}))
    assert "did you mean 'openai'" in one(found, "FC010").hint


def test_validating_a_model_project_imports_no_model_sdk(make_project):
    root = make_project(BASE)
    code = ("import json, sys; from click.testing import CliRunner; import flowctl.cli.main as m;"
            "r = CliRunner().invoke(m.main, ['validate', sys.argv[1]]);"
            "print(json.dumps([r.exit_code, sorted(k for k in ('openai', 'anthropic', 'httpx', 'jinja2') if k in sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    code_, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert code_ == 0 and loaded == ["jinja2"]  # the templates are parsed; no SDK is imported
