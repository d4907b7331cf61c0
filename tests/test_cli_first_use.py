"""What a newcomer's first commands do: exit codes and messages scripts and people rely on.

Each test is a finding of a new user's trial: a run refused with exit 2 must have started
nothing; a cancel that left a side effect in place must not exit 0; the read commands on a project
that never ran report "nothing yet"; ``--db memory`` never suggests a resume that cannot work.
"""
from __future__ import annotations

import json
import os
import subprocess

from support.helpers import FLOWCTL_EXE, write_project

TOOLS = '''
LEDGER = []

def charge(input, call):
    LEDGER.append("charge")
    with open("ledger.txt", "a") as fh:
        fh.write("charge\\n")
    return {"ok": True}

def verify(input, output, call):
    return True

def undo(input, output, call):
    raise RuntimeError("the gateway refused the refund")
'''

FILES = {
    "tools/tk.py": TOOLS,
    "contracts/charge.v1.0.0.yaml": (
        "id: charge\nversion: 1.0.0\nentrypoint: tk:charge\nverify: tk:verify\ncompensate: tk:undo\n"
        "side_effects:\n  - {type: payment, target: card}\n"),
    "policies/allow_charge.yaml": "policy: allow_charge\napplies_to: [charge]\nallow: []\n",
    "states/pay.yaml": "id: pay\ntype: task\ntool: charge@^1\n",
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/f.yaml": ("flow: f\nstart: pay\ntransitions:\n  - {from: pay, to: ask}\n"
                           "  - {from: ask, to: done}\n"),
}


def _flowctl(cwd, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("FLOWCTL_DEBUG", "FLOWCTL_DB")}
    result = subprocess.run([FLOWCTL_EXE, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    return result.returncode, result.stdout + result.stderr


def test_a_run_refused_because_its_tool_does_not_import_starts_nothing(tmp_path):
    write_project(tmp_path, dict(FILES, **{"tools/tk.py": TOOLS + "\ndef broken(:\n"}))
    code, out = _flowctl(tmp_path, "run", "f")
    # a definition error, as validate finds it (exit 1), located in the tool code (new-user finding:
    # plain validate passed it, and the run said only "cannot import", exit 2)
    assert code == 1 and "the module does not compile: orchestration/tools/tk.py:" in out and "Traceback" not in out, out
    code, out = _flowctl(tmp_path, "runs", "--all")
    assert code == 0 and "no runs" in out, out  # nothing a later `recover` could complete
    assert not (tmp_path / "ledger.txt").exists()


def test_a_cancel_that_leaves_a_side_effect_in_place_exits_1(tmp_path):
    write_project(tmp_path, FILES)
    code, out = _flowctl(tmp_path, "run", "f")
    assert code == 3, out
    run_id = out.split("run ", 1)[1].split()[0]
    code, out = _flowctl(tmp_path, "cancel", run_id)
    assert code == 1, out
    assert "residue: charge@1.0.0 in 'pay' could not be undone" in out
    assert "1 side effect(s) could not be undone and are still in place" in out


def test_read_commands_on_a_project_that_never_ran_report_nothing_yet(tmp_path):
    write_project(tmp_path, FILES)
    assert _flowctl(tmp_path, "runs") == (0, "no runs (top-level; --all adds child runs)\n")
    code, out = _flowctl(tmp_path, "reviews")
    assert code == 0 and "no pending reviews" in out, out
    code, out = _flowctl(tmp_path, "stats")
    assert code == 0 and "runs: 0" in out, out
    code, out = _flowctl(tmp_path, "policy", "check", "charge", "--input", "{}")
    assert code == 0 and "allow" in out, out
    assert not (tmp_path / ".flowctl").exists()  # looking created no store
    code, out = _flowctl(tmp_path, "runs", "--db", f"sqlite:///{tmp_path}/typo.db")
    assert code == 2 and "no run store" in out, out  # a store named on purpose must exist


def test_a_paused_run_in_memory_says_it_cannot_be_resumed(tmp_path):
    write_project(tmp_path, FILES)
    code, out = _flowctl(tmp_path, "run", "f", "--db", "memory")
    assert code == 3, out
    assert "--db memory keeps nothing" in out and "flowctl resume" not in out, out


def test_a_number_too_large_for_a_float_is_refused_not_stored_as_infinity(tmp_path):
    write_project(tmp_path, FILES)
    code, out = _flowctl(tmp_path, "run", "f", "--db", "memory", "--input", '{"amount": 1e999}')
    assert code == 2 and "1e999 is too large for a number" in out, out


def test_a_store_that_cannot_be_opened_is_named_as_written_without_its_password(tmp_path):
    write_project(tmp_path, FILES)
    code, out = _flowctl(tmp_path, "runs", "--db", "postgresql://ops:hunter2@127.0.0.1:1/x")
    assert code == 2 and "cannot open store postgresql://ops@127.0.0.1:1/x" in out, out
    assert "hunter2" not in out and "+psycopg" not in out and "Traceback" not in out


def test_trace_of_a_run_cancelled_without_compensation_says_who_and_what_it_kept(tmp_path):
    write_project(tmp_path, FILES)
    code, out = _flowctl(tmp_path, "run", "f")
    assert code == 3, out
    run_id = out.split("run ", 1)[1].split()[0]
    code, out = _flowctl(tmp_path, "cancel", run_id, "--no-compensate", "--by", "carol")
    assert code == 0, out
    assert "cancelled at " in out and "error:" not in out, out  # the reason it stopped is not an error of cancel
    code, out = _flowctl(tmp_path, "trace", run_id)
    assert code == 0, out
    assert "cancelled by carol" in out
    assert "kept (not compensated): charge@1.0.0 of 'pay' (step 1); the run ended cancelled without undoing it" in out
    code, out = _flowctl(tmp_path, "trace", run_id, "--format", "json")
    assert json.loads(out)["run"]["kept"] == [{"tool": "charge@1.0.0", "state": "pay", "step": 1}]


MAP_FILES = {
    "states/each.yaml": "id: each\ntype: map\nflow: one\nitems: input.items\n",
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/refused.yaml": "id: refused\ntype: fail\nerror: Rejected\n",
    "transitions/one.yaml": ("flow: one\nstart: ask\ntransitions:\n"
                             "  - {from: ask, to: done, when: \"review.decision == 'approve'\"}\n  - {from: ask, to: refused}\n"),
    "transitions/batch.yaml": "flow: batch\nstart: each\ntransitions:\n  - {from: each, to: done}\n",
}


def test_resuming_a_child_run_says_how_its_parent_ended(tmp_path):
    write_project(tmp_path, MAP_FILES)
    code, out = _flowctl(tmp_path, "run", "batch", "--input", '{"items": [1]}')
    assert code == 3, out
    parent = out.split("run ", 1)[1].split()[0]
    resume = out.split("resume it with: ", 1)[1].splitlines()[0].replace("approve|reject", "reject").split()
    code, out = _flowctl(tmp_path, *resume[1:])
    assert code == 1, out  # the exit code is the resumed (child) run's
    assert f"parent run {parent} (batch): failed [BRANCH_FAILED]: 1 of 1 child runs of 'each' failed" in out


def test_an_exception_in_tool_code_is_located_in_the_progress_the_record_and_trace(tmp_path):
    write_project(tmp_path, {
        "tools/calc.py": "def score(input, call):\n    table = {}\n    return table['x']\n",
        "contracts/score.v1.0.0.yaml": "id: score\nversion: 1.0.0\nentrypoint: calc:score\n",
        "states/s.yaml": "id: s\ntype: task\ntool: score@^1\n",
        "states/done.yaml": "id: done\ntype: succeed\n",
        "transitions/f.yaml": "flow: f\nstart: s\ntransitions:\n  - {from: s, to: done}\n",
    })
    code, out = _flowctl(tmp_path, "run", "f")
    assert code == 1 and "raised at orchestration/tools/calc.py:3 in score" in out, out
    run_id = out.split("run ", 1)[1].split()[0]
    code, out = _flowctl(tmp_path, "audit", "log", run_id, "--format", "json")
    [failed] = [e for e in json.loads(out) if e["type"] == "tool_failed"]
    assert failed["data"]["at"] == "orchestration/tools/calc.py:3 in score"
    code, out = _flowctl(tmp_path, "trace", run_id)
    assert "#1 s: KeyError: 'x' (raised at orchestration/tools/calc.py:3 in score)" in out, out


def test_sigterm_interrupts_a_run_as_ctrl_c_does_saying_how_to_continue(tmp_path):
    import signal
    import time

    write_project(tmp_path, {
        "tools/slow.py": ("import pathlib, time\n\ndef nap(input, call):\n"
                          "    pathlib.Path('started').write_text('1')\n    time.sleep(60)\n    return {}\n"),
        "contracts/nap.v1.0.0.yaml": "id: nap\nversion: 1.0.0\nentrypoint: slow:nap\ntimeout: 90s\n",
        "states/n.yaml": "id: n\ntype: task\ntool: nap@^1\ntimeout: 90s\n",
        "states/done.yaml": "id: done\ntype: succeed\n",
        "transitions/g.yaml": "flow: g\nstart: n\ntransitions:\n  - {from: n, to: done}\n",
    })
    env = {k: v for k, v in os.environ.items() if k not in ("FLOWCTL_DEBUG", "FLOWCTL_DB")}
    proc = subprocess.Popen([FLOWCTL_EXE, "run", "g"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():  # the tool is running: the step is under way
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted: a run this command was driving keeps its last checkpoint; `flowctl recover` continues it" in err


def test_audit_log_says_when_it_cut_data_short_and_how_to_see_it_whole(tmp_path):
    write_project(tmp_path, dict(FILES, **{"states/pay.yaml": "id: pay\ntype: task\ntool: charge@^1\n"
                                                            "input: {note: input.note}\n"}))
    code, out = _flowctl(tmp_path, "run", "f", "--input", json.dumps({"note": "x" * 400}))
    assert code == 3, out
    run_id = out.split("run ", 1)[1].split()[0]
    code, out = _flowctl(tmp_path, "audit", "log", run_id)
    assert code == 0 and "…" in out
    assert "cut short, marked …; --format json shows every event whole" in out
    code, out = _flowctl(tmp_path, "reviews")
    assert "the token was printed once, by the process that paused the run" in out, out


def test_a_misspelt_flow_filter_is_named_not_silently_empty(tmp_path):
    write_project(tmp_path, FILES)
    code, out = _flowctl(tmp_path, "runs", "--flow", "g")
    assert code == 0 and "note: no flow 'g' in this project" in out, out
    for command in ("runs", "stats"):
        code, out = _flowctl(tmp_path, command, "--flow", "f")
        assert code == 0 and "note:" not in out and "error" not in out, out


def test_stats_of_a_flow_neither_defined_nor_run_is_a_usage_error_naming_the_close_one(tmp_path):
    # as `flowctl run` does: exit 2, "did you mean"; a flow with stored runs but no file still has figures
    write_project(tmp_path, FILES)
    code, out = _flowctl(tmp_path, "stats", "--flow", "ff")
    assert code == 2 and "[USAGE] no flow 'ff'" in out and "did you mean 'f'?" in out, out


def test_run_of_a_flow_with_definition_errors_exits_1_as_validate_does(tmp_path):
    write_project(tmp_path, dict(FILES, **{"states/done.yaml": "id: done\ntype: succeed\nzzz: 1\n"}))
    code, out = _flowctl(tmp_path, "validate")
    assert code == 1, out
    code, out = _flowctl(tmp_path, "run", "f")
    assert code == 1 and "[DEFINITION] flow 'f' has definition errors" in out, out
    write_project(tmp_path, dict(FILES, **{"transitions/f.yaml": "flow: f\nstart: [\n"}))
    code, out = _flowctl(tmp_path, "run", "f")
    assert code == 1 and "[DEFINITION]" in out, out


def test_a_worker_stopped_while_it_is_still_importing_exits_0(monkeypatch):
    """SIGTERM between flowctl's interrupt handler and the worker's own (its module still
    importing): the worker held nothing, so it stops with 0 as it does while starting, not 130."""
    import importlib

    import pytest

    from flowctl.cli import invoke

    real = importlib.import_module

    def interrupted(name, *a, **k):
        if name == "flowctl.cli.commands.worker":
            raise KeyboardInterrupt  # what the SIGTERM handler raises
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", interrupted)
    with pytest.raises(SystemExit) as stopped:
        invoke.call("worker")
    assert stopped.value.code == 0
    with pytest.raises(SystemExit) as other:  # any other command says how its run continues: 130
        monkeypatch.setattr(importlib, "import_module", lambda name, *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        invoke.call("run")
    assert other.value.code == 130


def test_a_run_without_input_whose_flow_requires_one_says_no_input_was_given(tmp_path):
    """(new-user finding: only "'order_id' is a required property", not that --input was missing)"""
    from flowctl.scaffold import init

    init(tmp_path, "basic")
    code, out = _flowctl(tmp_path, "run", "signup")
    assert code == 2 and "'email' is a required property" in out and "no --input was given" in out, out
