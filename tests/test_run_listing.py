"""``flowctl runs``, ``stats`` and ``trace`` with child runs: top-level runs by default (``--all``
adds the children), ``stats --flow``, and the duration of parallel and map steps."""
from __future__ import annotations

import json

from support.helpers import write_project
from test_testing_replay import FANNED


def _recorded(tmp_path, run_flowctl):
    root = write_project(tmp_path / "p", FANNED)  # top: a parallel of [item, items (a map of 2 items)]
    db = f"sqlite:///{tmp_path}/runs.db"
    out = run_flowctl(["run", "top", "--input", "{}", "--db", db, "--format", "json"], root)
    assert out.returncode == 0, out.stdout + out.stderr
    return root, db, json.loads(out.stdout)["run_id"]


def test_runs_and_stats_count_top_level_runs_unless_asked_for_all(tmp_path, run_flowctl):
    root, db, run_id = _recorded(tmp_path, run_flowctl)
    listed = json.loads(run_flowctl(["runs", "--db", db, "--format", "json"], root).stdout)
    assert [r["id"] for r in listed] == [run_id]
    every = json.loads(run_flowctl(["runs", "--db", db, "--all", "--format", "json"], root).stdout)
    assert len(every) == 5 and sum(r["parent_id"] is None for r in every) == 1  # 2 branches, 2 map items
    assert run_id in run_flowctl(["runs", "--db", db], root).stdout
    stats = json.loads(run_flowctl(["stats", "--db", db, "--format", "json"], root).stdout)
    assert (stats["runs"], stats["by_status"], stats["tools"]) == (1, {"succeeded": 1}, {})  # the parent calls no tool
    every = json.loads(run_flowctl(["stats", "--db", db, "--all", "--format", "json"], root).stdout)
    assert every["runs"] == 5 and every["tools"]["look@1.0.0"]["calls"] == 3
    items = json.loads(run_flowctl(["stats", "--db", db, "--all", "--flow", "item", "--format", "json"], root).stdout)
    assert items["runs"] == 3 and items["by_status"] == {"succeeded": 3}
    text = run_flowctl(["stats", "--db", db, "--flow", "top"], root).stdout
    assert text.startswith("runs: 1 (flow top, top-level runs)")


def test_trace_shows_how_long_parallel_and_map_steps_took(tmp_path, run_flowctl):
    root, db, run_id = _recorded(tmp_path, run_flowctl)
    data = json.loads(run_flowctl(["trace", run_id, "--db", db, "--format", "json"], root).stdout)
    (pair,) = [s for s in data["steps"] if s["state"] == "pair"]
    started = next(e["ts"] for e in data["events"] if e["type"] == "fanout_started")
    finished = next(e["ts"] for e in data["events"] if e["type"] == "fanout_finished")
    assert pair["duration_ms"] > 0 and abs(pair["duration_ms"] - (finished - started) * 1000) < 1e-6
    every = json.loads(run_flowctl(["runs", "--db", db, "--all", "--flow", "items", "--format", "json"], root).stdout)
    (items,) = every
    inner = json.loads(run_flowctl(["trace", items["id"], "--db", db, "--format", "json"], root).stdout)
    (each,) = [s for s in inner["steps"] if s["state"] == "each"]
    assert each["type"] == "map" and each["duration_ms"] > 0
