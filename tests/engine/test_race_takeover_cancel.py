"""A cancel request recorded while a worker held a run is carried out by whoever takes the run over.

The interleaving is injected through the store's own verbs, in the order it happens: the run's
process dies after its side effect (running, its owner gone), a worker leases it (``acquire``),
``flowctl cancel`` records a request for that worker (``request_cancel``), and the worker dies
before its next checkpoint: its lease ends (``release`` with the lease ending in the past). Then
``flowctl recover`` or ``flowctl resume`` takes the run over. SQLite and PostgreSQL.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from support.enginekit import allow_all, build, effect_contract
from support.pg import pg_url  # noqa: F401 - fixture

TOOLS = """
LEDGER = []
HOOKS = {}

def charge(input, call):
    LEDGER.append(("charge", call.run_id))
    return {"ok": True}

def verify_charge(input, output, call):
    return True

def undo_charge(input, output, call):
    LEDGER.append(("undo", call.run_id))

def stall(input, call):
    if HOOKS.pop("crash", None):
        raise KeyboardInterrupt  # the process dies here: the run stays running, its owner gone
    LEDGER.append(("stall", call.run_id))
    return {}
"""

FILES = {
    **effect_contract("charge", "charge"),
    **allow_all("charge"),
    "contracts/stall.v1.0.0.yaml": "id: stall\nversion: 1.0.0\nentrypoint: tk:stall\n",
    "states/charge.yaml": "id: charge\ntype: task\ntool: charge@^1\n",
    "states/stall.yaml": "id: stall\ntype: task\ntool: stall@^1\n",
    "transitions/stalled.yaml": "flow: stalled\nstart: charge\ntransitions:\n  - {from: charge, to: stall}\n"
                                "  - {from: stall, to: done}\n",
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/flowctl.db"
    return request.getfixturevalue("pg_url")


def _dead_owner() -> str:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"{os.uname().nodename}:{proc.pid}"


class Scene:
    def __init__(self, tmp_path, url):
        import flowctl
        from flowctl.engine.engine import Engine
        from flowctl.engine.tools import resolve
        from flowctl.store.sql import open_store

        root = build(tmp_path, FILES, TOOLS)
        self.store = open_store(url)
        self.engine = Engine(flowctl.load_project(root), self.store, check=False)  # recover/resume: this process
        self.root = root
        folder = str(root / "orchestration" / "tools")
        self.ledger, self.hooks = resolve("tk:LEDGER", folder), resolve("tk:HOOKS", folder)
        self.ledger.clear()
        self.hooks.clear()

    def cancel_asked_of_a_worker_that_died(self, compensate=True) -> str:
        import flowctl
        from flowctl.engine.engine import Engine

        dying = Engine(flowctl.load_project(self.root), self.store, check=False, owner=_dead_owner())
        self.hooks["crash"] = True
        with pytest.raises(KeyboardInterrupt):
            dying.run("stalled", {})
        (row,) = self.store.list_runs(status="running", limit=0)
        worker = _dead_owner()
        fence, _ = self.store.acquire(row["id"], row["last_seq"], worker, 60.0)
        assert self.store.request_cancel(row["id"], {"by": "ops", "compensate": compensate})  # the worker holds it
        assert self.store.release(row["id"], fence, delay=-1.0)  # the worker died: its lease has run out
        assert self.store.get_run(row["id"])["cancel_requested"]["by"] == "ops"
        return row["id"]

    def types(self, run_id):
        return [e["type"] for e in self.store.events(run_id)]


@pytest.mark.parametrize("take_over", ["recover", "resume"])
def test_a_run_whose_worker_died_with_a_cancel_request_is_cancelled_by_the_takeover(tmp_path, db_url, take_over):
    s = Scene(tmp_path, db_url)
    run_id = s.cancel_asked_of_a_worker_that_died()
    if take_over == "recover":
        (result,) = s.engine.recover()
    else:
        result = s.engine.resume(run_id)
    assert result.run_id == run_id and result.status == "cancelled", result
    assert "cancelled by ops" in result.error["message"]
    # the step after the charge never ran; the charge was undone once, as the request asked
    assert s.ledger == [("charge", run_id), ("undo", run_id)]
    row = s.store.get_run(run_id)
    assert row["status"] == "cancelled" and row["lease_until"] is None
    types = s.types(run_id)
    assert "run_cancelled" in types and "compensation_succeeded" in types and "run_succeeded" not in types
    # a second takeover finds nothing left to do
    assert s.engine.recover() == []
    assert s.engine.resume(run_id).status == "cancelled" and s.ledger.count(("undo", run_id)) == 1


def test_the_takeover_keeps_a_request_not_to_compensate(tmp_path, db_url):
    s = Scene(tmp_path, db_url)
    run_id = s.cancel_asked_of_a_worker_that_died(compensate=False)
    (result,) = s.engine.recover()
    assert result.status == "cancelled"
    assert s.ledger == [("charge", run_id)]  # cancelled, nothing undone: as the request said
    assert "compensation_succeeded" not in s.types(run_id)
