"""The lean step (flowctl.engine.lean): from the second visit of a plain task state, one plan runs
its whole step. It must record exactly what the general step records, and refuse, retry and fail
exactly as it does: every case below runs both ways (the lean step switched off by making
``lean_step`` find none) on the memory store and on SQLite, and the stored events (text and hash
chain), the checkpoint, the run row's seal and the result must be the same — and the lean step
must actually have been taken."""
from __future__ import annotations

import time

import pytest

from flowctl.engine import lean
from support.enginekit import Harness, build, contract, sqlite_store, task
from support.engineflows import STEP_TOOLS as TOOLS, flow


#: mode -> extra state YAML, extra transitions, whether the run succeeds
CASES = {
    "ok": ("", None, True),
    "raise": ("", None, False),
    "bad_output": ("", None, False),
    "slow": ("", None, False),
    "text": ("", None, True),
    "nested": ("", None, True),
    "mutate": ("", None, True),
    "unicode": ("", None, True),
    "bad_input": ("", None, False),
    "flaky": ("retry:\n  - {errors: [ConnectionError], max_attempts: 3, interval: 1s, backoff: 2}\n", None, True),
    "retry_exhausted": ("retry:\n  - {errors: ['*'], max_attempts: 2, interval: 1s}\n", None, False),
    "retry_parks": ("retry:\n  - {errors: ['*'], max_attempts: 3, interval: 60s}\n", None, None),
    "max_visits": ("", "max_visits", False),
    "no_match": ("", "no_match", False),
    "dotted_set": ("", "dotted_set", True),
    "recorded": ("", "recorded", True),
    "after_error": ("", "after_error", True),
}


def _transitions(kind):
    if kind == "no_match":  # response.n == 3 matches no transition
        return ("  - {from: a, to: a, when: 'response.n < `3`', set: {n: response.n}}\n"
                "  - {from: a, to: done, when: 'response.n > `3`'}\n")
    if kind == "dotted_set":
        return ("  - {from: a, to: a, when: 'response.n < `4`', set: {n: response.n, deep.seen: response.n}}\n"
                "  - {from: a, to: done}\n")
    if kind == "recorded":  # now() in a set: the value drawn is recorded on transition_taken
        return ("  - {from: a, to: a, when: 'response.n < `4`', set: {n: response.n, at: 'now()'}}\n"
                "  - {from: a, to: done}\n")
    if kind == "after_error":  # b fails once and its handler goes back to a: a's lean step sees the error
        return ("  - {from: a, to: b, when: 'response.n == `2` && context.failed != `true`', set: {n: response.n, failed: '`true`'}}\n"
                "  - {from: a, to: a, when: 'response.n < `4`', set: {n: response.n, last_error: error.type}}\n"
                "  - {from: a, to: done}\n  - {from: b, to: done}\n")
    return ("  - {from: a, to: a, when: 'response.n < `4`', set: {n: response.n}}\n"
            "  - {from: a, to: done}\n")


#: the input reads every part of the scope a step changes, so a scope out of date shows in the record
INPUT = ("input: {n: context.n, mode: \"'%s'\", prev: response.n, seen: visits.a, attempt: state.attempt, "
         "err: error.type}\n")


def _project(tmp_path, mode):
    extra, kind, _ = CASES[mode]
    schema = ("input_schema: {type: object, properties: {n: {maximum: 1}}}\n" if mode == "bad_input"
              else "input_schema: {type: object}\n")
    tool_mode = "flaky" if mode in ("flaky", "retry_exhausted", "retry_parks") else mode
    if mode in ("retry_exhausted", "retry_parks"):
        tool_mode = "raise"
    files = {**contract("step", "step", extra=schema + "output_schema: {type: object, required: [n]}\n"),
             **task("a", "step@1.0.0", extra=INPUT % tool_mode + "timeout: 100ms\n"
                                              + extra + "on_error:\n  - {errors: ['*'], goto: failed}\n"),
             **task("b", "step@1.0.0", extra="input: {mode: \"'raise'\", n: '`2`'}\non_error:\n  - {errors: ['*'], goto: a}\n"),
             "states/failed.yaml": "id: failed\ntype: fail\nerror: Failed\n",
             **flow("a", _transitions(kind), extra="limits: {max_visits: 2}\n" if kind == "max_visits" else "")}
    return build(tmp_path, files, TOOLS, name=f"p-{mode}")


def _run(tmp_path, monkeypatch, mode, *, use_lean: bool, store_kind: str):
    taken = []
    with monkeypatch.context() as m:
        m.setattr(time, "perf_counter", lambda: 7.0)  # durations of 0 ms either way
        real_run = lean.run
        m.setattr(lean, "run", lambda ctx, step: taken.append(step.sid) or real_run(ctx, step))
        if not use_lean:
            m.setattr(lean, "lean_step", lambda ctx, state: None)
        where = tmp_path / ("lean" if use_lean else "general")
        where.mkdir(parents=True, exist_ok=True)
        store = sqlite_store(where) if store_kind == "sqlite" else None
        h = Harness(_project(where, mode), store=store, check=False)
        if mode == "recorded":
            import uuid

            m.setattr(h.clock, "now", lambda: __import__("datetime").datetime(2026, 1, 1,
                                                                               tzinfo=__import__("datetime").timezone.utc))
            m.setattr(uuid, "uuid4", lambda: uuid.UUID(int=7))
        result = h.run("f", {}, run_id="run-1")
        events = [(e["seq"], e["type"], e["state"], e["attempt"], e["data_json"], e["hash"])
                  for e in h.store.events(result.run_id)]
        row = h.store.get_run(result.run_id)
    return result, events, row, h.events, taken


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize("mode", list(CASES))
def test_the_lean_step_records_and_fails_exactly_as_the_general_step(tmp_path, monkeypatch, mode, store_kind):
    got, events, row, seen, taken = _run(tmp_path, monkeypatch, mode, use_lean=True, store_kind=store_kind)
    want, events_general, row_general, seen_general, none = _run(tmp_path, monkeypatch, mode, use_lean=False,
                                                                 store_kind=store_kind)
    assert none == []
    assert taken, "the lean step was never taken"
    assert events == events_general
    assert row["cursor"] == row_general["cursor"] and row["last_hash"] == row_general["last_hash"]
    assert row.get("seal") == row_general.get("seal")
    assert (got.status, got.error, got.steps, got.path) == (want.status, want.error, want.steps, want.path)
    assert [(e["type"], e["data"]) for e in seen] == [(e["type"], e["data"]) for e in seen_general]
    succeeds = CASES[mode][2]
    if succeeds is None:
        assert got.status == "waiting"
    else:
        assert got.status == ("succeeded" if succeeds else "failed")


def test_a_retried_call_after_a_lean_first_attempt_counts_its_attempts(tmp_path, monkeypatch):
    got, events, row, seen, taken = _run(tmp_path, monkeypatch, "flaky", use_lean=True, store_kind="memory")
    assert got.status == "succeeded"
    scheduled = [e["data"] for e in seen if e["type"] == "retry_scheduled"]
    assert [(d["next_attempt"], d["delay_s"]) for d in scheduled] == [(2, 1.0), (3, 2.0)]
    invoked = [e["attempt"] for e in seen if e["type"] == "tool_invoked" and e["data"]["input"]["n"] == 2]
    assert invoked == [1, 2, 3]


def test_the_lean_step_is_taken_from_the_second_visit_and_not_for_a_gated_or_secret_run(tmp_path, monkeypatch):
    _, _, _, _, taken = _run(tmp_path, monkeypatch, "ok", use_lean=True, store_kind="memory")
    assert taken == ["a", "a", "a"]  # four visits of a: the first asks the gate and makes the plan
    from flowctl.engine import calls

    monkeypatch.setattr(calls, "guarded", lambda ctx, contract, fn: ((), True))  # every call gated
    _, _, _, _, taken = _run(tmp_path / "gated", monkeypatch, "ok", use_lean=True, store_kind="memory")
    assert taken == []


def test_a_tool_changing_its_input_changes_neither_the_record_nor_the_run(tmp_path, monkeypatch):
    _, _, row, seen, taken = _run(tmp_path, monkeypatch, "mutate", use_lean=True, store_kind="memory")
    assert taken
    invoked = [e for e in seen if e["type"] == "tool_invoked"]
    assert [e["data"]["input"]["n"] for e in invoked] == [None, 1, 2, 3]
    assert row["cursor"]["context"] == {"n": 3}


def test_a_state_entered_after_a_caught_error_sees_it_in_the_lean_step(tmp_path, monkeypatch):
    got, _, row, seen, taken = _run(tmp_path, monkeypatch, "after_error", use_lean=True, store_kind="memory")
    assert got.status == "succeeded" and taken
    inputs = [e["data"]["input"] for e in seen if e["type"] == "tool_invoked" and e["state"] == "a"]
    assert [i["err"] for i in inputs] == [None, None, "ValueError", None]
    assert row["cursor"]["context"]["last_error"] == "ValueError"  # the error stays in scope until a completes


def test_the_runs_of_an_engine_share_the_plans_so_a_later_run_is_lean_from_its_first_visit(tmp_path, monkeypatch):
    taken = []
    real_run = lean.run
    monkeypatch.setattr(lean, "run", lambda ctx, step: taken.append(step.sid) or real_run(ctx, step))
    monkeypatch.setattr(time, "perf_counter", lambda: 7.0)  # durations of 0 ms in both runs
    h = Harness(_project(tmp_path, "ok"), check=False)
    first = h.run("f", {})
    assert taken == ["a", "a", "a"]  # the first visit of the first run asks the gate and makes the plan
    taken.clear()
    second = h.run("f", {})
    assert taken == ["a", "a", "a", "a"] and second.status == first.status == "succeeded"
    a, b = (h.store.events(r.run_id) for r in (first, second))
    assert [(e["type"], e["data"]) for e in a[1:]] == [
        (e["type"], e["data"] if e["type"] != "tool_invoked" else
         dict(e["data"], idempotency_key=e["data"]["idempotency_key"].replace(second.run_id, first.run_id)))
        for e in b[1:]]


def test_two_flows_through_the_same_state_keep_their_own_transitions(tmp_path):
    """The plans are shared per flow: the same state leaves by another transition in another flow."""
    files = {**contract("step", "step", extra="input_schema: {type: object}\noutput_schema: {type: object}\n"),
             **task("a", "step@1.0.0", extra="input: {n: context.n}\n"),
             "states/failed.yaml": "id: failed\ntype: fail\nerror: Failed\n",
             **flow("a", "  - {from: a, to: a, when: 'response.n < `3`', set: {n: response.n}}\n  - {from: a, to: done}\n"),
             "transitions/g.yaml": "flow: g\nstart: a\ntransitions:\n"
                                   "  - {from: a, to: a, when: 'response.n < `2`', set: {n: response.n}}\n"
                                   "  - {from: a, to: failed}\n"}
    h = Harness(build(tmp_path, files, TOOLS, name="two"), check=False)
    for _ in range(2):  # in both orders, with the plans of the other flow made
        assert h.run("f", {}).path == ["a", "a", "a", "done"]
        assert h.run("g", {}).path == ["a", "a", "failed"]


def test_a_when_that_does_not_compile_fails_the_step_where_the_general_step_fails_it(tmp_path, monkeypatch):
    """(breaker finding: with the plans shared, a later run's first visit took the lean step, which
    compiled the transitions before entering the state: the error came before the call)"""
    monkeypatch.setattr(time, "perf_counter", lambda: 7.0)
    files = {**contract("step", "step", extra="input_schema: {type: object}\n"),
             **task("a", "step@1.0.0", extra="input: {n: context.n}\n"),
             **flow("a", "  - {from: a, to: done, when: 'response.n +'}\n")}
    records = {}
    for use_lean in (True, False):
        with monkeypatch.context() as m:
            if not use_lean:
                m.setattr(lean, "lean_step", lambda ctx, state: None)
            h = Harness(build(tmp_path / str(use_lean), files, TOOLS, name="bad"), check=False)
            runs = [h.run("f", {}, run_id=f"r{i}") for i in (1, 2)]
            records[use_lean] = [[(e["type"], e["data_json"]) for e in h.store.events(r.run_id)] for r in runs]
            assert [r.status for r in runs] == ["failed", "failed"] and runs[1].steps == 1
    assert records[True] == records[False]
    assert [t for t, _ in records[True][1]][:4] == ["run_started", "state_entered", "tool_invoked", "tool_succeeded"]
