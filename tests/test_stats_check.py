"""``flowctl stats --check`` and ``--format prometheus`` (issue 21, items 2 and 3): the defence
rates against their thresholds, an exit code cron and CI can act on, and a scrape that parses."""
from __future__ import annotations

import subprocess

import pytest

import flowctl
from flowctl.engine.clock import FakeClock
from flowctl.store.sql import open_store
from support.enginekit import allow_all, build, effect_contract, task
from support.helpers import FLOWCTL_EXE

TOOLS = """
def pay(input, call):
    return {"ok": True}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    raise RuntimeError("the gateway refused the refund")

def boom(input, call):
    raise RuntimeError("later step failed")
"""

FILES = {**effect_contract("pay", "pay"), **allow_all("pay"),
         "contracts/boom.v1.0.0.yaml": "id: boom\nversion: 1.0.0\nentrypoint: tk:boom\n",
         **task("charge", "pay@^1"), **task("explode", "boom@^1"),
         "transitions/f.yaml": "flow: f\nstart: charge\ntransitions:\n  - {from: charge, to: explode}\n"
                               "  - {from: explode, to: done}\n"}


def _project(tmp_path, extra=None):
    root = build(tmp_path, {**FILES, **(extra or {})}, TOOLS)
    db = f"sqlite:///{tmp_path}/runs.db"
    engine = flowctl.Engine(flowctl.load_project(root), open_store(db), clock=FakeClock(), max_inline_wait=10.0)
    result = engine.run("f", {})
    assert result.status == "failed" and result.residue  # the undo failed: rollback failure rate 100%
    return root, db


def _stats(root, db, *args):
    return subprocess.run([FLOWCTL_EXE, "stats", "--db", db, *args], cwd=root, capture_output=True, text=True,
                          timeout=60)


def test_check_exits_1_and_names_each_breached_rate(tmp_path):
    root, db = _project(tmp_path)
    done = _stats(root, db, "--check")
    assert done.returncode == 1, done.stderr
    assert "breached: rollback_failure_rate 100.0% > 1.0% (1 of 1)" in done.stderr
    assert "pause_timeout_rate" not in done.stderr  # no review: undefined, not breached
    assert "rollback_failure_rate: 100.0% (threshold 1%; 1 of 1)  OVER" in done.stdout


def test_a_project_threshold_raises_the_bar(tmp_path):
    root, db = _project(tmp_path, {"project.yaml": "thresholds:\n  rollback_failure_rate: 1.0\n"})
    done = _stats(root, db, "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_unknown_threshold_name_is_a_clear_error_not_a_traceback(tmp_path):
    root, db = _project(tmp_path, {"project.yaml": "thresholds:\n  rollback_rate: 0.5\n"})
    done = _stats(root, db, "--check")
    assert done.returncode == 2 and "unknown rate 'rollback_rate'" in done.stderr and "Traceback" not in done.stderr


def test_without_check_stats_exits_0_whatever_the_rates(tmp_path):
    root, db = _project(tmp_path)
    assert _stats(root, db).returncode == 0


def test_the_prometheus_format_parses_with_prometheus_clients_parser(tmp_path):
    parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is not installed")
    root, db = _project(tmp_path)
    done = _stats(root, db, "--format", "prometheus")
    assert done.returncode == 0, done.stderr
    families = {f.name: f for f in parser.text_string_to_metric_families(done.stdout)}
    runs = {s.labels["status"]: s.value for s in families["flowctl_runs"].samples}
    assert runs == {"failed": 1.0}
    defence = {s.labels["rate"]: s.value for s in families["flowctl_defence_ratio"].samples}
    assert defence["rollback_failure_rate"] == 1.0
    calls = {s.labels["tool"]: s.value for s in families["flowctl_tool_calls"].samples}
    assert calls["pay@1.0.0"] == 1.0


def test_bucket_adds_each_tools_calls_per_interval_and_a_bad_width_is_a_usage_error(tmp_path):
    import json

    root, db = _project(tmp_path)
    done = _stats(root, db, "--bucket", "1h", "--format", "json")
    assert done.returncode == 0, done.stderr
    buckets = json.loads(done.stdout)["buckets"]
    assert buckets["pay@1.0.0"][0]["calls"] == 1 and buckets["boom@1.0.0"][0]["failures"] == 1
    assert all(b["start"] % 3600 == 0 for rows in buckets.values() for b in rows)
    text = _stats(root, db, "--bucket", "1h")
    assert text.returncode == 0 and "pay@1.0.0 per bucket:" in text.stdout and "1 calls, 0 failed" in text.stdout
    bad = _stats(root, db, "--bucket", "soon")
    assert bad.returncode == 2 and "--bucket 'soon'" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("args, named", [
    (["stats", "--bucket", ""], "--bucket ''"),
    (["stats", "--limit", "9" * 20], "--limit"),
    (["runs", "--limit", "9" * 20], "--limit"),
    (["stats", "--since", "9" * 20 + "d"], "more than 36500d ago"),
    (["policy", "report", "--since", "9" * 20 + "d"], "more than 36500d ago"),
])
def test_an_empty_or_out_of_range_option_is_a_usage_error_not_an_internal_one(tmp_path, args, named):
    root, db = _project(tmp_path)
    done = subprocess.run([FLOWCTL_EXE, *args, "--db", db], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert named in done.stderr and "internal error" not in done.stderr and "Traceback" not in done.stderr
