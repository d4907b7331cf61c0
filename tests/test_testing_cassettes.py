"""Cassettes (flowctl.testing.cassettes): `flowctl test --record` calls the real model once, through
the official SDKs against a local server speaking the Chat Completions and Messages wire formats
(tests/support/modelserver.py); later runs replay the cassette with no network."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import flowctl
from flowctl.cli.main import main
from flowctl.testing.cases import load_cases
from flowctl.testing.runner import run_case
from support.enginekit import build
from support.modelserver import ModelServer

pytest.importorskip("openai")
pytest.importorskip("anthropic")
pytest.importorskip("jinja2")

PROVIDERS = ["openai", "anthropic"]
CARD = "4111111111111111"

FILES = {
    "models.yaml": "profiles:\n  default: {provider: openai, model: gpt-test}\n"
                   "  claude: {provider: anthropic, model: claude-test}\n",
    "prompts/classify.md": "Classify ticket {{ input.ticket }}: {{ input.text }}",
    "prompts/settle.md": "Resolve ticket {{ input.ticket }} about order {{ input.order_id }}.",
    "contracts/get_order.v1.0.0.yaml": """
        id: get_order
        version: 1.0.0
        entrypoint: tk:get_order
        sensitive: [card]
        input_schema: {type: object, required: [order_id], properties: {order_id: {type: string}}}
        """,
    "contracts/refund_payment.v1.0.0.yaml": (
        "{id: refund_payment, version: 1.0.0, entrypoint: 'tk:refund_payment', verify: 'tk:verify_refund',"
        " compensate: 'tk:undo_refund', side_effects: [{type: payment, target: payments}],"
        " input_schema: {type: object, required: [order_id, amount]}}\n"),
    "policies/refunds.yaml": "{policy: refunds, applies_to: [refund_payment], allow: [{field: input.amount, range: [0, 100]}]}\n",
    "states/classify.yaml": """
        id: classify
        type: llm
        model: {profile}
        prompt: classify.md
        output_schema: {{type: object, required: [intent], properties: {{intent: {{enum: [refund, other]}}}}}}
        retry:
          - {{errors: [ToolThrottled], max_attempts: 3, interval: 1s}}
        """,
    "states/settle.yaml": """
        id: settle
        type: agent
        model: {profile}
        prompt: settle.md
        tools: [get_order@^1, refund_payment@^1]
        output_schema: {{type: object, required: [resolution]}}
        max_turns: 4
        """,
    "transitions/f.yaml": "flow: f\nstart: classify\noutput: {resolution: response.resolution, note: response.note}\n"
                          "transitions:\n  - {from: classify, to: settle}\n  - {from: settle, to: done}\n",
}
TOOLS = """
def get_order(input, call):
    return {}

def refund_payment(input, call):
    return {}

def verify_refund(input, output, call):
    return True

def undo_refund(input, output, call):
    pass
"""

CASE = """
description: a refund the agent resolves
input: {ticket: T-1, order_id: A1, text: my parcel arrived broken}
mocks:
  get_order: {output: {order_id: A1, total: 80, card: "4111111111111111"}}
  refund_payment: {output: {refunded: 30}}
expect:
  path: [classify, settle, done]
  status: succeeded
  output: {resolution: refunded}
"""

# the model: throttled once, then the classification, two tool calls, an answer echoing the card
SCRIPT = [{"status": 429}, {"json": {"intent": "refund"}},
          {"tool_calls": [("get_order", {"order_id": "A1"})]},
          {"tool_calls": [("refund_payment", {"order_id": "A1", "amount": 30})]},
          {"json": {"resolution": "refunded", "note": f"refunded 30 to card {CARD}"}}]


def project(tmp_path, provider, case=CASE):
    files = dict(FILES)
    profile = "default" if provider == "openai" else "claude"
    for sid in ("classify", "settle"):
        files[f"states/{sid}.yaml"] = FILES[f"states/{sid}.yaml"].format(profile=profile)
    files["tests/f/refund.yaml"] = case
    return build(tmp_path, files, tools=TOOLS)


def the_case(root):
    proj = flowctl.load_project(root)
    cases, diags = load_cases(proj)
    assert not diags and len(cases) == 1, diags
    return proj, cases[0]


def cassette(root):
    return root / "orchestration" / "tests" / "f" / "cassettes" / "refund.yaml"


def record(root, monkeypatch, script=SCRIPT):
    with ModelServer(script) as server:
        server.env(monkeypatch)
        result = run_case(*the_case(root), record=True)
    return result, server


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_recorded_cassette_replays_with_no_network(tmp_path, monkeypatch, provider):
    root = project(tmp_path, provider)
    recorded, server = record(root, monkeypatch)
    assert recorded.passed, recorded.report()
    assert len(server.requests) == 5 and recorded.recorded == 5
    assert recorded.cassette == "orchestration/tests/f/cassettes/refund.yaml"
    calls = flowctl.definition.yamlio.loads(cassette(root).read_text())["calls"]
    assert [(c["state"], c["index"], c["attempt"], c.get("error")) for c in calls] == [
        ("classify", 0, 1, "ToolThrottled"), ("classify", 0, 2, None), ("settle", 0, 1, None),
        ("settle", 1, 1, None), ("settle", 2, 1, None)]
    assert calls[2]["reply"]["tool_calls"][0]["id"] == "call_2_0"  # the server's id, so later digests match
    # the server is gone: a call to it would fail; the cassette answers every model step
    replayed = run_case(*the_case(root))
    assert replayed.passed, replayed.report()
    assert [e["data"]["provider"] for e in replayed.events if e["type"] == "model_called"] == [provider] * 4
    assert [e["type"] for e in replayed.events if e["type"] in ("model_failed", "retry_scheduled")] == [
        "model_failed", "retry_scheduled"]  # the throttled call is raised again: the retry goes as it went
    assert len(server.requests) == 5


def test_a_changed_prompt_fails_the_case_naming_the_state_and_saying_to_re_record(tmp_path, monkeypatch):
    root = project(tmp_path, "openai")
    assert record(root, monkeypatch)[0].passed
    (root / "orchestration" / "prompts" / "settle.md").write_text("Resolve {{ input.ticket }} politely.")
    result = run_case(*the_case(root))
    assert result.status == "error"
    text = result.report()
    assert "cassette problem: the prompt of 'settle' changed since orchestration/tests/f/cassettes/refund.yaml" in text
    assert "model call 1 of 'settle' (visit 1, attempt 1)" in text
    assert "hint: re-record the cassette: flowctl test --record orchestration/tests/f/refund.yaml" in text
    assert result.path == ["classify", "settle"]  # the unchanged classify was still answered


def test_a_call_the_cassette_does_not_hold_fails_the_case(tmp_path, monkeypatch):
    root = project(tmp_path, "openai")
    assert record(root, monkeypatch)[0].passed
    text = cassette(root).read_text()
    cassette(root).write_text(text[:text.index("- state: settle")])  # the agent's turns are gone
    result = run_case(*the_case(root))
    assert result.status == "error"
    assert "has no reply for model call 1 of 'settle'" in result.report()


def test_no_sensitive_value_is_written_to_the_cassette(tmp_path, monkeypatch):
    root = project(tmp_path, "openai")
    recorded, server = record(root, monkeypatch)
    assert recorded.passed, recorded.report()
    assert CARD in json.dumps(server.bodies()[-1]) or CARD in json.dumps(recorded.output)  # the model did see it
    assert CARD not in cassette(root).read_text()
    assert "refunded 30 to card ***redacted***" in cassette(root).read_text()
    replayed = run_case(*the_case(root))
    assert replayed.passed and replayed.output["note"] == "refunded 30 to card ***redacted***"


def test_a_state_the_case_mocks_is_not_recorded(tmp_path, monkeypatch):
    mocked = CASE + "models:\n  classify: [{json: {intent: refund}}]\n"
    root = project(tmp_path, "openai", case=mocked)
    recorded, server = record(root, monkeypatch, SCRIPT[2:])
    assert recorded.passed, recorded.report()
    assert len(server.requests) == 3
    calls = flowctl.definition.yamlio.loads(cassette(root).read_text())["calls"]
    assert {c["state"] for c in calls} == {"settle"}
    assert run_case(*the_case(root)).passed


def test_a_malformed_cassette_is_a_located_case_error(tmp_path):
    root = project(tmp_path, "openai")
    cassette(root).parent.mkdir(parents=True)
    cassette(root).write_text("calls:\n  - {state: classify}\n")
    result = run_case(*the_case(root))
    assert result.status == "error"
    assert "orchestration/tests/f/cassettes/refund.yaml: calls[0] needs state, visit, index" in result.report()


def test_without_a_cassette_a_real_model_step_is_not_called_and_the_hint_says_record(tmp_path, monkeypatch):
    root = project(tmp_path, "openai")
    with ModelServer(SCRIPT) as server:
        server.env(monkeypatch)
        result = run_case(*the_case(root))
    assert not server.requests
    assert result.run_error["type"] == "Model.NotMocked" and "unless recording a cassette" in result.run_error["message"]


def flowctl_cli(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_flowctl_test_record_writes_the_cassette_and_flowctl_test_replays_it(tmp_path, monkeypatch):
    root = project(tmp_path, "anthropic")
    with ModelServer(SCRIPT) as server:
        server.env(monkeypatch)
        code, out = flowctl_cli("test", "--record", "--root", str(root))
    assert code == 0, out
    assert "REC   f/refund  5 model calls → " in out and "cassettes/refund.yaml" in out
    code, out = flowctl_cli("test", "--root", str(root))
    assert code == 0 and "PASS  f/refund" in out and "REC" not in out, out
    (root / "orchestration" / "prompts" / "classify.md").write_text("Sort {{ input.text }}")
    code, out = flowctl_cli("test", "--root", str(root))
    assert code == 1 and "the prompt of 'classify' changed" in out, out


def test_record_with_contracts_is_a_usage_error(tmp_path):
    code, out = flowctl_cli("test", "--record", "--contracts", "--root", str(project(tmp_path, "openai")))
    assert code == 2 and "--record records the model replies of golden cases" in out


def test_flowctl_replay_of_a_recorded_agent_run_uses_its_replies_and_their_tool_call_ids(tmp_path, monkeypatch):
    # replay of a stored run (flowctl replay) answers from its model_called events, not a cassette
    from flowctl.testing.replay import load_recording, replay
    from support.enginekit import Harness, sqlite_store

    root = project(tmp_path, "openai")
    store = sqlite_store(tmp_path)
    with ModelServer(SCRIPT) as server:
        server.env(monkeypatch)
        run = Harness(root, store=store).run(input={"ticket": "T-1", "order_id": "A1", "text": "broken"})
        assert run.status == "succeeded", run.error
        same = replay(load_recording(store, run.run_id), flowctl.load_project(root))
    assert len(server.requests) == 5  # the replay called no model
    assert not same.diverged and same.replayed_status == "succeeded"
    assert same.notes == []  # the agent's later turns send the recorded tool call ids: the same messages


def test_a_cassette_linked_from_outside_the_project_is_neither_read_nor_written(tmp_path, monkeypatch):
    root = project(tmp_path, "openai")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "refund.yaml").write_text("calls: []\n")
    cassette(root).parent.symlink_to(outside, target_is_directory=True)
    result = run_case(*the_case(root))
    assert result.status == "error" and "leads outside the project; it is not read" in result.report()
    recorded, _server = record(root, monkeypatch)
    assert recorded.cassette is None
    assert ("orchestration/tests/f/cassettes is a symbolic link or not a folder; flowctl test --record does not "
            "write orchestration/tests/f/cassettes/refund.yaml through it") in recorded.unrecorded
    assert (outside / "refund.yaml").read_text() == "calls: []\n"


def test_a_committed_temporary_link_does_not_redirect_the_recording(tmp_path, monkeypatch):
    # the old save wrote <cassette>.tmp with write_text, following a link committed under that name
    root = project(tmp_path, "openai")
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("keep\n")
    cassette(root).parent.mkdir(parents=True)
    trap = cassette(root).with_name("refund.yaml.tmp")
    trap.symlink_to(outside)
    recorded, _server = record(root, monkeypatch)
    assert recorded.cassette == "orchestration/tests/f/cassettes/refund.yaml", recorded.unrecorded
    assert outside.read_text() == "keep\n" and trap.is_symlink()
    assert not cassette(root).is_symlink() and "case: f/refund" in cassette(root).read_text()
    assert sorted(p.name for p in cassette(root).parent.iterdir()) == ["refund.yaml", "refund.yaml.tmp"]


@pytest.fixture(params=["by descriptor", "by path"])
def save_case(request, tmp_path, monkeypatch):
    """The project and case of a direct cassettes.save, on each of its two ways of writing."""
    from flowctl.testing import cassettes

    if request.param == "by path":
        monkeypatch.setattr(cassettes, "_DIR_FD", False)
    elif not cassettes._DIR_FD:
        pytest.skip("the platform cannot open files relative to a folder")
    return the_case(project(tmp_path, "openai"))


CALLS = [{"state": "classify", "visit": 1, "index": 0, "attempt": 1, "digest": "d", "reply": {"text": "x"}}]


def test_save_writes_a_plain_file_whole_and_leaves_no_temporary(save_case):
    from flowctl.testing import cassettes

    proj, case = save_case
    first = cassettes.save(proj, case, CALLS)
    again = cassettes.save(proj, case, CALLS + [dict(CALLS[0], attempt=2)])
    assert first == again == cassette(proj.root)
    assert [p.name for p in again.parent.iterdir()] == ["refund.yaml"] and not again.is_symlink()
    assert sorted(cassettes.load(proj, case)) == [("classify", 1, 0, 1), ("classify", 1, 0, 2)]


@pytest.mark.parametrize("linked", ["orchestration", "orchestration/tests/f", "orchestration/tests/f/cassettes",
                                    "orchestration/tests/f/cassettes/refund.yaml"])
@pytest.mark.parametrize("target", ["outside", "inside"])
def test_save_refuses_a_link_anywhere_on_the_cassette_path(save_case, tmp_path, linked, target):
    from flowctl.testing import cassettes

    proj, case = save_case
    root = proj.root
    # the link points at a copy of what it replaces: outside the project, or elsewhere in it
    base = tmp_path / "elsewhere" if target == "outside" else root / "copy"
    real = root / linked
    real.parent.mkdir(parents=True, exist_ok=True)
    if not real.exists():
        real.mkdir() if not linked.endswith(".yaml") else real.write_text("calls: []\n")
    base.parent.mkdir(parents=True, exist_ok=True)
    real.rename(base)
    real.symlink_to(base, target_is_directory=base.is_dir())
    before = sorted((p.relative_to(base).as_posix(), p.read_bytes() if p.is_file() else b"")
                    for p in ([base] if base.is_file() else base.rglob("*")))
    with pytest.raises(cassettes.CassetteProblem) as caught:
        cassettes.save(proj, case, CALLS)
    assert caught.value.message.startswith(f"{linked} is a symbolic link or not a ")
    after = sorted((p.relative_to(base).as_posix(), p.read_bytes() if p.is_file() else b"")
                   for p in ([base] if base.is_file() else base.rglob("*")))
    assert after == before and real.is_symlink()


def test_a_recording_whose_model_never_answered_is_not_written(tmp_path, monkeypatch):
    root = project(tmp_path, "openai")
    recorded, server = record(root, monkeypatch, [{"status": 429}])
    assert len(server.requests) == 3  # every attempt of classify's retry was throttled
    assert not cassette(root).exists() and recorded.cassette is None
    assert recorded.unrecorded.startswith("not recorded: model call 1 of 'classify' (visit 1, attempt 3) got no answer "
                                          "(ToolThrottled")
