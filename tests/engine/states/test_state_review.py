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

