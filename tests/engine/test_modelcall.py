"""One model call and its record (flowctl.engine.modelcall): profiles, prices, the budget, and
what a model_called event keeps, on the fake provider (real HTTP: tests/engine/states/)."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build

pytest.importorskip("jinja2")

STATE = "id: ask\ntype: llm\nmodel: {model}\nprompt: ask.md\noutput_schema: {{type: object, required: [ok]}}\n"


def project(tmp_path, replies="[{json: {ok: true}, usage: {input_tokens: 1000, output_tokens: 500}}]", model="default",
            limits="", extra=None):
    return build(tmp_path, {
        "models.yaml": f"profiles:\n  default: {{provider: fake, replies: {{ask: {replies}}}}}\n"
                       "  other: {provider: fake, replies: {ask: [{json: {ok: false}}]}}\n"
                       "prices:\n  gpt-x: {input: 2.0, output: 8.0}\n",
        "prompts/ask.md": "card {{ input.card }} of {{ input.name }}",
        "states/ask.yaml": STATE.format(model=model),
        "transitions/f.yaml": "flow: f\nstart: ask\noutput: {ok: response.ok}\n" + limits
                              + "transitions:\n  - {from: ask, to: done}\n",
        **(extra or {})})


def called(h):
    return [e["data"] for e in h.events if e["type"] == "model_called"]


def test_flowctl_model_profile_overrides_the_default_profile(tmp_path, monkeypatch):
    h = Harness(project(tmp_path))
    assert h.run(input={"card": "x", "name": "y"}).output == {"ok": True}
    monkeypatch.setenv("FLOWCTL_MODEL_PROFILE", "other")
    assert h.run(input={"card": "x", "name": "y"}).output == {"ok": False}
    assert called(h)[-1]["profile"] == "other"


def test_an_unknown_flowctl_model_profile_is_refused_before_a_run_is_created(tmp_path, monkeypatch):
    # (new-user finding: it became a stored failed run, exit 1)
    from flowctl.errors import UsageError

    h = Harness(project(tmp_path))
    monkeypatch.setenv("FLOWCTL_MODEL_PROFILE", "bogus")
    with pytest.raises(UsageError, match="FLOWCTL_MODEL_PROFILE=bogus names no profile"):
        h.run(input={"card": "x", "name": "y"})
    assert h.store.list_runs() == []


def test_the_cost_limit_raises_budget_exceeded_through_the_error_layers(tmp_path):
    root = project(tmp_path, limits="limits: {cost: 0.001}\non_error:\n  - {errors: [BudgetExceeded], goto: done}\n")
    (root / "orchestration" / "models.yaml").write_text(
        "profiles:\n  default: {provider: openai, model: gpt-x}\nprices:\n  gpt-x: {input: 2.0, output: 8.0}\n")
    # priced as gpt-x: 1000 * 2 / 1e6 + 500 * 8 / 1e6 = 0.006 > 0.001; the case's reply stands in for the model
    h = Harness(root)
    h.engine.model_mocks = {"ask": [{"json": {"ok": True}, "usage": {"input_tokens": 1000, "output_tokens": 500}}]}
    result = h.run(input={"card": "x", "name": "y"})
    assert result.status == "succeeded"  # the flow's handler caught BudgetExceeded and went to done
    assert [e["data"]["error"]["type"] for e in h.events if e["type"] == "error_caught"] == ["BudgetExceeded"]
    assert called(h)[0]["cost"] == pytest.approx(0.006)


def test_a_flow_test_never_calls_a_real_model(tmp_path):
    root = project(tmp_path)
    (root / "orchestration" / "models.yaml").write_text("profiles:\n  default: {provider: openai, model: gpt-x}\n")
    h = Harness(root)
    h.engine.model_mocks = {}
    result = h.run(input={"card": "x", "name": "y"})
    assert result.status == "failed" and "mocks no model reply for 'ask'" in result.error["message"]


def test_sensitive_values_are_redacted_from_the_recorded_messages(tmp_path):
    extra = {"contracts/vault.v1.0.0.yaml": "id: vault\nversion: 1.0.0\nentrypoint: tk:vault\nsensitive: [card]\n"
                                            "input_schema: {type: object, properties: {card: {type: string}}}\n",
             "states/keep.yaml": "id: keep\ntype: task\ntool: vault@^1\ninput: {card: input.card}\n",
             "transitions/f.yaml": "flow: f\nstart: keep\ntransitions:\n  - {from: keep, to: ask}\n  - {from: ask, to: done}\n"}
    echo = "[{text: 'ok: {\"ok\": true, \"card\": \"4111111111111111\"}'}]"  # the model echoes the card
    root = project(tmp_path, replies=echo, extra=extra)
    (root / "orchestration" / "tools").mkdir(exist_ok=True)
    (root / "orchestration" / "tools" / "tk.py").write_text("def vault(input, call):\n    return {}\n")
    h = Harness(root)
    result = h.run(input={"card": "4111111111111111", "name": "Ada"})
    assert result.status == "succeeded", result.error
    stored = h.store.events(result.run_id) if hasattr(h.store, "events") else None
    [data] = called(h)
    assert "4111111111111111" not in str(data) and "Ada" in data["messages"][-1]["content"]
    assert data["parsed"]["card"] == data["raw"]["text"].split('"card": "')[1][:14] == "***redacted***"
    assert stored is None or "4111111111111111" not in str(stored)


def test_running_a_flow_without_model_states_imports_no_sdk_nor_jinja(tmp_path):
    import json
    import subprocess
    import sys

    root = build(tmp_path, {"states/t.yaml": "id: t\ntype: task\ntool: ping@^1\n",
                            "contracts/ping.v1.0.0.yaml": "id: ping\nversion: 1.0.0\nentrypoint: tk:ping\n",
                            "transitions/f.yaml": "flow: f\nstart: t\ntransitions:\n  - {from: t, to: done}\n"},
                 tools="def ping(input, call):\n    return {}\n")
    code = ("import json, sys, flowctl; from flowctl.store.sql import MemoryStore;"
            "r = flowctl.Engine(flowctl.load_project(sys.argv[1]), MemoryStore()).run('f', {});"
            "print(json.dumps([r.status, sorted(m for m in ('openai', 'anthropic', 'jinja2', 'httpx', 'httpx2') if m in sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["succeeded", []], out.stderr
