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


def test_sigkill_mid_fan_out_then_resume_reruns_only_unfinished_children(tmp_path):
    root = write_project(tmp_path / "proj", FILES)
    env = dict(os.environ, CALLS=str(tmp_path / "calls.txt"), HANG_ON="c", HUNG=str(tmp_path / "hung"))
    env.pop("FLOWCTL_DEBUG", None)
    db = f"sqlite:///{tmp_path}/flowctl.db"
    items = ["a", "b", "c", "d", "e"]
    proc = subprocess.Popen([FLOWCTL_EXE, "run", "sweep", "--db", db, "-q", "--input", json.dumps({"items": items})],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "hung").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the fan-out never reached item c"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    runs = json.loads(subprocess.run([FLOWCTL_EXE, "runs", "--db", db, "--format", "json", "--flow", "sweep"], cwd=root,
                                     env=env, capture_output=True, text=True, timeout=120).stdout)
    (parent,) = runs
    resumed = subprocess.run([FLOWCTL_EXE, "resume", parent["id"], "--db", db, "--format", "json", "-q"], cwd=root,
                             env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads(resumed.stdout)["output"] == items  # every child output, in item order
    calls = (tmp_path / "calls.txt").read_text().split()
    assert calls == ["a", "b", "c", "c", "d", "e"]  # a and b finished before the kill: not run again
