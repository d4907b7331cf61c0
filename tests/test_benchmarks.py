"""The benchmark harness computes what BENCHMARKS.md says it does (tiny sizes; a few seconds).

The verdict logic of the report, the fair floors (flowctl's compiled conditions, the one-statement
PostgreSQL floor), the store filler of the scaling benchmark and the child-process meter."""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from support.pg import pg_url  # noqa: F401 - fixture

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_map  # noqa: E402
import bench_scaling  # noqa: E402
import loop_flow  # noqa: E402
import report  # noqa: E402


# ----------------------------------------------------------------------------- verdicts
def test_verdicts_follow_the_direction_of_the_limit():
    assert report.target(1.4, 1.5)["met"] and not report.target(1.6, 1.5)["met"]
    assert report.target(1.5, 1.5)["met"]  # "<= limit" holds at the limit
    assert report.target(2.1, 2.0, higher_is_better=True)["met"]
    assert not report.target(1.9, 2.0, higher_is_better=True)["met"]
    assert report.target(True, True)["met"] and not report.target(False, True)["met"]


def test_a_measurement_that_ran_out_of_its_time_box_is_not_met_and_shows_its_bound():
    t = report.target(None, 10.0, unit="s", lower_bound=60.0)
    assert t["met"] is False
    assert report.fmt_value(t) == "> 60 s"
    assert not report.target(float("nan"), 10.0)["met"]


def test_the_table_lists_every_issue_17_target_in_order_and_marks_the_unmeasured():
    results = {"memory": {"targets": {"1. in-memory": report.target(4.0, 0.8, unit="x")}},
               "scaling": {"targets": {"5a. trace": report.target(None, 10.0, unit="s", lower_bound=60.0)}}}
    rows = report.collect(results)
    assert [n for n, *_ in rows] == [n for n, _ in report.ISSUE_17]
    found = {n: (part, t) for n, _, part, t in rows}
    assert found["1"][0] == "memory" and found["5a"][0] == "scaling" and found["2a"] == (None, None)
    lines = report.render_targets(results)
    row_1 = next(line for line in lines if line.startswith("| 1 |"))
    assert "4 x" in row_1 and "≤ 0.8" in row_1 and "**not met**" in row_1
    assert "> 60 s" in next(line for line in lines if line.startswith("| 5a |"))
    assert "not measured" in next(line for line in lines if line.startswith("| 2a |"))


def test_map_targets_use_the_largest_size_and_its_bound_when_it_timed_out():
    sizes = {"1000": {"items": 1000, "ms_per_item": 9.5},
             "10000": {"items": 10000, "ms_per_item": None, "timed_out_after_s": 180.0, "more_than_ms": 18.0}}
    t = bench_map._targets(sizes)
    per_item, flat = t["3a. map over 10,000 items on SQLite <= 2 ms per item"], t["3b. map flat in the item count"]
    assert not per_item["met"] and per_item["lower_bound"] == 18.0
    assert not flat["met"] and flat["lower_bound"] == pytest.approx(18.0 / 9.5)
    ok = bench_map._targets({"1000": {"items": 1000, "ms_per_item": 1.0}, "10000": {"items": 10000, "ms_per_item": 1.1}})
    assert all(x["met"] for x in ok.values())


# ----------------------------------------------------------------------------- fair floors
def test_floor_and_peers_use_flowctls_compiled_conditions():
    from flowctl.expr.expressions import compile_expr

    cond = loop_flow.CONDITIONS["a"]
    assert cond.__self__ is compile_expr("response.n > `0`")  # the engine's own compiled expression
    assert cond({"response": {"n": 1}}) is True and cond({"response": {"n": 0}}) is False
    assert loop_flow.drive(30) == {"n": 30}
    assert loop_flow.bare_loop(30) > 0


def test_psycopg_floor_makes_one_statement_per_step(pg_url):  # noqa: F811 - fixture
    import psycopg

    import bench_durable

    assert bench_durable.psycopg_floor(pg_url, 12) > 0
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*), max(seq) FROM steps").fetchone() == (12, 11)
        assert conn.execute("SELECT state, seq FROM runs").fetchone() == ("a", 11)  # 12 steps: 4 rounds back to a


def test_memory_trial_times_the_hash_chain(tmp_path):
    import bench_memory

    once = bench_memory.flowctl_factory(loop_flow.make_project(tmp_path, 9), 9)
    assert once() > 0  # asserts inside: the run succeeded and its row was read back sealed (last_hash set)


# ----------------------------------------------------------------------------- scaling pieces
def test_clone_runs_fills_a_store_the_store_can_list_and_find(tmp_path):
    import flowctl
    from flowctl.store.sql import open_store

    root = bench_scaling.seed_project(tmp_path / "p")
    path = str(tmp_path / "s.db")
    url = "sqlite:///" + path
    seeds = bench_scaling.run_seeds(flowctl.load_project(root), url, "loop", 2)
    ids = bench_scaling.clone_runs(path, seeds, 40, failed_every=10)
    assert len(set(ids)) == 40
    store = open_store(url)
    try:
        newest = store.list_runs(limit=5, top_level=True)
        # the copies are history: stamped one second apart, ending a second before the seeds were made
        assert [r["id"] for r in newest[:3]] == [seeds[1], seeds[0], ids[-1]]
        assert len(store.list_runs(status="failed", limit=0)) == 4
        assert store.get_run(ids[20][:14])["id"] == ids[20]
        assert [e["type"] for e in store.events(ids[3])] == [e["type"] for e in store.events(seeds[1])]
    finally:
        store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM flowctl_runs").fetchone()[0] == 42


def test_measure_child_reports_peak_rss_and_stops_at_the_time_box():
    big = bench_scaling.measure_child([sys.executable, "-c", "x = bytearray(80 * 2**20); x[::4096] = b'1' * len(x[::4096])"], 30)
    assert big["exit_code"] == 0 and big["peak_rss_mb"] >= 80
    stuck = bench_scaling.measure_child([sys.executable, "-c", "import time; time.sleep(30)"], 0.2)
    assert stuck["seconds"] is None and stuck["timed_out_after_s"] == 0.2


@pytest.mark.skipif(not (Path(__file__).resolve().parent.parent / ".git").exists(), reason="needs the git history")
def test_the_regression_part_runs_each_tree_in_its_own_interpreter(tmp_path):
    import bench_regression

    tree = bench_regression.extract("HEAD", tmp_path)
    assert (tree / "flowctl" / "__init__.py").is_file()
    data = bench_regression.run(base="HEAD", transitions=30, sqlite_transitions=30, trials=1)
    # each child checked that it imported its own tree (the guard raises otherwise), and timed a run
    for kind in ("memory", "sqlite"):
        assert data["results"][kind]["base"]["us_per_op"] > 0 and data["results"][kind]["head"]["us_per_op"] > 0
    assert set(data["targets"]) == {"16. In-memory step, this engine / the engine before the redesign",
                                    "16. SQLite step, this engine / the engine before the redesign"}
    assert "## The engine before and after the redesign (issue 16)" in "\n".join(report._render_regression(data))


def test_the_model_step_bench_reports_its_overhead_against_the_issue_18_target():
    pytest.importorskip("openai")
    pytest.importorskip("jinja2")
    import bench_model
    import run as bench_run

    assert bench_run.PARTS["model"] is bench_model.run and "model" in bench_run.QUICK and "model" in bench_run.FULL
    data = bench_model.run(delay=0.0, trials=2, zero_trials=2)
    [(name, t)] = data["targets"].items()
    assert name.startswith("18. ") and t["limit"] == 0.05
    assert t["value"] == pytest.approx((data["flowctl_llm_run_ms"] - data["direct_sdk_ms"]) / data["direct_sdk_ms"], rel=1e-3)
    assert data["direct_sdk_ms"] > 0 and data["instant_server"]["flowctl_llm_run_ms"] > 0


def test_a_part_measured_again_replaces_its_figures_in_latest_and_is_named_in_the_header(tmp_path, monkeypatch):
    import json

    import common
    import run

    shipped = json.loads((Path(run.RESULTS) / "latest.json").read_text())
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "latest.json").write_text(json.dumps(shipped))
    for module in (run, common):
        monkeypatch.setattr(module, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(run, "ROOT", tmp_path)
    again = dict(shipped["diff"], part_seconds=1.0, marker="measured again")
    partial = {"started": "2026-12-03T09:00:00Z", "code": {"commit": "abc1234", "runtime_uncommitted_changes": False},
               "sizes": {"diff": {"states": 7}}, "loadavg_start": [0.1, 0.2, 0.3], "loadavg_end": [0.4, 0.5, 0.6],
               "diff": again}
    run.update(partial, ["diff", "serve"])  # serve was asked for but failed in this run: its figures stay
    merged = json.loads((tmp_path / "results" / "latest.json").read_text())
    assert merged["diff"]["marker"] == "measured again" and merged["sizes"]["diff"] == {"states": 7}
    assert merged["serve"] == shipped["serve"]
    assert merged["remeasured"].get("serve") == shipped.get("remeasured", {}).get("serve")
    assert merged["remeasured"]["diff"]["code"]["commit"] == "abc1234"
    assert "Part `diff` measured again on its own" in (tmp_path / "BENCHMARKS.md").read_text()
