"""The gate has no side doors, and policies see the run they guard (issue 13, items 1 and 6).

Each test is named for the attack class it closes; each failed on the main before the fix."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from support.enginekit import Harness, allow_all, build, contract, effect_contract, task
from flowctl.store.audit import REDACTED
from flowctl.errors import UsageError
from support.helpers import problems
from support.pg import pg_url  # noqa: F401 - the fixture

TOOLS = """
LEDGER = []
FAIL = {"pay": 0}

def pay(input, call):
    if FAIL["pay"]:
        FAIL["pay"] -= 1
        from flowctl import ToolUnavailable
        raise ToolUnavailable("try again")
    LEDGER.append(("pay", input.get("amount")))
    return {"ok": True}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    LEDGER.append(("undo", input.get("amount")))

def boom(input, call):
    raise RuntimeError("after the notify")

def page(input, call):
    LEDGER.append(("page", input["run_id"]))
    return {"paged": True}

def verify_page(input, output, call):
    LEDGER.append(("verify_page", "token" in input))
    return True

def undo_page(input, output, call):
    LEDGER.append(("unpage", input.get("token")))

def mail(input, call):
    LEDGER.append(("mail", tuple(input["to"])))
    return {}

def verify_mail(input, output, call):
    return True

def undo_mail(input, output, call):
    pass

def interrupt(input, call):
    if not LEDGER:
        LEDGER.append(("interrupted",))
        raise KeyboardInterrupt
    LEDGER.append(("resumed",))
    return {}
"""

RETRY_ON_DENIAL = """\
    input: {amount: input.amount}
    retry:
      - {errors: ["*"], max_attempts: 3, interval: 1s}
"""


def _flow(start, *moves):
    lines = [f"flow: f\nstart: {start}\ntransitions:"]
    lines += [f"  - {{from: {a}, to: {b}{', when: ' + json.dumps(w) if w else ''}}}" for a, b, w in moves]
    return {"transitions/f.yaml": "\n".join(lines) + "\n"}


def _charge_project(tmp_path, policy: str, *, state_extra=RETRY_ON_DENIAL, moves=None, more=None):
    files = {**effect_contract("pay", "pay"), **task("charge", "pay@^1", extra=state_extra),
             "policies/cap.yaml": "policy: cap\napplies_to: [pay]\n" + textwrap.dedent(policy),
             **_flow("charge", *(moves or [("charge", "done", None)])), **(more or {})}
    return Harness(build(tmp_path, files, TOOLS))


# ----------------------------------------------------------------------------- retries are new calls
def test_retry_after_a_denied_call_is_a_new_call_for_rate(tmp_path):
    h = _charge_project(tmp_path, "allow: []\nrate: {max: 1, window: 1h, per: flow}\n")
    assert h.run(input={"amount": 1}).status == "succeeded"
    second = h.run(input={"amount": 2})
    assert second.status == "failed" and second.error["type"] == "PolicyDenied"
    assert h.ledger() == [("pay", 1)]  # the retries were refused by the rate too
    decisions = [e["data"]["rule"] for e in h.events if e["type"] == "policy_decided" and e["run_id"] == second.run_id]
    assert decisions == ["rate", "rate", "rate"]


def test_retry_after_a_denied_call_is_a_new_call_for_dedupe(tmp_path):
    moves = [("charge", "charge", "visits.charge < `2`"), ("charge", "done", None)]
    h = _charge_project(tmp_path, "allow: []\ndedupe: {window: 1h}\n", moves=moves)
    result = h.run(input={"amount": 7})
    assert result.status == "failed" and result.error["type"] == "PolicyDenied"
    assert [e for e in h.ledger() if e[0] == "pay"] == [("pay", 7)]  # the second visit is refused on every attempt


def test_a_dedupe_denial_names_what_sent_the_input_before_a_run_or_a_gate_session(tmp_path):
    """(new-user finding: a session's denial said "by this run" of a caller that had no run)"""
    from flowctl.gate.policy import Gate

    h = _charge_project(tmp_path, "allow: []\ndedupe: {window: 1h}\n")
    gate, pay = Gate(h.project, h.store, h.clock), h.project.resolve_tool("pay")
    for run_id, by in (("run-1", "by this run"), ("gate:agent:trace-1", "by this session")):
        assert gate.decide(pay, {"amount": 7}, run_id=run_id).outcome == "allow"
        again = gate.decide(pay, {"amount": 7}, run_id=run_id)
        assert (again.outcome, again.rule) == ("deny", "dedupe") and by in again.reason, again.reason


def test_a_policy_still_governs_a_tool_whose_contract_declares_no_side_effects(tmp_path):
    """(new-user finding: taking side_effects out of a contract turned the gate off for it — its
    policy's range no longer applied, and validate said nothing.) A policy names what it governs."""
    from flowctl.gate.policy import Gate

    files = {**contract("pay", "pay"), **task("charge", "pay@^1", extra="input: {amount: input.amount}\n"),
             "policies/cap.yaml": "policy: cap\napplies_to: [pay]\nallow:\n  - {field: input.amount, range: [0, 100]}\n",
             **_flow("charge", ("charge", "done", None))}
    h = Harness(build(tmp_path, files, TOOLS))
    assert h.run(input={"amount": 5}).status == "succeeded"
    over = h.run(input={"amount": 500})
    assert over.status == "failed" and over.error["type"] == "PolicyDenied"
    assert [e for e in h.ledger() if e[0] == "pay"] == [("pay", 5)]  # the denied call never ran
    pay = h.project.resolve_tool("pay")
    decided = Gate(h.project, h.store, h.clock).decide(pay, {"amount": 500}, run_id="r")
    assert (decided.outcome, decided.policy) == ("deny", "cap")
    assert Gate(h.project, h.store, h.clock).decide(h.project.resolve_tool("pay"), {"amount": 1}).rule == "allow"


def test_technical_retry_of_an_allowed_call_is_not_counted_twice(tmp_path):
    h = _charge_project(tmp_path, "allow: []\nrate: {max: 1, window: 1h, per: flow}\n")
    from flowctl.engine.tools import resolve

    resolve("tk:FAIL", str(h.root / "orchestration" / "tools"))["pay"] = 1
    assert h.run(input={"amount": 3}).status == "succeeded"
    assert h.ledger() == [("pay", 3)]


# ----------------------------------------------------------------------------- notify is a tool call
NOTIFY_REVIEW = {
    **contract("page", "page", extra="""\
        verify: tk:verify_page
        compensate: tk:undo_page
        input_schema: {type: object, required: [token, run_id]}
        side_effects: [{type: external_api_call, target: pager/page}]
        """),
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\nnotify: page@^1\ntimeout: 1h\n"
                       "on_timeout: {goto: done}\n",
    **contract("boom", "boom"), **task("fails", "boom@^1"),
    **_flow("ask", ("ask", "fails", None), ("fails", "done", None)),
}


def test_notify_tool_goes_through_the_gate(tmp_path):
    h = Harness(build(tmp_path, NOTIFY_REVIEW, TOOLS))
    result = h.run()
    assert result.status == "failed" and result.error["type"] == "PolicyDenied"
    assert "page" in result.error["message"] and h.ledger() == []  # default deny: never paged


def test_notify_tool_is_recorded_verified_and_compensated_like_a_task_tool(tmp_path):
    h = Harness(build(tmp_path, {**NOTIFY_REVIEW, **allow_all("page")}, TOOLS))
    paused = h.run()
    assert paused.status == "paused"
    token = paused.review["token"]
    done = h.engine.resume(paused.run_id, token=token, decision="approve", by="t")
    assert done.status == "failed"  # boom fails the run: the saga undoes the page
    assert h.ledger() == [("page", paused.run_id), ("verify_page", True), ("unpage", REDACTED)]
    types = h.types(paused.run_id)
    assert types.index("policy_decided") < types.index("tool_invoked") < types.index("tool_succeeded")
    stored = json.dumps(h.store.events(paused.run_id)) + json.dumps(h.store.get_run(paused.run_id), default=str)
    assert token not in stored  # the token is never stored, not in events, steps or the checkpoint


def test_notify_input_is_checked_against_its_contract_schema(tmp_path):
    files = {**NOTIFY_REVIEW, **allow_all("page")}
    files["contracts/page.v1.0.0.yaml"] = files["contracts/page.v1.0.0.yaml"].replace(
        "required: [token, run_id]", "required: [token, pager_id]")
    h = Harness(build(tmp_path, files, TOOLS))
    result = h.run()
    assert result.status == "failed" and result.error["type"] == "SchemaMismatch" and h.ledger() == []


# ----------------------------------------------------------------------------- the gate follows the function
def test_read_only_alias_of_a_side_effecting_function_is_gated(tmp_path):
    files = {**effect_contract("pay", "pay"), **contract("peek", "pay"),  # peek: same function, "read-only"
             **task("charge", "peek@^1", extra="input: {amount: input.amount}\n"), **_flow("charge", ("charge", "done", None))}
    h = Harness(build(tmp_path, files, TOOLS), check=False)  # validate says FC704; the gate holds anyway
    result = h.run(input={"amount": 5})
    assert result.status == "failed" and result.error["type"] == "PolicyDenied" and h.ledger() == []
    assert "its function tk:pay has them under another contract" in result.error["message"]


def test_alias_contract_with_a_looser_policy_is_held_to_the_functions_policies(tmp_path):
    files = {**effect_contract("pay", "pay"), **effect_contract("pay_alias", "pay"), **allow_all("pay_alias"),
             "policies/cap.yaml": "policy: cap\napplies_to: [pay]\nallow:\n  - {field: input.amount, range: [0, 1000]}\n",
             **task("charge", "pay_alias@^1", extra="input: {amount: input.amount}\n"),
             **_flow("charge", ("charge", "done", None))}
    h = Harness(build(tmp_path, files, TOOLS), check=False)
    result = h.run(input={"amount": 5000})
    assert result.status == "failed" and "denied by cap" in result.error["message"] and h.ledger() == []
    assert h.run(input={"amount": 900}).status == "succeeded"


# ----------------------------------------------------------------------------- tool code stays in the project
def test_entrypoint_outside_the_tools_folder_is_refused_at_run_time(tmp_path, monkeypatch):
    pkg = tmp_path / "site"
    (pkg / "evil_pkg").mkdir(parents=True)
    (pkg / "evil_pkg" / "__init__.py").write_text("RAN = []\ndef run(input, call):\n    RAN.append(1)\n    return {}\n")
    monkeypatch.syspath_prepend(str(pkg))
    files = {**contract("x", "run", module="evil_pkg"), **task("t", "x@^1"), **_flow("t", ("t", "done", None))}
    h = Harness(build(tmp_path, files, TOOLS), check=False)
    with pytest.raises(UsageError, match="refused to run evil_pkg:run: evil_pkg is an installed package"):
        h.run()
    assert "evil_pkg" not in sys.modules  # refused before it was imported
    listed = build(tmp_path, {**files, "project.yaml": "tool_packages: [evil_pkg]\n"}, TOOLS, name="listed")
    assert Harness(listed, check=False).run().status == "succeeded"


@pytest.mark.parametrize("ref", ["os:system", "builtins:eval", "subprocess:run", "tk:os.system", "tk:__builtins__"])
def test_standard_library_and_reexported_callables_are_refused_at_run_time(tmp_path, ref):
    module, _, fn = ref.partition(":")
    files = {"contracts/x.v1.0.0.yaml": f"id: x\nversion: 1.0.0\nentrypoint: {ref}\n", **task("t", "x@^1"),
             **_flow("t", ("t", "done", None))}
    h = Harness(build(tmp_path, files, "import os\n" + TOOLS), check=False)
    with pytest.raises(UsageError, match="refused to run"):
        h.run()


# ----------------------------------------------------------------------------- review tokens
def _review_project(tmp_path):
    files = {"states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
             **_flow("ask", ("ask", "done", None))}
    return Harness(build(tmp_path, files, TOOLS))


def test_guessing_review_tokens_is_throttled_per_run(tmp_path):
    h = _review_project(tmp_path)
    paused = h.run()
    for _ in range(5):
        with pytest.raises(UsageError, match="wrong token"):
            h.engine.resume(paused.run_id, token="guess", decision="approve")
    with pytest.raises(UsageError, match="refuses review tokens until"):  # even the right one, for a while
        h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    refused = [e["data"]["reason"] for e in h.store.events(paused.run_id) if e["type"] == "review_refused"]
    assert refused == ["wrong token"] * 5 + ["throttled"]
    h.clock.advance(901)
    assert h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve").status == "succeeded"


def test_reissued_token_ends_the_throttle(tmp_path):
    h = _review_project(tmp_path)
    paused = h.run()
    for _ in range(5):
        with pytest.raises(UsageError):
            h.engine.resume(paused.run_id, token="guess", decision="approve")
    token = h.engine.reissue_token(paused.run_id, by="ops")
    assert h.engine.resume(paused.run_id, token=token, decision="approve").status == "succeeded"


def test_wrong_or_used_token_never_continues_an_orphaned_run(tmp_path):
    files = {**contract("work", "interrupt"), **task("t", "work@^1"), **_flow("t", ("t", "done", None))}
    h = Harness(build(tmp_path, files, TOOLS))
    with pytest.raises(KeyboardInterrupt):
        h.run(run_id="r1")
    assert h.store.get_run("r1")["status"] == "running"  # orphaned: its process "died" mid-step
    with pytest.raises(UsageError, match="not paused for review"):
        h.engine.resume("r1", token="WRONG", decision="reject")
    assert h.store.get_run("r1")["status"] == "running" and h.ledger() == [("interrupted",)]
    assert h.engine.resume("r1").status == "succeeded"  # without a token, recovery continues it


# ----------------------------------------------------------------------------- policies see the run
MAIL = {
    **effect_contract("mail", "mail"), **task("send", "mail@^1", extra="input: {to: input.to}\n"),
    **_flow("send", ("send", "done", None)),
    "policies/recipients.yaml": textwrap.dedent("""\
        policy: recipients
        applies_to: [mail]
        allow:
          - {field: input.to, all_in: {expr: run_input.allowed_recipients}}
        """),
}


def test_policy_compares_tool_input_with_the_run_input(tmp_path):
    h = Harness(build(tmp_path, MAIL, TOOLS))
    ok = h.run(input={"to": ["a@x"], "allowed_recipients": ["a@x", "b@x"]})
    assert ok.status == "succeeded"
    bad = h.run(input={"to": ["a@x", "eve@y"], "allowed_recipients": ["a@x"]})
    assert bad.status == "failed" and bad.error["type"] == "PolicyDenied"
    assert 'input.to has ["eve@y"], not in run_input.allowed_recipients = ["a@x"]' in bad.error["message"]
    missing = h.run(input={"to": ["a@x"]})  # nothing declared: nothing is allowed
    assert missing.status == "failed" and "is not a list" in missing.error["message"]


REFUND = {
    **effect_contract("pay", "pay"),
    "states/note_total.yaml": "id: note_total\ntype: pass\nset: {order_total: input.total}\n",
    **task("refund", "pay@^1", extra="input: {amount: input.amount}\n"),
    **_flow("note_total", ("note_total", "refund", None), ("refund", "done", None)),
    "policies/refund_cap.yaml": "policy: refund_cap\napplies_to: [pay]\nallow:\n"
                                "  - {field: input.amount, range: [0, {expr: context.order_total}]}\n",
}


def test_policy_bounds_tool_input_by_the_run_context(tmp_path):
    files = dict(REFUND)
    files["states/note_total.yaml"] = "id: note_total\ntype: pass\n"
    files["transitions/f.yaml"] = files["transitions/f.yaml"].replace("{from: note_total, to: refund}",
                                                                      "{from: note_total, to: refund, set: {order_total: input.total}}")
    h = Harness(build(tmp_path, files, TOOLS))
    assert h.run(input={"total": 100, "amount": 100}).status == "succeeded"
    over = h.run(input={"total": 100, "amount": 101})
    assert over.status == "failed"
    assert "input.amount is 101, outside [0, context.order_total = 100]" in over.error["message"]
    unknown = h.run(input={"amount": 1})  # a null bound is not "open": denied
    assert unknown.status == "failed" and "context.order_total = null is not a number" in unknown.error["message"]
    assert h.ledger() == [("pay", 100)]


def test_gate_review_shows_the_redacted_input_and_rule_and_has_a_deadline(tmp_path):
    files = {**effect_contract("pay", "pay", extra="sensitive: [card]\n"),
             **task("charge", "pay@^1", extra="input: {amount: input.amount, card: input.card}\n"),
             **_flow("charge", ("charge", "done", None)),
             "policies/big.yaml": "policy: big\napplies_to: [pay]\nallow: []\nreview_when: \"input.amount > `100`\"\n"}
    h = Harness(build(tmp_path, files, TOOLS))
    paused = h.run(input={"amount": 500, "card": "4111-1111"})
    assert paused.status == "paused"
    show = paused.review["show"]
    assert show["input"] == {"amount": 500, "card": REDACTED}
    assert (show["rule"], show["when"], show["policy"]) == ("review_when", "input.amount > `100`", "big")
    assert paused.review["deadline"] == pytest.approx(h.clock.time() + 24 * 3600)
    h.clock.advance(24 * 3600 + 1)
    (ended,) = h.engine.recover()
    assert ended.status == "failed" and ended.error["type"] == "PolicyDenied"
    assert "review_timeout" in ended.error["message"] and h.ledger() == []


def test_regex_matches_the_whole_value_and_the_denial_says_so(tmp_path):
    h = _charge_project(tmp_path, "allow:\n  - {field: input.amount, regex: \"[0-9]\"}\n",
                        state_extra="input: {amount: input.amount}\n")
    result = h.run(input={"amount": "12"})
    assert result.status == "failed" and "matches the whole value" in result.error["message"]


def test_policy_check_explains_a_decision_against_the_run_context(tmp_path):
    import subprocess

    from support.helpers import FLOWCTL_EXE

    root = build(tmp_path, REFUND, TOOLS)
    argv = [FLOWCTL_EXE, "policy", "check", "pay", "--input", '{"amount": 50}', "--context", '{"order_total": 40}',
            "--db", "memory"]
    result = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "input.amount is 50, outside [0, context.order_total = 40]" in result.stdout


def test_policy_check_refuses_an_input_the_contract_rejects_before_any_decision(tmp_path):
    import subprocess

    from support.helpers import FLOWCTL_EXE

    files = dict(REFUND)
    files["contracts/pay.v1.0.0.yaml"] += ("input_schema:\n  type: object\n  properties:\n"
                                           "    amount: {type: number}\n")
    root = build(tmp_path, files, TOOLS)
    argv = [FLOWCTL_EXE, "policy", "check", "pay", "--input", '{"amount": "x"}', "--context", '{"order_total": 40}',
            "--db", "memory"]
    result = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--input does not match the input_schema of pay@1.0.0" in result.stderr and "outside" not in result.stdout


CRASHING_PAGE = """
def page(input, call):
    LEDGER.append(("page", call.idempotency_key.split(":notify:")[0]))
    if len([e for e in LEDGER if e[0] == "page"]) == 1:
        raise KeyboardInterrupt  # the process dies after the pager was called, before it was recorded
    return {"paged": True}
"""


def test_notify_cut_short_by_a_crash_is_verified_and_joins_the_saga(tmp_path):
    h = Harness(build(tmp_path, {**NOTIFY_REVIEW, **allow_all("page")}, TOOLS + CRASHING_PAGE))
    with pytest.raises(KeyboardInterrupt):
        h.run(run_id="r1")
    assert h.store.get_run("r1")["cursor"]["inflight"]["input"]["token"] == REDACTED  # never the token itself
    paused = h.engine.resume("r1")
    assert paused.status == "paused"
    recovered = [e for e in h.store.events("r1") if e["type"] == "step_recovered"]
    assert recovered and recovered[0]["data"]["happened"] is True
    done = h.engine.resume("r1", token=paused.review["token"], decision="approve")
    assert done.status == "failed"
    assert [e[0] for e in h.ledger()].count("unpage") == 2  # both pages were undone, newest first


def test_a_denied_reminder_keeps_the_old_token_working(tmp_path):
    files = {**NOTIFY_REVIEW, "policies/once.yaml": "policy: once\napplies_to: [page]\nallow: []\n"
                                                    "rate: {max: 1, window: 1h, per: run}\n"}
    files["states/ask.yaml"] = files["states/ask.yaml"].replace("timeout: 1h", "timeout: 2h\nremind_after: 10m")
    h = Harness(build(tmp_path, files, TOOLS))
    paused = h.run()
    h.clock.advance(11 * 60)
    h.engine.fire_due_reviews()
    failed = [e for e in h.store.events(paused.run_id) if e["type"] == "review_reminder_failed"]
    assert failed and "rate" in failed[0]["data"]["message"]
    assert [e[0] for e in h.ledger()] == ["page", "verify_page"]  # the reminder was refused by the rate
    result = h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    assert result.status == "failed" and result.error["state"] == "fails"  # the old token decided the review


def test_a_reminder_the_gate_would_send_to_review_is_refused_not_parked(tmp_path):
    files = {**NOTIFY_REVIEW, "policies/p.yaml": "policy: p\napplies_to: [page]\nallow: []\n"
                                                 "review_when: \"input.reminder == `true`\"\n"}
    files["states/ask.yaml"] = files["states/ask.yaml"].replace("timeout: 1h", "timeout: 2h\nremind_after: 10m")
    h = Harness(build(tmp_path, files, TOOLS))
    paused = h.run()
    h.clock.advance(11 * 60)
    h.engine.fire_due_reviews()
    row = h.store.get_run(paused.run_id)
    assert row["status"] == "paused" and row["cursor"]["pending"]["state"] == "ask"
    assert not row["cursor"]["pending"].get("policy")  # still the review state's own review
    types = [e["type"] for e in h.store.events(paused.run_id)]
    assert types.count("review_requested") == 1 and "review_reminder_failed" in types  # no gate review was opened
    assert h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve").status == "failed"


def test_reexported_function_under_a_read_only_contract_is_gated_at_run_time(tmp_path):
    main = "gate_reexport_pay"  # module names no other test imports: one project's code in this process
    files = {**effect_contract("pay", "pay", module=main), **contract("peek", "pay", module=f"{main}_alias"),
             f"tools/{main}.py": TOOLS, f"tools/{main}_alias.py": f"from {main} import pay\n",
             **task("charge", "peek@^1", extra="input: {amount: input.amount}\n"), **_flow("charge", ("charge", "done", None))}
    h = Harness(build(tmp_path, files))  # validate cannot tell without importing (--import-check: FC704)
    result = h.run(input={"amount": 5})
    assert result.status == "failed" and result.error["type"] == "PolicyDenied"
    assert "under another contract (pay)" in result.error["message"]
    assert sys.modules[main].LEDGER == []


# ----------------------------------------------------------------------------- issue: gate holes, second pass
GATE2_TOOLS = TOOLS + """
def send2(input, call):
    from flowctl import ToolUnavailable
    raise ToolUnavailable("send2 is down")

def verify_send2(input, output, call):
    return True

def undo_send2(input, output, call):
    pass

def wire(input, call):
    LEDGER.append(("wire", input.get("amount")))
    return {}

def verify_wire(input, output, call):
    return True

def undo_wire(input, output, call):
    pass

def send(input, call):
    LEDGER.append(("send", input.get("x")))
    return {}

def verify_send(input, output, call):
    return True

def undo_send(input, output, call):
    pass
"""


def _approve(h, paused):
    return h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve", by="t")


def test_a_review_approval_covers_only_the_call_it_was_shown(tmp_path):
    files = {**effect_contract("send2", "send2"), **effect_contract("wire", "wire"),
             **task("do_fb", "send2@^1", extra="input: {amount: input.amount}\n"
                                               "on_error: [{errors: [\"*\"], fallback: wire@^1}]\n"),
             **_flow("do_fb", ("do_fb", "done", None)),
             "policies/p.yaml": "policy: p\napplies_to: [send2]\nallow: []\nreview_when: \"input.amount > `3`\"\n",
             "policies/q.yaml": "policy: q\napplies_to: [wire]\nallow: []\nreview_when: \"`true`\"\n"}
    h = Harness(build(tmp_path, files, GATE2_TOOLS))
    paused = h.run(input={"amount": 4})
    assert paused.status == "paused" and paused.review["show"]["policy"] == "p"
    again = _approve(h, paused)  # send2 fails; the fallback wire is another call: q's own review
    assert again.status == "paused" and again.review["show"]["tool"].startswith("wire")
    assert again.review["show"]["policy"] == "q" and h.ledger() == []
    assert _approve(h, again).status == "succeeded" and h.ledger() == [("wire", 4)]

    # a retry whose input changed is a new call: the approval of amount 4 does not cover 32
    files = {**effect_contract("pay", "pay"),
             **task("charge", "pay@^1", extra="input: {amount: input.amount, attempt: state.attempt}\n"
                                              "retry: [{errors: [\"*\"], max_attempts: 3, interval: 1s}]\n"),
             **_flow("charge", ("charge", "done", None)),
             "policies/big.yaml": "policy: big\napplies_to: [pay]\nallow: []\nreview_when: \"input.amount > `3`\"\n"}
    h = Harness(build(tmp_path, files, GATE2_TOOLS, name="retry"))
    from flowctl.engine.tools import resolve

    resolve("tk:FAIL", str(h.root / "orchestration" / "tools"))["pay"] = 1
    paused = h.run(input={"amount": 4})
    assert paused.status == "paused"
    second = _approve(h, paused)  # the approved call fails; the retry sends another input: shown again
    assert second.status == "paused" and second.review["show"]["input"] != paused.review["show"]["input"]
    assert h.ledger() == []
    assert _approve(h, second).status == "succeeded" and h.ledger() == [("pay", 4)]


def test_a_fallback_to_the_same_tool_is_a_new_call_for_rate_and_dedupe(tmp_path):
    from flowctl.engine.tools import resolve

    fallback = "input: {amount: input.amount}\non_error: [{errors: [\"*\"], fallback: pay@^1}]\n"
    for policy in ("allow: []\nrate: {max: 1, window: 1h, per: run}\n", "allow: []\ndedupe: {window: 1h}\n"):
        h = _charge_project(tmp_path / policy[12:16], policy, state_extra=fallback)
        resolve("tk:FAIL", str(h.root / "orchestration" / "tools"))["pay"] = 1
        result = h.run(input={"amount": 5})
        assert result.status == "failed" and result.error["type"] == "PolicyDenied", policy
        assert h.ledger() == []
        rules = [e["data"]["rule"] for e in h.events if e["type"] == "policy_decided"]
        assert rules[-1] in ("rate", "dedupe")


RATE_ONE = {**effect_contract("pay", "pay"), **task("charge", "pay@^1"), **_flow("charge", ("charge", "done", None)),
            "policies/one.yaml": "policy: one\napplies_to: [pay]\nallow: []\nrate: {max: 1, window: 1h, per: tool}\n"}


def _decide_at_once(root, url):
    """Two processes' gates (two stores on one database) decide one call each; the second decides
    while the first sits between counting and recording. Returns both outcomes."""
    import threading

    import flowctl
    from flowctl.engine.clock import FakeClock
    from flowctl.gate.policy import Gate
    from flowctl.store.sql import open_store

    project = flowctl.load_project(root)
    first, second = open_store(url), open_store(url)
    pay = project.resolve_tool("pay@^1")
    outcomes, reached, done = {}, threading.Event(), threading.Event()

    def other():
        outcomes["second"] = Gate(project, second, FakeClock()).decide(pay, {"n": 2}, run_id="r2", flow="f").outcome
        done.set()

    def between():
        first.gate_hook = None
        reached.set()
        threading.Thread(target=other, daemon=True).start()
        done.wait(2.0)  # a correct store holds the other decision back until this one commits

    first.gate_hook = between
    try:
        outcomes["first"] = Gate(project, first, FakeClock()).decide(pay, {"n": 1}, run_id="r1", flow="f").outcome
        assert reached.is_set(), "the gate did not count and record in one step"
        assert done.wait(30)
    finally:
        first.close()
        second.close()
    return outcomes


def test_rate_limits_are_atomic_across_processes_sqlite(tmp_path):
    root = build(tmp_path, RATE_ONE, TOOLS)
    outcomes = _decide_at_once(root, f"sqlite:///{tmp_path}/flowctl.db")
    assert outcomes == {"first": "allow", "second": "deny"}


def test_rate_limits_are_atomic_across_processes_postgresql(tmp_path, pg_url):
    root = build(tmp_path, RATE_ONE, TOOLS)
    outcomes = _decide_at_once(root, pg_url)
    assert outcomes == {"first": "allow", "second": "deny"}


def test_rate_and_dedupe_count_every_contract_of_the_function(tmp_path):
    from flowctl.gate.policy import Gate

    for policy, rule in (("rate: {max: 1, window: 1h, per: run}\n", "rate"), ("dedupe: {window: 1h}\n", "dedupe")):
        files = {**effect_contract("send", "send"), **effect_contract("sendalias", "send"),
                 **task("a", "send@^1", extra="input: {x: input.x}\n"),
                 **task("b", "sendalias@^1", extra="input: {x: input.x}\n"),
                 **_flow("a", ("a", "b", None), ("b", "done", None)),
                 "policies/once.yaml": "policy: once\napplies_to: [send, sendalias]\nallow: []\n" + policy}
        h = Harness(build(tmp_path / rule, files, GATE2_TOOLS))
        result = h.run(input={"x": 1})
        assert result.status == "failed" and result.error["type"] == "PolicyDenied", rule
        assert h.ledger() == [("send", 1)]
        gate = Gate(h.project, h.store, h.clock)
        denied = gate.decide(h.project.resolve_tool("sendalias@^1"), {"x": 1}, run_id=result.run_id, flow="f")
        assert (denied.outcome, denied.rule) == ("deny", rule) and "send, sendalias" in denied.reason


def test_a_backtracking_policy_regex_cannot_stall_the_gate(tmp_path):
    import subprocess

    from support.helpers import FLOWCTL_EXE

    files = {**RATE_ONE, "policies/one.yaml": "policy: one\napplies_to: [pay]\n"
                                              "allow: [{field: input.secret, regex: \"(a+)+b\"}]\n"}
    root = build(tmp_path, files, TOOLS)
    argv = [FLOWCTL_EXE, "policy", "check", "pay", "--input", json.dumps({"secret": "a" * 60 + "!"}), "--db", "memory"]
    result = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "does not match /(a+)+b/ as a whole" in result.stdout
    h = Harness(root)
    assert h.run(input={"secret": "aaab"}).status == "failed"  # charge sends no secret: null does not match
    # a pattern RE2 cannot run is reported by validate, with the reason
    (root / "orchestration" / "policies" / "one.yaml").write_text(
        "policy: one\napplies_to: [pay]\nallow: [{field: input.secret, regex: \"(?=a)b\"}]\n")
    out = subprocess.run([FLOWCTL_EXE, "validate"], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "FC701" in out.stdout and "invalid perl operator" in out.stdout


def test_an_operand_that_evaluates_to_null_denies_equals(tmp_path):
    from flowctl.gate.policy import Gate

    files = {**RATE_ONE, "policies/one.yaml": "policy: one\napplies_to: [pay]\n"
                                              "allow: [{field: input.to, equals: {expr: run_input.approved_to}}]\n"}
    h = Harness(build(tmp_path, files, TOOLS))
    gate = Gate(h.project, h.store, h.clock)
    pay = h.project.resolve_tool("pay@^1")
    denied = gate.decide(pay, {"amount": 1}, run_input={}, record=False)
    assert denied.outcome == "deny" and "run_input.approved_to = null" in denied.reason
    assert gate.decide(pay, {"to": "a"}, run_input={"approved_to": "a"}, record=False).outcome == "allow"


def test_a_policy_regex_that_does_not_compile_is_a_located_error_and_the_gate_denies(tmp_path):
    import subprocess

    from flowctl.gate.policy import Gate
    from support.helpers import FLOWCTL_EXE

    files = {**RATE_ONE, "policies/one.yaml": "policy: one\napplies_to: [pay]\n"
                                              "allow:\n  - {field: input.to, regex: \"[a-\"}\n"}
    root = build(tmp_path, files, TOOLS)
    argv = [FLOWCTL_EXE, "policy", "check", "pay", "--input", '{"to": "a"}', "--db", "memory"]
    result = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout
    assert "policies/one.yaml:4:" in result.stderr + result.stdout and "FC701" in result.stderr + result.stdout
    h = Harness(root, check=False)
    denied = Gate(h.project, h.store, h.clock).decide(h.project.resolve_tool("pay@^1"), {"to": "a"}, record=False)
    assert denied.outcome == "deny" and "cannot be run (missing ]" in denied.reason


def test_a_gate_review_in_a_state_that_retries_every_error_does_not_spend_its_attempts(tmp_path):
    h = _charge_project(tmp_path, "allow: []\nreview_when: \"input.amount > `3`\"\n")  # retry: errors ["*"]
    paused = h.run(input={"amount": 4})
    assert paused.status == "paused" and "retry_scheduled" not in h.types(paused.run_id)
    assert sum(1 for t in h.types(paused.run_id) if t == "review_requested") == 1
    done = _approve(h, paused)
    assert done.status == "succeeded" and h.ledger() == [("pay", 4)]


def test_an_approval_covers_only_the_policy_whose_review_was_shown(tmp_path):
    files = {**effect_contract("pay", "pay"), **task("charge", "pay@^1", extra="input: {amount: input.amount}\n"),
             **_flow("charge", ("charge", "done", None)),
             "policies/big.yaml": "policy: big\napplies_to: [pay]\nallow: []\nreview_when: \"input.amount > `3`\"\n",
             "policies/odd.yaml": "policy: odd\napplies_to: [pay]\nallow: []\nreview_when: \"input.amount == `5`\"\n"}
    h = Harness(build(tmp_path, files, GATE2_TOOLS))
    paused = h.run(input={"amount": 5})
    assert paused.status == "paused" and paused.review["show"]["policy"] == "big"
    second = _approve(h, paused)  # odd's review_when holds too: its reviewer has not seen the call
    assert second.status == "paused" and second.review["show"]["policy"] == "odd" and h.ledger() == []
    assert _approve(h, second).status == "succeeded" and h.ledger() == [("pay", 5)]
    allowed = [e["data"] for e in h.events if e["type"] == "policy_decided" and e["data"]["outcome"] == "allow"]
    assert "approved in review (big, odd: review_when)" in allowed[-1]["reason"]


@pytest.mark.parametrize("broken, name", [
    # a policy that limits the call, with a typo'd key: dropped, it would leave only the open one
    ({"policies/capped.yaml": "policy: capped\napplies_to: [pay]\ndescripton: x\n"
                              "allow:\n  - {field: input.amount, range: [0, 10]}\n"}, "policies/capped.yaml"),
    # a newer version of the tool that does not load: the older one would run in its place
    ({"contracts/pay.v1.1.0.yaml": "id: pay\nversion: 1.1.0\nentrypoint: tk:pay\nowner: typo\n"}, "contracts/pay.v1.1.0.yaml"),
])
def test_a_flow_calling_tools_does_not_run_while_a_file_the_gate_reads_does_not_load(tmp_path, broken, name):
    from flowctl.errors import ProjectError

    files = {**effect_contract("pay", "pay"), **task("charge", "pay@^1", extra="input: {amount: input.amount}\n"),
             **_flow("charge", ("charge", "done", None)), **allow_all("pay"), **broken}
    with pytest.raises(ProjectError, match=f"a file the gate reads does not load: orchestration/{name}"):
        Harness(build(tmp_path, files, TOOLS)).run(input={"amount": 500})


SERVICE = """
import tk


class Service:
    def send(self, input, call):
        tk.LEDGER.append(("send", input.get("to")))
        return {"sent": True}


svc = Service()
"""


def test_a_helper_naming_a_gated_tools_function_is_fc705_and_refused_at_run_time_by_identity(tmp_path):
    from flowctl.errors import ProjectError

    # `look` is read-only, but its verify is pay's function under another module's name: verify
    # is called without the gate, so pay would run around its policy
    files = {**effect_contract("pay", "pay"), **allow_all("pay"),
             "tools/again.py": "from tk import pay as check_it\n",
             **contract("look", "verify_pay", extra="verify: again:check_it\n"),
             **task("peek", "look@^1"), **_flow("peek", ("peek", "done", None))}
    root = build(tmp_path, files, TOOLS)
    with pytest.raises(ProjectError, match=r"verify of look@1.0.0 \(again:check_it\) is the function of pay"):
        Harness(root).run()
    # validate --import-check finds it too, by identity (breaker finding: it passed validate)
    found = [d for d in problems(root, import_check=True) if d.code == "FC705"]
    assert [(d.line, "again:check_it is tk:pay, the function of pay@1.0.0" in d.message) for d in found] == [(4, True)]
    assert not [d for d in problems(root) if d.code == "FC705"]  # (without importing it cannot know)
    # written as the gated entrypoint itself, validate names it (FC705) without importing anything
    files["contracts/look.v1.0.0.yaml"] = files["contracts/look.v1.0.0.yaml"].replace("again:check_it", "tk:pay")
    diags = problems(build(tmp_path, files, TOOLS, name="q"))
    assert [(d.code, d.line) for d in diags if d.code == "FC705"] == [("FC705", 4)]


def test_a_re_exported_bound_method_is_the_same_function_to_the_gate(tmp_path):
    # svc.send is a new bound-method object on every access: the gate compares function and instance
    files = {"tools/service.py": SERVICE, "tools/alias.py": "from service import svc\n",
             "contracts/send.v1.0.0.yaml": "id: send\nversion: 1.0.0\nentrypoint: service:svc.send\nverify: tk:verify_pay\n"
                                           "compensate: tk:undo_pay\nside_effects:\n  - {type: email, target: smtp}\n",
             "contracts/sendalias.v1.0.0.yaml": "id: sendalias\nversion: 1.0.0\nentrypoint: alias:svc.send\n",
             **task("mail", "sendalias@^1", extra="input: {to: input.to}\n"), **_flow("mail", ("mail", "done", None))}
    h = Harness(build(tmp_path, files, TOOLS), check=False)  # past validate: the gate itself must hold
    result = h.run(input={"to": "x@example.com"})
    assert result.status == "failed" and result.error["type"] == "PolicyDenied", result.error
    assert h.ledger() == []
