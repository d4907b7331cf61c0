"""Sessions (flowctl.server.sessions): flowctl calls a contract's tool for the caller through the
task path, every call recorded in the session run's audit log with who asked; compensate undoes
the calls newest first; a denial is an answer the agent reads, never a call."""
from __future__ import annotations

import contextlib

from click.testing import CliRunner

from flowctl.cli.main import main

AGENT = ("gate", "invoke:refund", "invoke:get_order", "invoke:wipe")


def ledger(api, name="LEDGER"):
    """The refund tool's list ``name``: LEDGER (what it did), KEYS (the key of each refund call)."""
    contract = api.project.resolve_tool("refund")
    fn = api.service.engine.tool_function(contract, "entrypoint", str(api.project.orchestration / "tools"))
    return fn.__globals__[name]


def open_session(api, h, name="ticket-1"):
    r = api.client.post("/v1/sessions", json={"name": name}, headers=h)
    assert r.status_code == 201, r.text
    return r.json()["session"]


def invoke(api, h, sid, tool, tool_input, **kw):
    r = api.client.post(f"/v1/sessions/{sid}/tools/{tool}/invoke", json={"input": tool_input, **kw}, headers=h)
    assert r.status_code == 200, r.text
    return r.json()


def events(api, sid):
    return api.store.events_page(sid, 0, 1000)


def test_invoke_runs_the_tool_through_the_gate_and_compensate_undoes_newest_first(api):
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    assert api.store.get_run(sid)["flow"] == "session:ticket-1"
    got = invoke(api, h, sid, "get_order", {"order_id": "o1"})
    assert got["status"] == "succeeded" and got["output"] == {"order_id": "o1", "total": 80}
    assert got["decision"]["rule"] == "read-only"
    for amount in (10, 20):
        got = invoke(api, h, sid, "refund", {"amount": amount, "card": "card-4111-zq"})
        assert got["status"] == "succeeded" and got["decision"] == {
            "decision": "allow", "policy": "refunds", "rule": "allow", "reason": "every check of refunds holds"}
    assert ledger(api)[-2:] == [("refund", 10), ("refund", 20)]
    evs = events(api, sid)
    entered = [e for e in evs if e["type"] == "state_entered"]
    assert [(e["state"], e["data"]["by"]) for e in entered] == [("get_order", "key:agent"), ("refund", "key:agent"),
                                                                ("refund", "key:agent")]
    types = [e["type"] for e in evs]
    assert types.count("policy_decided") == 2 and types.count("verify_passed") == 2
    # the contract's sensitive field is redacted from the record (a value no hash or id can hold by chance)
    assert "card-4111-zq" not in str(evs)

    r = api.client.post(f"/v1/sessions/{sid}/compensate", headers=h)
    assert r.status_code == 200 and r.json()["compensated"] == ["refund@1.0.0", "refund@1.0.0"]
    assert ledger(api)[-2:] == [("undo", 20), ("undo", 10)]  # newest first
    assert r.json()["status"] == "waiting"  # still open
    r = api.client.post(f"/v1/sessions/{sid}/close", headers=h)
    assert r.status_code == 200 and r.json()["calls"] == 3
    row = api.store.get_run(sid)
    assert row["status"] == "succeeded" and row["cursor"]["saga"] == []
    r = api.client.post(f"/v1/sessions/{sid}/tools/get_order/invoke", json={"input": {"order_id": "o"}}, headers=h)
    assert r.status_code == 409 and r.json()["code"] == "USAGE"


def test_the_session_is_a_run_trace_runs_and_audit_verify_read(api, tmp_path):
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    invoke(api, h, sid, "refund", {"amount": 5})
    invoke(api, h, sid, "wipe", {})
    db = ["--db", api.store.url, "--root", str(api.root)]
    out = CliRunner().invoke(main, ["trace", sid, *db])
    assert out.exit_code == 0, out.output
    assert "refund → wipe" in out.output and "deny" in out.output
    out = CliRunner().invoke(main, ["audit", "verify", sid, *db])
    assert out.exit_code == 0 and "intact" in out.output, out.output
    out = CliRunner().invoke(main, ["runs", *db])
    assert "session:ticket-1" in out.output and "waiting" in out.output


def test_a_denial_is_an_answer_with_the_decision_and_nothing_is_called(api):
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    before = list(ledger(api))
    wipe = invoke(api, h, sid, "wipe", {})
    assert wipe["status"] == "denied" and wipe["decision"]["rule"] == "default-deny"
    big = invoke(api, h, sid, "refund", {"amount": 500})
    assert big["status"] == "denied" and big["decision"]["rule"].startswith("allow[0]")
    bad = invoke(api, h, sid, "refund", {"amount": "ten"})
    assert bad["status"] == "denied" and bad["decision"]["rule"] == "input-schema"
    assert ledger(api) == before
    outcomes = [e["data"]["outcome"] for e in events(api, sid) if e["type"] == "policy_decided"]
    assert outcomes == ["deny", "deny", "deny"]


def test_a_sessions_calls_count_against_the_policies_rate_like_a_runs(api):
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    assert [invoke(api, h, sid, "refund", {"amount": a})["status"] for a in (1, 2, 3)] == [
        "succeeded", "succeeded", "denied"]
    third = invoke(api, h, sid, "refund", {"amount": 4})
    assert third["decision"]["rule"] == "rate"
    other = open_session(api, h, "ticket-2")  # rate per: run counts per session
    assert invoke(api, h, other, "refund", {"amount": 1})["status"] == "succeeded"


def test_who_may_act_in_a_session(api):
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    reader = api.key("reader", "gate", "invoke:get_order")
    r = api.client.post(f"/v1/sessions/{sid}/tools/refund/invoke", json={"input": {"amount": 1}}, headers=reader)
    assert r.status_code == 403 and "invoke:refund" in r.json()["detail"]
    r = api.client.post(f"/v1/sessions/{sid}/tools/get_order/invoke", json={"input": {"order_id": "x"}}, headers=reader)
    assert r.status_code == 403 and "opened by key:agent" in r.json()["detail"]  # not its session
    admin = api.key("root", "admin")
    assert invoke(api, admin, sid, "get_order", {"order_id": "x"})["status"] == "succeeded"
    r = api.client.post("/v1/sessions/no-such-run/compensate", headers=h)
    assert r.status_code == 404
    runs = api.service.engine.run("charge", {"amount": 1})
    r = api.client.post(f"/v1/sessions/{runs.run_id}/close", headers=admin)
    assert r.status_code == 404 and "not a session" in r.json()["detail"]


def test_the_callers_idempotency_key_is_the_calls_key(api):
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    got = invoke(api, h, sid, "get_order", {"order_id": "o1"}, idempotency_key="order-o1-lookup")
    assert got["idempotency_key"] == "key:agent:order-o1-lookup"  # in the caller's namespace
    again = invoke(api, h, sid, "get_order", {"order_id": "o1"}, idempotency_key="key:agent:order-o1-lookup")
    assert again["idempotency_key"] == "key:agent:order-o1-lookup"  # a key already in it is kept
    derived = invoke(api, h, sid, "get_order", {"order_id": "o1"})
    assert derived["idempotency_key"] == f"{sid}:get_order:3"  # <session>:<tool>:<n>


def test_a_caller_cannot_name_a_runs_key_and_take_its_effect_into_its_saga(api):
    """A tool deduplicates on the key and answers with the effect it names; a session's saga would
    take that effect as its own and its compensation undo it (breaker finding: a session passed
    another run's key and reversed that run's payment). The caller's key is its own namespace's."""
    h = api.key("agent", *AGENT)
    run = api.service.engine.run("charge", {"amount": 1})
    (state,) = [e["state"] for e in api.store.events(run.run_id) if e["type"] == "tool_invoked"]
    run_key = f"{run.run_id}:{state}:1"  # a run's key: <run>:<state>:<visit>, easily guessed
    keys = ledger(api, "KEYS")
    assert keys[-1] == run_key  # the run's own call
    sid = open_session(api, h)
    got = invoke(api, h, sid, "refund", {"amount": 1}, idempotency_key=run_key)
    assert got["status"] == "succeeded" and got["idempotency_key"] == f"key:agent:{run_key}"
    assert keys[-1] == f"key:agent:{run_key}"  # the tool never saw the run's key
    h2 = api.key("other", *AGENT)  # nor another caller's key
    theirs = invoke(api, h2, open_session(api, h2, name="ticket-2"), "refund", {"amount": 1},
                    idempotency_key=got["idempotency_key"])
    assert theirs["replayed"] is False and theirs["idempotency_key"] == f"key:other:key:agent:{run_key}"


def test_a_call_repeated_with_its_idempotency_key_answers_its_recorded_outcome_and_calls_nothing(api):
    """(new-user finding: the same invoke sent twice with the same idempotency_key sent two e-mails;
    an agent retrying after a lost answer must not repeat a side effect)"""
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    first = invoke(api, h, sid, "refund", {"amount": 10}, idempotency_key="ticket-1-refund")
    assert first["status"] == "succeeded" and first["replayed"] is False
    calls = len(ledger(api))
    again = invoke(api, h, sid, "refund", {"amount": 10}, idempotency_key="ticket-1-refund")
    assert len(ledger(api)) == calls  # the tool was not called again
    assert (again["status"], again["output"], again["replayed"]) == ("succeeded", first["output"], True)
    assert again["decision"]["rule"] == "idempotent-replay" and again["idempotency_key"] == "key:agent:ticket-1-refund"
    other = api.client.post(f"/v1/sessions/{sid}/tools/refund/invoke", headers=h,
                            json={"input": {"amount": 99}, "idempotency_key": "ticket-1-refund"})
    assert other.status_code == 422 and other.json()["pointer"] == "/body/idempotency_key", other.text
    assert len(ledger(api)) == calls
    assert invoke(api, h, sid, "refund", {"amount": 10}, idempotency_key="ticket-1-refund-2")["replayed"] is False


def test_only_the_server_acts_in_an_open_session_and_cancel_compensates_it(api):
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    invoke(api, h, sid, "refund", {"amount": 7})
    engine = api.service.engine
    assert sid not in [r.run_id for r in engine.recover()]  # recover leaves it alone
    out = CliRunner().invoke(main, ["resume", sid, "--db", api.store.url, "--root", str(api.root)])
    assert out.exit_code != 0 and "session" in out.output
    result = engine.cancel(sid, by="ops")
    assert result.status == "cancelled" and ledger(api)[-1] == ("undo", 7)
    assert api.store.get_run(sid)["cursor"]["saga"] == []


def held(api, h, sid, tool_input, **kw):
    r = api.client.post(f"/v1/sessions/{sid}/tools/refund/invoke", json={"input": tool_input, **kw}, headers=h)
    assert r.status_code == 202, r.text
    return r.json()


def decide(api, sid, decision, name="rev"):
    r = api.client.post(f"/v1/reviews/{sid}/decide", json={"decision": decision}, headers=api.key(name, "reviews"))
    assert r.status_code == 200, r.text
    return r.json()


def test_a_call_sent_to_review_waits_and_once_approved_its_repeat_runs_once(api):
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    before = list(ledger(api))
    first = held(api, h, sid, {"amount": 60}, idempotency_key="refund-60")
    review = first["review"]
    assert first["status"] == "review" and first["decision"]["rule"] == "review_when"
    assert review["id"] == sid and review["decisions"] == ["approve", "reject"] and review["deadline"] > 0
    assert f"/v1/reviews/{sid}/decide" in review["how"] and "token" not in str(first)
    assert first["idempotency_key"] == "key:agent:refund-60" and ledger(api) == before  # not called
    listed = api.client.get("/v1/reviews", headers=api.key("lister", "reviews")).json()
    assert [(i["run_id"], i["state"], i["show"]["input"]) for i in listed] == [(sid, "refund", {"amount": 60})]
    from flowctl.server.console.reviews import inbox

    assert [i["run_id"] for i in inbox(api.service)] == [sid]  # the console's inbox lists it too
    again = held(api, h, sid, {"amount": 60})  # asking again while it waits: the same review, nothing recorded
    assert again["review"] == review and again["seq"] == first["seq"]
    r = api.client.post(f"/v1/sessions/{sid}/tools/get_order/invoke", json={"input": {"order_id": "o"}}, headers=h)
    assert r.status_code == 409 and "waits for the review" in r.json()["detail"]

    assert decide(api, sid, "approve")["status"] == "waiting"
    assert api.client.get("/v1/reviews", headers=api.key("l2", "reviews")).json() == []
    done = invoke(api, h, sid, "refund", {"amount": 60}, idempotency_key="refund-60")
    assert done["status"] == "succeeded" and done["decision"]["rule"] == "review"
    assert done["idempotency_key"] == "key:agent:refund-60"
    assert ledger(api)[len(before):] == [("refund", 60)]  # run once
    assert held(api, h, sid, {"amount": 60})["status"] == "review"  # the approval was used up by that call
    assert ledger(api)[len(before):] == [("refund", 60)]
    evs = events(api, sid)
    decided = [e["data"] for e in evs if e["type"] == "review_decided"]
    assert [(d["decision"], d["by"]) for d in decided] == [("approve", "key:rev")]
    assert [e["type"] for e in evs].count("tool_invoked") == 1  # (its key is kept hashed: a sensitive session)
    assert [e["type"] for e in evs].count("review_requested") == 2


def test_a_rejected_call_is_a_403_on_its_repeat_and_nothing_is_called(api):
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    before = list(ledger(api))
    first = held(api, h, sid, {"amount": 70})
    decide(api, sid, "reject")
    r = api.client.post(f"/v1/sessions/{sid}/tools/refund/invoke", json={"input": {"amount": 70}}, headers=h)
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["code"] == "POLICY_DENIED" and "rejected in review by key:rev" in body["detail"]
    assert body["decision"]["rule"] == "review" and body["session"] == sid
    assert ledger(api) == before
    denied = [e["data"] for e in events(api, sid) if e["type"] == "policy_decided"]
    assert [(d["outcome"], d["rule"]) for d in denied] == [("review", "review_when"), ("deny", "review")]
    assert first["idempotency_key"] == f"{sid}:refund:1"
    assert held(api, h, sid, {"amount": 70})["status"] == "review"  # a new call of it: a new review


def test_a_review_undecided_by_its_deadline_denies_the_repeat(make_api):
    from flowctl.engine.clock import FakeClock

    api = make_api()
    clock = FakeClock(1_000_000.0)
    api.service.engine.clock = clock
    h = api.key("agent", *AGENT)
    sid = open_session(api, h)
    first = held(api, h, sid, {"amount": 80})
    clock.sleep(first["review"]["deadline"] - clock.time() + 1)
    r = api.client.post(f"/v1/sessions/{sid}/tools/refund/invoke", json={"input": {"amount": 80}}, headers=h)
    assert r.status_code == 403 and r.json()["decision"]["rule"] == "review_timeout", r.text
    assert api.store.get_run(sid)["status"] == "waiting"
    assert "review_timed_out" in [e["type"] for e in events(api, sid)]


def test_an_invoke_commits_before_and_after_the_tool_and_reads_none_of_its_own_events_back(tmp_path):
    """A side-effecting call under a rate-limited policy is three commits: the gate's admission
    (its row in the gate log, counted and written in one transaction), the ``started`` record before
    the tool and the outcome after it, the step row in each; the answer's decision comes from what
    the call itself recorded, not from reading the log back."""
    from conftest import Api
    from support.dbtrace import trace_sqlite

    with trace_sqlite() as counts:
        api = Api(tmp_path)
        try:
            h = api.key("agent", *AGENT)
            sid = open_session(api, h)
            before = counts.snapshot()
            start = len(counts.log)
            got = invoke(api, h, sid, "refund", {"amount": 10, "card": "4111"})
            after = counts.snapshot()
            sent = counts.log[start:]
        finally:
            api.close()
    assert got["status"] == "succeeded" and got["decision"]["rule"] == "allow"
    assert after["commits"] - before["commits"] == 3  # the gate's admission (its rate row), then the call's two
    steps = [s for s in sent if "flowctl_steps" in s]
    assert len(steps) == 2 and all(s.lstrip().upper().startswith("INSERT") for s in steps), steps
    assert not [s for s in sent if s.lstrip().upper().startswith("SELECT") and "flowctl_events" in s], sent



def test_a_call_that_fails_before_its_tool_runs_is_recorded_and_keeps_its_approval(tmp_path):
    """A contract whose idempotency_key reads ``run_input`` (which a session has not) fails each
    call after the gate allowed it, before the tool: the failure is in the session's audit log
    (``error_caught``, layer ``session``) with a message that says why, and a reviewer's approval
    is not spent on a call that was never made."""
    import textwrap

    import flowctl
    from conftest import Api
    from flowctl.server import create_app
    from support.enginekit import effect_contract
    from support.helpers import write_project
    from support.serverkit import FILES, TOOLS

    files = dict(FILES, **effect_contract("refund", "refund", extra=textwrap.dedent("""\
        idempotency_key: "join(':', ['refund', run_input.order])"
        input_schema: {type: object, required: [amount], properties: {amount: {type: number}}}
        """)))
    files["tools/tk.py"] = textwrap.dedent(TOOLS)
    api = Api(tmp_path)  # the store, then the app on the project above
    try:
        api.project = flowctl.load_project(write_project(tmp_path / "keyed", files))
        api.asgi = create_app(api.project, api.store)
        api.service = api.asgi.app.state.service
        api.client.asgi = api.asgi
        h = api.key("agent", *AGENT)
        sid = open_session(api, h)
        held(api, h, sid, {"amount": 60})
        decide(api, sid, "approve")
        for _ in range(2):  # the approval covers the call each time: no new review is asked for
            got = invoke(api, h, sid, "refund", {"amount": 60})
            assert got["status"] == "failed" and got["error"]["code"] == "EXPRESSION_ERROR", got
            assert "run_input is {}" in got["error"]["message"]
        assert ledger(api) == []
        caught = [e["data"] for e in events(api, sid) if e["type"] == "error_caught"]
        assert [(c["layer"], c["error"]["code"]) for c in caught] == [("session", "EXPRESSION_ERROR")] * 2
        assert [e["type"] for e in events(api, sid)].count("review_requested") == 1
    finally:
        api.close()


def test_an_invoke_answers_a_tool_s_error_and_output_redacted_as_the_session_records_them(tmp_path):
    """(breaker finding: a session's invoke answered the tool's error message as raised and its
    output redacted by field name only: a card number and a CVV the tool quoted came back in
    plaintext, though the session's audit log has them redacted)"""
    card = "4111-2222-3333-4444"
    with _declining_session(tmp_path) as (client, h, sid):
        said = []
        for decline in (True, False):
            r = client.post(f"/v1/sessions/{sid}/tools/refund/invoke", headers=h,
                            json={"input": {"card": card, "cvv": "737", "decline": decline}})
            assert r.status_code == 200, r.text
            said.append(r.json())
        failed, ok = said
        assert failed["status"] == "failed" and "declined" in failed["error"]["message"]
        assert ok["status"] == "succeeded" and "charged card" in ok["output"]["receipt"]
        for text in (failed["error"]["message"], ok["output"]["receipt"]):
            assert card not in text and "737" not in text, said


def test_compensate_answers_a_failed_undo_s_message_redacted(tmp_path):
    """(breaker finding: the residue compensate answered quoted the card and the CVV in plaintext)"""
    card = "4111-2222-3333-4444"
    with _declining_session(tmp_path) as (client, h, sid):
        called = client.post(f"/v1/sessions/{sid}/tools/refund/invoke", headers=h,
                             json={"input": {"card": card, "cvv": "737", "undo_fails": True}})
        assert called.json()["status"] == "succeeded", called.text
        r = client.post(f"/v1/sessions/{sid}/compensate", headers=h)
        (residue,) = r.json()["residue"]
        assert "cannot refund card" in residue["error"]
        assert card not in r.text and "737" not in residue["error"], r.text


def test_a_call_refused_by_the_input_schema_neither_answers_nor_records_the_secret_it_quotes(tmp_path):
    """(breaker finding: the input_schema's reason quoted the CVV, and the session answered it and
    recorded it in its audit log in plaintext — the input of a refused call was never learnt as a
    secret; POST /v1/gate/check redacted the same reason)"""
    import json

    import flowctl
    from flowctl.server import create_app
    from flowctl.store.apikeys import keys_of
    from flowctl.store.sql import open_store
    from server.conftest import _Client
    from support.serverkit import make_declining_project

    store = open_store(f"sqlite:///{tmp_path}/flowctl.db", create=True)
    try:
        client = _Client(create_app(flowctl.load_project(make_declining_project(tmp_path)), store))
        _, key = keys_of(store).create("agent", ["gate", "invoke:refund"])
        h = {"Authorization": f"Bearer {key}"}
        sid = client.post("/v1/sessions", json={"name": "s"}, headers=h).json()["session"]
        r = client.post(f"/v1/sessions/{sid}/tools/refund/invoke", headers=h,
                        json={"input": {"card": "4111-2222-3333-4444", "cvv": "73x"}})
        decision = r.json()["decision"]
        assert r.json()["status"] == "denied" and decision["rule"] == "input-schema", r.text
        assert "does not match" in decision["reason"] and "73x" not in r.text, r.text
        assert "73x" not in json.dumps([e["data"] for e in store.events(sid)])
    finally:
        store.close()


@contextlib.contextmanager
def _declining_session(tmp_path):
    """``(client, headers, session id)``: a session of key ``agent`` on the declining project
    (support.serverkit: a refund tool that quotes the card and the CVV in what it says)."""
    import flowctl
    from flowctl.server import create_app
    from flowctl.store.apikeys import keys_of
    from flowctl.store.sql import open_store
    from server.conftest import _Client
    from support.serverkit import make_declining_project

    store = open_store(f"sqlite:///{tmp_path}/flowctl.db", create=True)
    try:
        client = _Client(create_app(flowctl.load_project(make_declining_project(tmp_path)), store))
        _, key = keys_of(store).create("agent", ["gate", "invoke:refund"])
        h = {"Authorization": f"Bearer {key}"}
        yield client, h, client.post("/v1/sessions", json={"name": "s"}, headers=h).json()["session"]
    finally:
        store.close()
