"""Commands racing on one run: cancel against resume, recover and another cancel.

Whoever wins the run's next conditional commit owns the run, and a cancel compensates only once
it owns it. Each interleaving is injected deterministically: a store wrapper runs the competing
command just before the cancel's first commit (the competitor commits first), or the compensate
tool runs it (the cancel owns the run already). The competitor is another Engine with its own
store connection and another owner, as another process would be. SQLite and PostgreSQL.
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

def _hook(name):
    fn = HOOKS.pop(name, None)
    if fn is not None:
        fn()

def charge(input, call):
    LEDGER.append(("charge", call.run_id))
    return {"ok": True}

def verify_charge(input, output, call):
    return True

def undo_charge(input, output, call):
    _hook("undo")
    LEDGER.append(("undo", call.run_id))

def stall(input, call):
    if HOOKS.pop("crash", None):
        raise KeyboardInterrupt  # the process dies here: the run stays running, its owner gone
    return {}
"""

FILES = {
    **effect_contract("charge", "charge"),
    **allow_all("charge"),
    "contracts/stall.v1.0.0.yaml": "id: stall\nversion: 1.0.0\nentrypoint: tk:stall\n",
    "states/charge.yaml": "id: charge\ntype: task\ntool: charge@^1\n",
    "states/stall.yaml": "id: stall\ntype: task\ntool: stall@^1\n",
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve]\n",
    "transitions/reviewed.yaml": "flow: reviewed\nstart: charge\ntransitions:\n  - {from: charge, to: ask}\n"
                                 "  - {from: ask, to: done}\n",
    "transitions/stalled.yaml": "flow: stalled\nstart: charge\ntransitions:\n  - {from: charge, to: stall}\n"
                                "  - {from: stall, to: done}\n",
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/flowctl.db"
    return request.getfixturevalue("pg_url")


class _BeforeCommit:
    """The store as one command sees it: ``hook`` runs once, just before that command's next commit."""

    def __init__(self, store):
        self._store, self.hook = store, None

    def __getattr__(self, name):
        return getattr(self._store, name)

    def commit(self, *args, **kw):
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return self._store.commit(*args, **kw)


class Two:
    """Two commands' engines on one store: ``a`` (the cancel, owner this process) and ``b`` (the
    competitor, owner another live process), and the tools' ledger and hooks."""

    def __init__(self, root, url):
        import flowctl
        from flowctl.engine.engine import Engine
        from flowctl.store.sql import open_store
        from flowctl.engine.tools import resolve

        project = flowctl.load_project(root)
        self.a_store = _BeforeCommit(open_store(url))
        self.a = Engine(project, self.a_store, check=False)
        self.b = Engine(flowctl.load_project(root), open_store(url), check=False,
                        owner=f"{os.uname().nodename}:{os.getppid()}")
        folder = str(root / "orchestration" / "tools")
        self.ledger, self.hooks = resolve("tk:LEDGER", folder), resolve("tk:HOOKS", folder)
        self.ledger.clear()
        self.hooks.clear()

    def undos(self, run_id):
        return self.ledger.count(("undo", run_id))

    def types(self, run_id):
        return [e["type"] for e in self.a.store.events(run_id)]

    def chain_ok(self, run_id):
        from flowctl.store.audit import verify_chain

        row = self.a.store.get_run(run_id)
        return verify_chain(self.a.store.events(run_id), row["last_seq"], row["last_hash"]) == []


def _paused(two):
    result = two.b.run("reviewed", {})
    assert result.status == "paused"
    return result.run_id, result.review["token"]


def _orphaned(two):
    """A run whose process died after its side effect (running, owner a pid that no longer lives)."""
    import flowctl
    from flowctl.engine.engine import Engine

    engine = Engine(flowctl.load_project(two.a.project.root), two.b.store, check=False,
                    owner=_dead_owner())
    two.hooks["crash"] = True
    with pytest.raises(KeyboardInterrupt):
        engine.run("stalled", {})
    (row,) = two.b.store.list_runs(status="running", limit=0)
    return row["id"]


def _dead_owner() -> str:
    """An owner string naming a process of this host that has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"{os.uname().nodename}:{proc.pid}"


def _refused(fn):
    from flowctl.errors import FlowctlError

    try:
        fn()
    except FlowctlError as exc:
        return exc
    return None


def _project(tmp_path):
    return build(tmp_path, FILES, TOOLS)


# ------------------------------------------------------------------------------- cancel vs resume
def test_a_cancel_that_loses_to_a_resume_undoes_nothing(tmp_path, db_url):
    two = Two(_project(tmp_path), db_url)
    run_id, token = _paused(two)
    outcome = {}
    two.a_store.hook = lambda: outcome.setdefault("resume", two.b.resume(run_id, token=token, decision="approve"))
    refused = _refused(lambda: two.a.cancel(run_id, by="ops"))
    assert outcome["resume"].status == "succeeded"
    assert two.undos(run_id) == 0  # the charge stands, as the record says
    assert refused is not None and "already ended (succeeded)" in str(refused)
    assert two.a.store.get_run(run_id)["status"] == "succeeded"
    assert "run_cancelled" not in two.types(run_id) and two.chain_ok(run_id)


def test_a_resume_that_loses_to_a_cancel_is_refused_and_the_run_is_undone_once(tmp_path, db_url):
    two = Two(_project(tmp_path), db_url)
    run_id, token = _paused(two)
    during = {}
    two.hooks["undo"] = lambda: during.setdefault(
        "resume", _refused(lambda: two.b.resume(run_id, token=token, decision="approve")))
    result = two.a.cancel(run_id, by="ops")
    assert result.status == "cancelled"
    # the token is refused: the run is not paused any more (the cancel owns it)
    assert during["resume"] is not None and "is not paused for review (it is running)" in str(during["resume"])
    assert two.undos(run_id) == 1
    types = two.types(run_id)
    assert "review_decided" not in types and "run_succeeded" not in types and two.chain_ok(run_id)


# ------------------------------------------------------------------------------- cancel vs recover
def test_a_cancel_that_loses_to_a_recover_undoes_nothing(tmp_path, db_url):
    two = Two(_project(tmp_path), db_url)
    run_id = _orphaned(two)
    outcome = {}
    two.a_store.hook = lambda: outcome.setdefault("recover", two.b.recover())
    refused = _refused(lambda: two.a.cancel(run_id, by="ops"))
    assert [r.status for r in outcome["recover"]] == ["succeeded"]
    assert two.undos(run_id) == 0
    assert refused is not None and "already ended (succeeded)" in str(refused)
    assert two.a.store.get_run(run_id)["status"] == "succeeded" and two.chain_ok(run_id)


def test_a_recover_that_loses_to_a_cancel_leaves_the_run_to_it(tmp_path, db_url):
    two = Two(_project(tmp_path), db_url)
    run_id = _orphaned(two)
    during = {}
    two.hooks["undo"] = lambda: during.setdefault("recover", two.b.recover())
    assert two.a.cancel(run_id, by="ops").status == "cancelled"
    assert during["recover"] == []  # the cancel owns the run: recover leaves it alone
    assert two.undos(run_id) == 1
    assert "run_succeeded" not in two.types(run_id) and two.chain_ok(run_id)


# ------------------------------------------------------------------------------- cancel vs cancel
def test_of_two_cancels_the_one_that_commits_first_compensates_once(tmp_path, db_url):
    two = Two(_project(tmp_path), db_url)
    run_id, _ = _paused(two)
    outcome = {}
    two.a_store.hook = lambda: outcome.setdefault("b", two.b.cancel(run_id, by="b"))
    refused = _refused(lambda: two.a.cancel(run_id, by="a"))
    assert outcome["b"].status == "cancelled"
    assert two.undos(run_id) == 1  # compensate was called once
    assert refused is not None and "already ended (cancelled)" in str(refused)
    assert two.types(run_id).count("run_cancelled") == 1 and two.chain_ok(run_id)


def test_a_cancel_during_another_cancels_compensation_is_refused(tmp_path, db_url):
    two = Two(_project(tmp_path), db_url)
    run_id, _ = _paused(two)
    during = {}
    two.hooks["undo"] = lambda: during.setdefault("b", _refused(lambda: two.b.cancel(run_id, by="b")))
    assert two.a.cancel(run_id, by="a").status == "cancelled"
    assert during["b"] is not None and "being executed by" in str(during["b"])
    assert two.undos(run_id) == 1 and two.types(run_id).count("run_cancelled") == 1 and two.chain_ok(run_id)


# ------------------------------------------------------------------------------- a cancel cut short
def test_a_cancel_whose_process_died_after_owning_the_run_is_finished_by_recover(tmp_path, db_url):
    two = Two(_project(tmp_path), db_url)
    run_id, _ = _paused(two)

    def die():
        raise KeyboardInterrupt

    two.hooks["undo"] = die
    with pytest.raises(KeyboardInterrupt):
        two.a.cancel(run_id, by="ops")
    assert two.undos(run_id) == 0 and two.a.store.get_run(run_id)["status"] == "running"
    row = two.b.store.get_run(run_id)  # as if that process were gone: its owner no longer lives
    two.b.store.commit(run_id, row["last_seq"], {"owner": _dead_owner()})
    (result,) = two.b.recover()
    assert result.status == "cancelled" and result.error["code"] == "CANCELLED"
    assert two.undos(run_id) == 1 and "review_requested" in two.types(run_id) and two.chain_ok(run_id)
