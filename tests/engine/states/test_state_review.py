"""``type: review`` (flowctl.engine.states.review): the run pauses with a one-time token and what
``show`` builds from the scope; the decision (with its data) is read by the transitions; a review
undecided by its ``timeout`` takes ``on_timeout``. (Tokens, reminders and reissue are tested in
tests/test_review_policy.py and tests/test_gate.py.)"""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build
from support.engineflows import TOOLS, flow

ASK = "id: ask\ntype: review\ndecisions: [approve, reject]\nshow: {amount: input.amount}\n"
ROUTE = ("  - {from: ask, to: done, when: \"review.decision == 'approve'\", set: {note: review.data.note, by: review.by}}\n"
         "  - {from: ask, to: no}\n")
NO = "id: no\ntype: fail\nerror: Rejected\n"


def test_the_decision_and_its_data_are_read_by_the_transitions(tmp_path):
    h = Harness(build(tmp_path, {"states/ask.yaml": ASK, "states/no.yaml": NO, **flow("ask", ROUTE)}, TOOLS))
    paused = h.run(input={"amount": 5})
    assert paused.status == "paused" and paused.path == ["ask"]
    assert paused.review["state"] == "ask" and paused.review["show"] == {"amount": 5}
    done = h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve", data={"note": "ok"},
                           by="ann")
    assert done.status == "succeeded" and done.output == {"note": "ok", "by": "ann"}
    paused = h.run(input={"amount": 6})
    rejected = h.engine.resume(paused.run_id, token=paused.review["token"], decision="reject")
    assert rejected.error["code"] == "Rejected" and rejected.path == ["ask", "no"]


@pytest.mark.parametrize("on_timeout, status, last, code", [
    ("{goto: late}", "succeeded", "done", None),
    ("{fail: Review.Late}", "failed", "ask", "Review.Late"),
    (None, "failed", "ask", "REVIEW_TIMEOUT"),
])
def test_a_review_undecided_by_its_timeout_takes_on_timeout(tmp_path, on_timeout, status, last, code):
    ask = ASK + "timeout: 1h\n" + (f"on_timeout: {on_timeout}\n" if on_timeout else "")
    late = {"states/late.yaml": "id: late\ntype: pass\nset: {why: error.code}\n"} if code is None else {}
    h = Harness(build(tmp_path, {"states/ask.yaml": ask, "states/no.yaml": NO, **late,
                                 **flow("ask", ROUTE + ("  - {from: late, to: done}\n" if late else ""))}, TOOLS))
    paused = h.run(input={"amount": 5})
    h.clock.advance(1800)
    assert h.engine.recover() == []  # not due yet: it stays paused
    h.clock.advance(1801)
    (result,) = h.engine.recover()
    assert result.status == status and result.path[-1] == last
    if code is None:
        assert result.output == {"why": "REVIEW_TIMEOUT"} and result.path == ["ask", "late", "done"]
    else:
        assert result.error["code"] == code
    assert "review_timed_out" in h.types(paused.run_id)



ASK_DATA = ASK + ("data_schema:\n  type: object\n  required: [amount]\n  additionalProperties: false\n"
                  "  properties:\n    amount: {type: number, maximum: 100}\n    note: {type: string}\n")
ROUTE_DATA = "  - {from: ask, to: done, set: {amount: review.data.amount}}\n"


@pytest.mark.parametrize("data, pointer, why", [
    ({"amount": 500}, "/amount", "500 is greater than the maximum of 100"),
    ({"amount": "5"}, "/amount", "'5' is not of type 'number'"),
    ({"amount": 5, "extra": 1}, "/", "Additional properties are not allowed"),
    (None, "/", "'amount' is a required property"),  # no data is checked as {}
])
def test_data_its_data_schema_rejects_is_refused_saying_where_and_nothing_is_recorded(tmp_path, data, pointer, why):
    from flowctl.errors import ReviewDataInvalid

    h = Harness(build(tmp_path, {"states/ask.yaml": ASK_DATA, **flow("ask", ROUTE_DATA)}, TOOLS))
    paused = h.run(input={"amount": 5})
    before = h.store.get_run(paused.run_id)
    with pytest.raises(ReviewDataInvalid, match=why) as caught:
        h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve", data=data, by="ann")
    assert caught.value.pointer == pointer and caught.value.code == "REVIEW_DATA_INVALID"
    assert "data_schema of review 'ask'" in str(caught.value) and "ask.yaml:" in caught.value.hint
    after = h.store.get_run(paused.run_id)
    assert after["status"] == "paused" and after["last_seq"] == before["last_seq"]  # nothing recorded
    done = h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve",
                           data={"amount": 7.5}, by="ann")  # the token still works
    assert done.status == "succeeded" and done.output == {"amount": 7.5}


def test_check_decision_checks_without_recording_and_gives_the_data_a_decision_would_record(tmp_path):
    from flowctl.errors import ReviewDataInvalid, UsageError

    h = Harness(build(tmp_path, {"states/ask.yaml": ASK_DATA.replace("required: [amount]", "required: []"),
                                 **flow("ask", ROUTE_DATA)}, TOOLS))
    paused = h.run(input={"amount": 5})
    seq = h.store.get_run(paused.run_id)["last_seq"]
    assert h.engine.check_decision(paused.run_id, "approve", None) == {}  # recorded as {} with a schema
    with pytest.raises(ReviewDataInvalid):
        h.engine.check_decision(paused.run_id, "approve", {"amount": 1000})
    with pytest.raises(UsageError, match="not one of approve, reject"):
        h.engine.check_decision(paused.run_id, "maybe", {})
    assert h.store.get_run(paused.run_id)["last_seq"] == seq
    done = h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    decided = [e["data"] for e in h.store.events(paused.run_id) if e["type"] == "review_decided"]
    assert done.status == "succeeded" and decided[0]["data"] == {}


def test_flowctl_resume_with_bad_data_exits_2_naming_where_and_records_nothing(tmp_path, run_flowctl):
    import json

    root = build(tmp_path, {"states/ask.yaml": ASK_DATA, **flow("ask", ROUTE_DATA)}, TOOLS)
    started = run_flowctl(["run", "f", "--input", '{"amount": 5}', "--format", "json"], root)
    paused = json.loads(started.stdout)
    token = paused["review"]["token"]
    bad = run_flowctl(["resume", paused["run_id"], "--token", token, "--decision", "approve",
                       "--data", '{"amount": 500}'], root)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "REVIEW_DATA_INVALID" in bad.stderr and "at /amount: 500 is greater than the maximum of 100" in bad.stderr
    good = run_flowctl(["resume", paused["run_id"], "--token", token, "--decision", "approve",
                        "--data", '{"amount": 50}', "--format", "json"], root)
    assert good.returncode == 0 and json.loads(good.stdout)["output"] == {"amount": 50}


@pytest.mark.parametrize("ask", [ASK, ASK_DATA], ids=["no schema", "a schema with a maximum"])
@pytest.mark.parametrize("data, pointer, why", [
    ({"amount": float("nan")}, "/amount", "NaN is not JSON"),
    ({"amount": 5, "note": "\ud800"}, "/note", "lone surrogate"),
    ({"amount": float("inf")}, "/amount", "Infinity is not JSON"),
])
def test_data_json_cannot_hold_is_refused_on_every_review_and_nothing_is_recorded(tmp_path, ask, data, pointer, why):
    # (break-it: NaN passed minimum/maximum, a lone surrogate was recorded and broke every later read)
    from flowctl.errors import ReviewDataInvalid

    h = Harness(build(tmp_path, {"states/ask.yaml": ask, **flow("ask", ROUTE_DATA)}, TOOLS))
    paused = h.run(input={"amount": 5})
    seq = h.store.get_run(paused.run_id)["last_seq"]
    for decide in (lambda: h.engine.check_decision(paused.run_id, "approve", data),
                   lambda: h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve", data=data)):
        with pytest.raises(ReviewDataInvalid, match=why) as caught:
            decide()
        assert caught.value.pointer == pointer and caught.value.hint
    assert h.store.get_run(paused.run_id)["last_seq"] == seq and h.store.get_run(paused.run_id)["status"] == "paused"
    done = h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve", data={"amount": 5})
    assert done.status == "succeeded"
