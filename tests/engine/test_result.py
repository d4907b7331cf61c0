"""What a caller gets back (flowctl.engine.result): the exit code of each status, a result read
back from the store, and run ids that sort by the time the run started."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build
from support.engineflows import SAGA, TOOLS, flow, linear, saga_states
from flowctl.engine.clock import FakeClock
from flowctl.engine.result import RunResult, new_run_id, result_from_row


@pytest.mark.parametrize("status, code", [("succeeded", 0), ("failed", 1), ("cancelled", 1), ("paused", 3),
                                          ("waiting", 3), ("running", 3), ("queued", 1)])
def test_exit_code_per_status(status, code):
    assert RunResult("r", "f", status).exit_code == code


def test_the_result_read_back_from_the_store_is_the_one_the_run_returned(tmp_path):
    root = build(tmp_path, {**SAGA, **saga_states(2, last_extra=", undo_fails: '`true`'"),
                            "states/x.yaml": "id: x\ntype: task\ntool: boom@1.0.0\n",
                            **flow("p1", linear("p1", "p2", "x"))}, TOOLS)
    h = Harness(root)
    result = h.run()
    assert result.status == "failed" and result.residue
    again = result_from_row(h.store.get_run(result.run_id))
    assert (again.run_id, again.flow, again.status, again.error) == (result.run_id, "f", "failed", result.error)
    assert (again.path, again.residue, again.steps) == (["p1", "p2", "x"], result.residue, 3)
    assert again.exit_code == 1 and again.review is None


def test_run_ids_sort_by_start_time():
    clock = FakeClock()
    started_ms = int(clock.time() * 1000)
    ids = []
    for _ in range(3):
        ids.append(new_run_id(clock))
        clock.advance(0.002)
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert all(len(i) == 24 and int(i, 16) >= 0 for i in ids)
    assert ids[0][:12] == f"{started_ms:012x}"  # 12 hex digits of milliseconds, then random ones
