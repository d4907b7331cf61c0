"""A SIGKILL in the middle of a fan-out: `flowctl resume` re-runs only the unfinished children."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from support.helpers import FLOWCTL_EXE, write_project

TOOLS = '''
import os, time

def work(input, call):
    item = input["item"]
    with open(os.environ["CALLS"], "a") as f:
        f.write(item + "\\n")
    if item == os.environ.get("HANG_ON") and not os.path.exists(os.environ["HUNG"]):
        open(os.environ["HUNG"], "w").write("1")
        time.sleep(600)
    return {"item": item}
'''

FILES = {
    "contracts/work.v1.0.0.yaml": "id: work\nversion: 1.0.0\nentrypoint: fan:work\ntimeout: 20m\n",
    "states/w.yaml": "id: w\ntype: task\ntool: work@^1\ninput: {item: input.item}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/one.yaml": "flow: one\nstart: w\ntransitions:\n  - {from: w, to: done, set: {out: response.item}}\noutput: context.out\n",
    "states/all.yaml": "id: all\ntype: map\nitems: input.items\nflow: one\nitem_input: {item: item}\nmax_concurrency: 1\n",
    "transitions/sweep.yaml": "flow: sweep\nstart: all\ntransitions:\n  - {from: all, to: done, set: {out: response}}\noutput: context.out\n",
    "tools/fan.py": TOOLS,
}


def _kill_mid_fan_out(tmp_path):
    """Run ``sweep`` over a..e (one child at a time) and SIGKILL it inside item c's tool:
    ``(root, env, db)``; a and b have ended, c and the parent are left ``running``."""
    root = write_project(tmp_path / "proj", FILES)
    env = dict(os.environ, CALLS=str(tmp_path / "calls.txt"), HANG_ON="c", HUNG=str(tmp_path / "hung"))
    env.pop("FLOWCTL_DEBUG", None)
    db = f"sqlite:///{tmp_path}/flowctl.db"
    proc = subprocess.Popen([FLOWCTL_EXE, "run", "sweep", "--db", db, "-q", "--input", json.dumps({"items": ITEMS})],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "hung").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the fan-out never reached item c"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return root, env, db


def _flowctl(args, root, env):
    return subprocess.run([FLOWCTL_EXE, *args], cwd=root, env=env, capture_output=True, text=True, timeout=120)


ITEMS = ["a", "b", "c", "d", "e"]


def test_sigkill_mid_fan_out_then_resume_reruns_only_unfinished_children(tmp_path):
    root, env, db = _kill_mid_fan_out(tmp_path)
    (parent,) = json.loads(_flowctl(["runs", "--db", db, "--format", "json", "--flow", "sweep"], root, env).stdout)
    resumed = _flowctl(["resume", parent["id"], "--db", db, "--format", "json", "-q"], root, env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads(resumed.stdout)["output"] == ITEMS  # every child output, in item order
    calls = (tmp_path / "calls.txt").read_text().split()
    assert calls == ["a", "b", "c", "c", "d", "e"]  # a and b finished before the kill: not run again


def test_sigkill_mid_fan_out_then_recover_continues_the_parent_and_each_child_once(tmp_path):
    """(breaker finding: `flowctl recover` listed the parent and the hung child, continued the parent
    (which finished the child), then refused the child from its stale row as a RunConflict: exit 1)"""
    root, env, db = _kill_mid_fan_out(tmp_path)
    left = json.loads(_flowctl(["runs", "--all", "--status", "running", "--db", db, "--format", "json"], root, env).stdout)
    assert len(left) == 2  # the parent and child c
    recovered = _flowctl(["recover", "--db", db], root, env)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert "RUN_CONFLICT" not in recovered.stdout + recovered.stderr
    runs = json.loads(_flowctl(["runs", "--all", "--db", db, "--format", "json"], root, env).stdout)
    assert sorted(r["status"] for r in runs) == ["succeeded"] * 6
    assert (tmp_path / "calls.txt").read_text().split() == ["a", "b", "c", "c", "d", "e"]
    for run in runs:
        assert _flowctl(["audit", "verify", run["id"], "--db", db], root, env).returncode == 0


def test_a_child_another_live_process_drives_is_still_open_for_its_parent(tmp_path):
    """(breaker finding: the parent's fan-out counted a child held by a live process as failed —
    BranchFailed, compensation — while that child ran on and succeeded)"""
    import sqlite3

    root, env, db = _kill_mid_fan_out(tmp_path)
    (parent,) = json.loads(_flowctl(["runs", "--db", db, "--format", "json", "--flow", "sweep"], root, env).stdout)
    (held,) = [r for r in json.loads(_flowctl(["runs", "--all", "--status", "running", "--db", db, "--format", "json"],
                                              root, env).stdout) if r["id"] != parent["id"]]
    with sqlite3.connect(tmp_path / "flowctl.db") as conn:  # as if another host's process were driving it now
        conn.execute("UPDATE flowctl_runs SET owner = 'elsewhere:4242:1' WHERE id = ?", (held["id"],))
    waiting = _flowctl(["resume", parent["id"], "--db", db], root, env)
    assert waiting.returncode == 3, waiting.stdout + waiting.stderr  # parked: a child is still open
    row = json.loads(_flowctl(["runs", "--all", "--db", db, "--format", "json"], root, env).stdout)
    assert {r["id"]: r["status"] for r in row}[parent["id"]] == "waiting"
    assert "BRANCH_FAILED" not in waiting.stdout + waiting.stderr
    gone = dict(env, FLOWCTL_GONE_OWNERS="elsewhere:4242:1")  # that process is gone after all
    assert _flowctl(["recover", "--db", db], root, gone).returncode == 0
    runs = json.loads(_flowctl(["runs", "--all", "--db", db, "--format", "json"], root, env).stdout)
    assert sorted(r["status"] for r in runs) == ["succeeded"] * 6


# ----------------------------------------------------------------- killed while the fan-out failed
FAILING_TOOLS = '''
import os, time

def _ledger(line):
    with open(os.environ["LEDGER"], "a") as f:
        f.write(line + "\\n")

def pay(input, call):
    item = input["item"]
    if item == "x":  # fails once the others have paid and hang: its failure is the fan-out's
        while not all(os.path.exists(os.environ["HUNG"] + "-" + other) for other in ("a", "b")):
            time.sleep(0.01)
        raise RuntimeError("declined")
    _ledger("DO " + call.idempotency_key)
    open(os.environ["HUNG"] + "-" + item, "w").close()
    time.sleep(600)  # in flight when the process is killed

def verify(input, output, call):
    lines = open(os.environ["LEDGER"]).read().split()
    return {"paid": True} if call.idempotency_key in lines else False

def undo(input, output, call):
    _ledger("UNDO " + call.idempotency_key)
'''

FAILING = {
    "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: fx:pay\nverify: fx:verify\ncompensate: fx:undo\n"
                                 "timeout: 20m\nside_effects:\n  - {type: payment, target: bank}\n",
    "policies/pay.yaml": "policy: pay\napplies_to: [pay]\nallow: []\n",
    "states/p.yaml": "id: p\ntype: task\ntool: pay@^1\ninput: {item: input.item}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/one.yaml": "flow: one\nstart: p\ntransitions:\n  - {from: p, to: done}\n",
    "states/all.yaml": "id: all\ntype: map\nitems: input.items\nflow: one\nitem_input: {item: item}\nmax_concurrency: 3\n",
    "transitions/payall.yaml": "flow: payall\nstart: all\ntransitions:\n  - {from: all, to: done}\n",
    "tools/fx.py": FAILING_TOOLS,
}


def test_a_fan_out_killed_as_it_failed_is_recovered_with_every_effect_undone(tmp_path):
    """Children a and b paid and hang in flight; x then fails, so the fan-out fails; the process is
    killed. a and b were handed out after the parent's last checkpoint, so its plan does not name
    them. `flowctl recover` must find them, verify their payments and undo both (breaker finding:
    they were left for recover to finish on their own, their payments never undone, or the parent
    was refused as tampered and left running)."""
    root = write_project(tmp_path / "proj", FAILING)
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    env = dict(os.environ, LEDGER=str(ledger), HUNG=str(tmp_path / "hung"))
    env.pop("FLOWCTL_DEBUG", None)
    db = f"sqlite:///{tmp_path}/flowctl.db"
    proc = subprocess.Popen([FLOWCTL_EXE, "run", "payall", "--db", db, "-q", "--input", json.dumps({"items": ["x", "a", "b"]})],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60

    def x_failed():
        listed = _flowctl(["runs", "--all", "--status", "failed", "--db", db, "--format", "json"], root, env)
        return listed.returncode == 0 and any(r["flow"] == "one" for r in json.loads(listed.stdout or "[]"))

    while not x_failed():  # x's failure is committed; a and b are in flight
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "child x never failed"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    paid = ledger.read_text().split()
    assert sorted(paid[1::2]) and paid[0::2] == ["DO", "DO"]
    recovered = _flowctl(["recover", "--db", db], root, env)
    assert "RECORD_TAMPERED" not in recovered.stdout + recovered.stderr, recovered.stdout + recovered.stderr
    lines = ledger.read_text().splitlines()
    assert sorted(k for d, k in (ln.split() for ln in lines) if d == "UNDO") == sorted(paid[1::2]), lines
    runs = json.loads(_flowctl(["runs", "--all", "--db", db, "--format", "json"], root, env).stdout)
    assert {r["flow"]: r["status"] for r in runs if r["flow"] == "payall"} == {"payall": "failed"}
    assert not [r for r in runs if r["status"] not in ("succeeded", "failed", "cancelled")], runs
