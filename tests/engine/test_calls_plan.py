"""A state's step plan (flowctl.engine.calls.StepPlan) and the plain call it allows: from the second
call of a read-only, ungated state in a run, :func:`calls.call_plain` does the call. It must record
exactly what the general path records, and refuse and fail exactly as it does: every case below is
run both ways (the plain call switched off by making every contract count as gated for the plan)
and the stored events, the checkpoint and the result must be the same."""
from __future__ import annotations

import time

import pytest

from flowctl.engine import calls
from support.enginekit import Harness, build, contract, task
from support.engineflows import STEP_TOOLS as TOOLS, flow


CASES = ["ok", "raise", "bad_output", "slow", "text", "nested", "mutate", "bad_input"]


def _project(tmp_path, mode):
    schema = ("input_schema: {type: object, properties: {n: {maximum: 1}}}\n" if mode == "bad_input"
              else "input_schema: {type: object}\n")
    files = {**contract("step", "step", extra=schema + "output_schema: {type: object, required: [n]}\n"),
             **task("a", "step@1.0.0", extra=f"input: {{n: context.n, mode: \"'{mode}'\"}}\ntimeout: 100ms\n"
                                              "on_error:\n  - {errors: ['*'], goto: failed}\n"),
             "states/failed.yaml": "id: failed\ntype: fail\nerror: Failed\n",
             **flow("a", "  - {from: a, to: a, when: 'response.n < `4`', set: {n: response.n}}\n"
                         "  - {from: a, to: done}\n")}
    return build(tmp_path, files, TOOLS, name=f"p-{mode}")


def _run(tmp_path, monkeypatch, mode, plain: bool):
    with monkeypatch.context() as m:
        m.setattr(time, "perf_counter", lambda: 7.0)  # durations of 0 ms either way
        if not plain:
            m.setattr(calls, "guarded", lambda ctx, contract, fn: ((), True))
        h = Harness(_project(tmp_path / ("plain" if plain else "general"), mode), check=False)
        result = h.run("f", {}, run_id="run-1")
        events = [(e["seq"], e["type"], e["state"], e["attempt"], e["data_json"], e["hash"])
                  for e in h.store.events(result.run_id)]
        row = h.store.get_run(result.run_id)
    return result, events, row, h.events


@pytest.mark.parametrize("mode", CASES)
def test_a_plain_call_records_and_fails_exactly_as_the_general_path(tmp_path, monkeypatch, mode):
    got, events, row, seen = _run(tmp_path, monkeypatch, mode, plain=True)
    want, events_general, row_general, seen_general = _run(tmp_path, monkeypatch, mode, plain=False)
    assert events == events_general
    assert row["cursor"] == row_general["cursor"] and row["last_hash"] == row_general["last_hash"]
    assert (got.status, got.error, got.steps) == (want.status, want.error, want.steps)
    assert [e["type"] for e in seen] == [e["type"] for e in seen_general]  # the listener sees the same
    if mode in ("ok", "text", "nested", "mutate"):
        assert got.status == "succeeded"
    else:
        assert got.status == "failed"
        caught = [e for e in seen if e["type"] == "error_caught"]
        assert caught and caught[0]["data"]["error"]["type"] == {
            "raise": "ValueError", "bad_output": "SchemaMismatch", "slow": "ToolTimeout",
            "bad_input": "SchemaMismatch"}[mode]


def test_the_plain_call_is_taken_from_the_second_call_and_not_for_a_gated_tool(tmp_path, monkeypatch):
    taken = []
    real = calls.call_plain
    monkeypatch.setattr(calls, "call_plain", lambda ctx, state, p, attempt, *rest: taken.append(state.id)
                        or real(ctx, state, p, attempt, *rest))
    h = Harness(_project(tmp_path / "p", "ok"), check=False)
    assert h.run("f", {}).status == "succeeded"
    assert taken == ["a", "a", "a"]  # four calls of a: the first asks the gate and makes the plan
    monkeypatch.setattr(calls, "guarded", lambda ctx, contract, fn: ((), True))
    taken.clear()
    h = Harness(_project(tmp_path / "q", "ok"), check=False)
    assert h.run("f", {}).status == "succeeded" and taken == []


def test_a_tool_changing_its_input_changes_neither_the_record_nor_the_run(tmp_path, monkeypatch):
    result, events, row, seen = _run(tmp_path, monkeypatch, "mutate", plain=True)
    invoked = [e for e in seen if e["type"] == "tool_invoked"]
    assert [e["data"]["input"]["n"] for e in invoked] == [None, 1, 2, 3]
    assert row["cursor"]["context"] == {"n": 3}  # the last response (4) ends the loop: no set
