"""flowctl.cli.main: the one error handler — output failures, closed descriptors and option ranges are a
clear one-line error with exit 2, never a traceback or an "internal error"."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowctl.cli.main import main
from support.helpers import FLOWCTL_EXE

REPO = Path(__file__).resolve().parents[1]


def _flowctl(args, *, stdout, preexec_fn=None, cwd=REPO):
    env = {k: v for k, v in os.environ.items() if k != "FLOWCTL_DEBUG"}
    return subprocess.run([FLOWCTL_EXE, *args], cwd=str(cwd), stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=120, env=env, preexec_fn=preexec_fn)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["validate", "--format", "sarif"], ["graph", "order_return"], ["schema", "state"]])
def test_output_that_cannot_be_written_is_a_one_line_error_exit_2(args):
    with open("/dev/full", "w") as full:
        done = _flowctl(args, stdout=full)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: [OUTPUT] cannot write {done.stderr.split('cannot write ')[1].strip()}"]
    assert "No space left on device" in done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def test_a_closed_standard_output_is_refused_before_anything_runs(tmp_path):
    db = tmp_path / "x.db"
    done = _flowctl(["runs", "--db", f"sqlite:///{db}"], stdout=None, preexec_fn=lambda: os.close(1))
    assert done.returncode == 2
    assert done.stderr.strip() == "error: [OUTPUT] standard output is closed: nothing can be written; flowctl did nothing"
    assert not db.exists()


@pytest.mark.parametrize("priority", ["-99999999999999999999", "2147483648", "-2147483649"])
def test_submit_priority_out_of_the_stored_range_is_a_usage_error(tmp_path, priority):
    db = tmp_path / "x.db"
    result = CliRunner().invoke(main, ["submit", "outbound_report", "--input", '{"to": ["a@example.com"]}', "--root",
                                       str(REPO), "--db", f"sqlite:///{db}", "--priority", priority])
    assert result.exit_code == 2
    assert "Invalid value for '--priority'" in result.output and "-2147483648<=x<=2147483647" in result.output
    assert not db.exists()


@pytest.mark.parametrize("head", ["garbage", "3", "3:abc", "x:" + "a" * 64, "-1:" + "a" * 64, "3:" + "g" * 64])
def test_audit_verify_expect_head_that_is_not_seq_hash_is_a_usage_error(tmp_path, head):
    result = CliRunner().invoke(main, ["audit", "verify", "R1", "--root", str(REPO), "--db", f"sqlite:///{tmp_path}/x.db",
                                       "--expect-head", head])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--expect-head'" in result.output and "is not SEQ:HASH" in result.output


def test_progress_names_the_run_of_lines_from_another_run_fired_before_the_new_one():
    """(new-user finding: `flowctl run` fired an unrelated run's due review timeout first, and its
    '→ rejected (fail, step 3)' read as the start of the new run)"""
    import io

    from flowctl.cli.commands._common import Progress

    out = io.StringIO()
    progress = Progress(out)
    entered = {"type": "state_entered", "state": "rejected", "run_id": "01a2b3c4d5e6f7a8", "attempt": 1,
               "data": {"type": "fail", "step": 3}}
    with progress.naming_runs():
        progress(entered)
    progress(dict(entered, run_id="ffff0000", state="start", data={"type": "task", "step": 1}))
    assert out.getvalue().splitlines() == ["[earlier run 01a2b3c4d5e6] → rejected (fail, step 3)",
                                           "→ start (task, step 1)"]


def test_progress_tells_a_timed_out_call_verify_found_done_from_a_crash():
    """(new-user finding: after a timeout it said the call 'was in flight when its process stopped')"""
    import io

    from flowctl.cli.commands._common import Progress

    out = io.StringIO()
    progress = Progress(out)
    ev = {"type": "step_recovered", "state": "charge", "run_id": "r1", "attempt": 1,
          "data": {"tool": "charge@1.0.0", "after": "timeout", "happened": True, "action": "in the saga"}}
    progress(ev)
    progress(dict(ev, data={"tool": "charge@1.0.0", "happened": True}))
    assert out.getvalue().splitlines() == [
        "    charge@1.0.0 timed out; verify says it had happened (in the saga)",
        "    charge@1.0.0 was in flight when its process stopped: verify says it had happened (not called again)"]


def test_progress_does_not_say_verify_denied_an_effect_when_verify_could_not_answer():
    """(new-user finding: a verify that raised TypeError was shown as 'verify says it had not happened')"""
    import io

    from flowctl.cli.commands._common import Progress

    out = io.StringIO()
    progress = Progress(out)
    failed = {"type": "verify_failed", "state": "pay", "run_id": "r1", "attempt": 1,
              "data": {"tool": "pay@1.0.0", "error": "TypeError", "message": "verify raised, so the effect counts "
                       "as not happened: 'NoneType' object is not subscriptable"}}
    recovered = {"type": "step_recovered", "state": "pay", "run_id": "r1", "attempt": 1,
                 "data": {"tool": "pay@1.0.0", "after": "timeout", "happened": False, "action": "nothing to undo"}}
    progress(failed)
    progress(recovered)
    progress(recovered)  # a later verify that answered: its own words again
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("    verify of pay@1.0.0 could not answer: TypeError: verify raised")
    assert lines[1:] == ["    pay@1.0.0 timed out; verify could not tell, so it counts as not happened",
                         "    pay@1.0.0 timed out; verify says it had not happened"]


def test_a_run_whose_error_holds_a_lone_surrogate_is_shown_by_every_command(tmp_path):
    """(breaker finding: the run was stored, but `run`, `runs --format json`, `trace`, `audit log`
    and `events` all ended in an internal error: UTF-8 cannot encode the surrogate)"""
    import json

    from support.enginekit import build, contract, task
    from support.engineflows import flow, linear

    root = build(tmp_path, {**contract("odd", "odd"), **task("t", "odd@1.0.0"), **flow("t", linear("t"))},
                 'def odd(input, call):\n    raise RuntimeError("x\\udc80y")\n')
    db = ["--db", f"sqlite:///{tmp_path}/runs.db", "--root", str(root)]
    ran = _flowctl(["run", "f", *db], stdout=subprocess.PIPE)
    assert ran.returncode == 1, ran.stderr  # the run failed; the command did not
    assert "internal error" not in ran.stderr and "x\\udc80y" in ran.stdout + ran.stderr
    listed = _flowctl(["runs", "--format", "json", *db], stdout=subprocess.PIPE)
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)  # valid JSON: the escape is the JSON escape of the same text
    assert run["error"]["message"].endswith("x\udc80y")
    for args in (["trace", run["id"]], ["audit", "log", run["id"]], ["events", "--since", "1h"]):
        shown = _flowctl([*args, *db], stdout=subprocess.PIPE)
        assert shown.returncode == 0 and "internal error" not in shown.stderr, (args, shown.stderr)


def test_run_input_nested_past_the_limit_is_a_usage_error_not_an_internal_one(tmp_path):
    """(breaker finding: 500 deep was an internal RecursionError; 350 deep was stored, and then
    `audit verify` crashed on it)"""
    from support.enginekit import build, contract, task
    from support.engineflows import flow, linear

    root = build(tmp_path, {**contract("ok", "ok"), **task("t", "ok@1.0.0"), **flow("t", linear("t"))},
                 'def ok(input, call):\n    return {}\n')
    db = ["--db", f"sqlite:///{tmp_path}/runs.db", "--root", str(root)]
    for depth in (150, 500):
        (tmp_path / "in.json").write_text('{"x": ' + "[" * depth + "]" * depth + "}")
        ran = _flowctl(["run", "f", "--input", f"@{tmp_path / 'in.json'}", *db], stdout=subprocess.PIPE)
        assert ran.returncode == 2, ran.stderr
        assert "[USAGE] run input at /x/0/0" in ran.stderr and "more than 100 levels deep" in ran.stderr
        assert "internal error" not in ran.stderr


def test_a_param_nested_too_deeply_is_a_usage_error():
    """(breaker finding: an internal RecursionError in run, submit and policy check)"""
    from flowctl.cli.commands._common import parse_params
    from flowctl.errors import UsageError

    with pytest.raises(UsageError, match="--param p: the JSON nests too deeply"):
        parse_params(["p=" + "[" * 5000 + "]" * 5000], None)
