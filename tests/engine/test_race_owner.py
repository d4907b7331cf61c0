"""A run's owner names a process instance (``host:pid:start``), not just a pid.

A process that died leaves its runs ``running`` under its owner; resume, recover and cancel take
them over once that owner is gone. A later process given the same pid (pid reuse, or pid 1 of a
pid namespace seen from outside it) is not that owner. The instances are real processes of this
test; a reused pid is injected as a live pid with a dead instance's start time.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from flowctl.engine.context import GONE_OWNERS_ENV, live_owner, process_owner
from support.enginekit import build

HOST = os.uname().nodename
ME = process_owner()

TOOLS = """
HOOKS = {}

def stall(input, call):
    if HOOKS.pop("crash", None):
        raise KeyboardInterrupt  # the process dies here: the run stays running under its owner
    return {"ok": True}
"""

FILES = {
    "contracts/stall.v1.0.0.yaml": "id: stall\nversion: 1.0.0\nentrypoint: tk:stall\n",
    "states/stall.yaml": "id: stall\ntype: task\ntool: stall@^1\n",
    "transitions/f.yaml": "flow: f\nstart: stall\ntransitions:\n  - {from: stall, to: done}\n",
}


def _dead_instance() -> str:
    """The owner string of a process that has exited (taken while it lived)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    owner = process_owner(proc.pid)
    proc.communicate(b"")
    return owner


def _reused(pid: int) -> str:
    """``pid`` (alive) as a dead instance's owner recorded it: the pid was given to another process."""
    start = _dead_instance().rsplit(":", 1)[1]
    return f"{HOST}:{pid}:{start}"


def test_the_owner_names_host_pid_and_start_time():
    host, pid, start = ME.rsplit(":", 2)
    assert host == HOST and pid == str(os.getpid()) and start.isdigit()
    assert live_owner(ME, "someone else") == ME and live_owner(ME, ME) is None


def test_a_live_pid_that_is_another_process_is_not_the_owner():
    dead = _dead_instance()
    assert live_owner(dead, ME) is None
    assert live_owner(_reused(os.getppid()), ME) is None  # the pid lives, as another process
    assert live_owner(_reused(1), ME) is None  # e.g. pid 1 of a pid namespace, seen from outside it


def test_an_older_owner_without_a_start_time_still_works_and_says_what_it_cannot_tell(monkeypatch):
    dead = _dead_instance().rsplit(":", 1)[0]
    assert live_owner(dead, ME) is None  # host:pid of a process that exited: gone, as before
    alive = f"{HOST}:{os.getppid()}"
    said = live_owner(alive, ME)
    assert said.startswith(alive) and "without its start time" in said
    monkeypatch.setenv(GONE_OWNERS_ENV, f"other:1, {alive}")  # the operator's way out
    assert live_owner(alive, ME) is None


def test_an_owner_on_another_host_counts_as_alive_and_says_why():
    assert "another host" in live_owner("elsewhere.example:123:456", ME)


@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare(1)")
def test_an_owner_inside_a_pid_namespace_is_alive_while_it_runs_and_gone_after():
    code = "import sys; print(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19], flush=True); sys.stdin.read()"
    proc = subprocess.Popen(["unshare", "-pf", "--mount-proc", sys.executable, "-c", code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    start = proc.stdout.readline().decode().strip()
    if not start.isdigit():
        proc.communicate(b"")
        pytest.skip("cannot make a pid namespace here")
    owner = f"{HOST}:1:{start}"  # what `unshare -pf --mount-proc flowctl run` records
    try:
        assert live_owner(owner, ME) == owner
    finally:
        proc.communicate(b"")
    assert live_owner(owner, ME) is None


def _orphan(tmp_path, owner):
    import flowctl
    from flowctl.engine.engine import Engine
    from flowctl.engine.tools import resolve
    from flowctl.store.sql import open_store

    root = build(tmp_path, FILES, TOOLS)
    store = open_store(f"sqlite:///{tmp_path}/flowctl.db")
    resolve("tk:HOOKS", str(root / "orchestration" / "tools"))["crash"] = True
    with pytest.raises(KeyboardInterrupt):
        Engine(flowctl.load_project(root), store, check=False, owner=owner).run("f", {})
    (row,) = store.list_runs(status="running", limit=0)
    return Engine(flowctl.load_project(root), store, check=False), row["id"]


def test_a_run_whose_owner_pid_was_reused_is_taken_over(tmp_path):
    engine, run_id = _orphan(tmp_path, _reused(os.getppid()))
    assert engine.resume(run_id).status == "succeeded"


def test_the_refusal_of_an_undecidable_owner_names_the_way_out(tmp_path, monkeypatch):
    from flowctl.errors import UsageError

    alive = f"{HOST}:{os.getppid()}"  # an older owner whose pid is alive
    engine, run_id = _orphan(tmp_path, alive)
    with pytest.raises(UsageError) as refused:
        engine.resume(run_id)
    assert "without its start time" in str(refused.value) and f"{GONE_OWNERS_ENV}={alive}" in refused.value.hint
    with pytest.raises(UsageError) as refused:
        engine.cancel(run_id)
    assert f"{GONE_OWNERS_ENV}={alive}" in refused.value.hint
    monkeypatch.setenv(GONE_OWNERS_ENV, alive)
    assert engine.resume(run_id).status == "succeeded"
