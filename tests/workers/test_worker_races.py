"""Workers racing: a cancel while a worker compensates, a child that ends while its parent re-checks
its children and parks, a worker that dies between queueing children and its next checkpoint.

Every interleaving is injected: tools block on gate files the test opens, and a store wrapper
runs the competing step just before a chosen commit (or stands still there, as a stalled worker
would). Nothing races a sleep. SQLite and PostgreSQL (the ``db_url`` fixture of test_workers)."""
from __future__ import annotations

import threading

import pytest

from support.pg import pg_url  # noqa: F401 - fixture
from test_workers import _engine, _ledger, _run_in_thread, _until, _with_workers, _worker, db_url, project  # noqa: F401


class _Intercept:
    """The store as one worker or command sees it: ``before(run_id, run)`` is called before each
    commit and may run another command first, stand still, or raise (a process dying there)."""

    def __init__(self, store, before):
        self._store, self.before = store, before

    def __getattr__(self, name):
        return getattr(self._store, name)

    def commit(self, run_id, expect_seq, run, events=(), steps=(), **kw):
        self.before(run_id, run)
        return self._store.commit(run_id, expect_seq, run, events, steps, **kw)


class _DiesAfterEnding(_Intercept):
    """A process that dies right after a run's final commit (before anything else it would do)."""

    def commit(self, run_id, expect_seq, run, events=(), steps=(), **kw):
        self._store.commit(run_id, expect_seq, run, events, steps, **kw)
        if run.get("status") in ("succeeded", "failed", "cancelled"):
            raise KeyboardInterrupt


def _finish_children_and_die(root, db_url, parent_id) -> list:
    """Drive each queued child of ``parent_id`` to its end in a process that dies right after; the
    list says, per child, whether it died there (it runs on a worker's thread: nothing raised)."""
    engine = _engine(root, db_url)
    engine.store = _DiesAfterEnding(engine.store, None)
    died = []
    for child in engine.store.list_runs(parent_id=parent_id, limit=0):
        try:
            engine.resume(child["id"])
            died.append(False)
        except KeyboardInterrupt:
            died.append(True)
    return died


# ------------------------------------------------------------------------------------------ item 2
def test_a_cancel_never_wedges_a_run_whose_compensation_outlasts_heartbeats(tmp_path, project, db_url, monkeypatch):
    """The heartbeat sees the (still recorded) cancel request again while the worker compensates:
    that must not stop the compensation's own commits; the run ends cancelled and is released."""
    from flowctl.workers.worker import enqueue

    gate, undo_gate = tmp_path / "gate", tmp_path / "undo-gate"
    monkeypatch.setenv("UNDO_GATE", str(undo_gate))
    engine = _engine(project, db_url)
    run_id = enqueue(engine, "f", {"gate": str(gate)})
    logged = []
    worker = _worker(engine, lease=3.0, heartbeat=0.2, log=lambda event, fields: logged.append(event))
    thread, _ = _run_in_thread(worker)
    try:
        _until(lambda: len(_ledger(tmp_path, "calls")) == 1, 60, "the first tool call")
        assert engine.cancel(run_id, by="ops").cancel_requested
        _until(lambda: run_id in worker.cancel_wanted, 60, "the heartbeat to see the request")
        gate.touch()
        _until(lambda: f"undo:{run_id}-one" in _ledger(tmp_path, "calls"), 60, "the compensation to start")
        assert "cancelling" in logged
        _until(lambda: run_id in worker.cancel_wanted, 60, "the heartbeat to see the request again, mid-compensation")
        undo_gate.touch()
        _until(lambda: engine.store.get_run(run_id)["status"] == "cancelled", 30, "the run to end cancelled")
    finally:
        gate.touch()
        undo_gate.touch()
        worker.stop()
        thread.join(30)
    row = engine.store.get_run(run_id)
    assert row["lease_until"] is None and _ledger(tmp_path) == []  # released; its one effect undone, once
    assert [e["type"] for e in engine.store.events(run_id)].count("compensation_succeeded") == 1
    assert not thread.is_alive() and worker.stats["cancelled"] == 1


# ------------------------------------------------------------------------------------------ item 3
def test_a_child_that_ends_while_its_parent_re_checks_and_parks_wakes_it(tmp_path, project, db_url):
    """The children end between the parent's re-check and its park, in a process that dies right
    after each child's final commit: the parent must still be due, and a worker finishes it."""
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    run_id = enqueue(engine, "fanned", {})
    done = []

    def before(rid, run):
        if rid == run_id and run.get("status") == "waiting" and not done:
            done.append(_finish_children_and_die(project, db_url, run_id))

    intercepted = _engine(project, db_url)
    intercepted.store = _Intercept(intercepted.store, before)  # what the worker commits through
    worker = _worker(intercepted, concurrency=1)  # busy with the parent's park: it claims no child meanwhile
    _with_workers([worker], lambda: engine.store.get_run(run_id)["status"] == "succeeded", 30,
                  "the parent to finish without flowctl recover")
    assert done == [[True, True]]  # both children ended (and their process died) between re-check and park
    assert {c["status"] for c in engine.store.list_runs(parent_id=run_id, limit=0)} == {"succeeded"}
    assert sorted(_ledger(tmp_path)) == sorted(f"{c['id']}-{leg}" for c in engine.store.list_runs(parent_id=run_id, limit=0)
                                               for leg in ("one", "two"))


def test_a_takeover_finds_children_that_ended_before_the_dead_workers_checkpoint(tmp_path, project, db_url):
    """A worker queues the children, then stalls before the checkpoint that records them (and its
    lease runs out); the children end; the worker that takes the parent over must see they ended."""
    from flowctl.workers.worker import enqueue

    engine = _engine(project, db_url)
    run_id = enqueue(engine, "fanned", {})
    stalled, go_on = threading.Event(), threading.Event()

    def before(rid, run):
        if rid == run_id and run.get("status") == "waiting":
            stalled.set()
            go_on.wait(120)  # as if frozen (SIGSTOP): its lease expires meanwhile

    intercepted = _engine(project, db_url)
    intercepted.store = _Intercept(intercepted.store, before)
    first = _worker(intercepted, lease=2.0, heartbeat=3600, max_runs=1)
    thread, _ = _run_in_thread(first)
    try:
        assert stalled.wait(60)
        kids = engine.store.list_runs(parent_id=run_id, limit=0)
        assert len(kids) == 2 and {k["status"] for k in kids} == {"queued"}
        for kid in kids:  # they end (here, from the CLI) while the parent is held by the stalled worker
            assert engine.resume(kid["id"]).status == "succeeded"
        _until(lambda: (engine.store.get_run(run_id)["lease_until"] or 0) < engine.store.now(), 30,
               "the stalled worker's lease to run out")
        _with_workers([_worker(_engine(project, db_url))], lambda: engine.store.get_run(run_id)["status"] == "succeeded",
                      30, "the taken-over parent to finish without flowctl recover")
    finally:
        go_on.set()
        first.stop()
        thread.join(30)
    assert first.stats["stale_commits_refused"] == 1  # the stalled worker's late park was refused
    types = [e["type"] for e in engine.store.events(run_id)]
    assert types.count("child_finished") == 2 and types[-1] == "run_succeeded"


# ------------------------------------------------------------------------------------------ item 4
def _stalled_then_taken_over(tmp_path, project, db_url, gate_key, wait_for):
    """Worker A is inside step one's call (held at a gate) and misses its heartbeats past its lease;
    worker B takes the run over; ``wait_for(engine, run_id)`` says when to let A's call return."""
    from flowctl.workers.worker import enqueue

    gate = tmp_path / "gate"
    engine = _engine(project, db_url)
    run_id = enqueue(engine, "f", {gate_key: str(gate)})
    stalled = _worker(_engine(project, db_url), lease=2.0, heartbeat=3600, max_runs=1)  # as if SIGSTOPped
    thread, _ = _run_in_thread(stalled)
    second = _worker(_engine(project, db_url))
    try:
        _until(lambda: len(_ledger(tmp_path, "calls")) == 1, 60, "worker A inside step one's call")
        other, _ = _run_in_thread(second)
        _until(lambda: wait_for(engine, run_id), 60, "worker B to take the run over")
        gate.touch()  # A's late call returns now
        _until(lambda: engine.store.get_run(run_id)["status"] == "succeeded", 60, "the run to finish")
        thread.join(30)
    finally:
        gate.touch()
        stalled.stop()
        second.stop()
        thread.join(30)
    assert stalled.stats["stale_commits_refused"] == 1  # the late call's commit wrote nothing
    # one run lost, counted once (breaker finding: the lease's loss and the drive's end each counted it)
    assert (stalled.stats["lost"], stalled.stats["leases_lost"]) == (1, 1)
    assert sorted(_ledger(tmp_path)) == [f"{run_id}-one", f"{run_id}-two"]  # each effect applied once
    recovered = [e for e in engine.store.events(run_id) if e["type"] == "step_recovered"]
    return engine, run_id, recovered


def test_a_stalled_workers_late_effect_is_verified_before_the_new_owner_invokes_again(tmp_path, project, db_url):
    """A's call applied its effect but had not returned when B took over: B's verify finds it and
    B does not invoke the tool again."""
    def verified(engine, run_id):
        return any(e["type"] == "step_recovered" for e in engine.store.events(run_id))

    engine, run_id, recovered = _stalled_then_taken_over(tmp_path, project, db_url, "gate_after", verified)
    assert [e["data"]["happened"] for e in recovered] == [True]
    assert _ledger(tmp_path, "calls").count(f"{run_id}-one") == 1  # not invoked again


def test_a_stalled_workers_call_that_had_not_acted_is_invoked_again_with_the_same_key(tmp_path, project, db_url):
    """A's call had not applied its effect when B verified, so B invokes again with the same
    idempotency key: the window a tool closes by deduplicating on ``call.idempotency_key``."""
    engine, run_id, recovered = _stalled_then_taken_over(
        tmp_path, project, db_url, "gate", lambda engine, rid: _ledger(tmp_path, "calls").count(f"{rid}-one") == 2)
    assert [e["data"]["happened"] for e in recovered] == [False]
    assert _ledger(tmp_path, "calls").count(f"{run_id}-one") == 2  # at least once; applied once (deduplicated by key)


# ------------------------------------------------------------------------------ one run, two claims
def test_a_slot_finishing_a_parked_run_leaves_the_runs_next_claim_alone(tmp_path, project, db_url):
    """A slot parks a run, and before that slot has closed its books another slot of the same
    worker claims the run again (it became due at once, as a parent does when a child ends). The
    first slot's finish gives back only what its own claim held. Before, it released the new
    claim's lease (ending it now): another worker took the run over while this one still drove it,
    and both queued the same children (breaker finding: UniqueViolation on flowctl_runs_pkey)."""
    from flowctl.workers.worker import Worker, enqueue

    engine = _engine(project, db_url)
    run_id = enqueue(engine, "napper", {})
    worker = Worker(engine.project, engine.store, concurrency=2, lease=60, listen=False, max_inline_wait=0)
    finish, again = worker._finish, []

    def claimed_again_first(root, claim, outcome, detail, delay):
        if not again:  # the injected interleaving: the run is claimed again before this finish
            engine.store.nudge(run_id)  # due now, as a child's end makes its waiting parent
            (second,) = engine.store.claim(worker.id, 1, worker.lease)
            worker.take(second)  # booked as the worker's claim loop books it
            again.append(second)
        return finish(root, claim, outcome, detail, delay)

    worker._finish = claimed_again_first
    (first,) = engine.store.claim(worker.id, 1, worker.lease)
    worker.take(first)
    worker._drive(first)
    (second,) = again
    assert (second["id"], second["fence"], second["prev_status"]) == (run_id, first["fence"] + 1, "waiting")
    row = engine.store.get_run(run_id)
    assert (row["status"], row["owner"], row["fence"]) == ("running", worker.id, second["fence"])
    assert row["lease_until"] > engine.store.now() + 30  # still leased to the second claim: not given back
    assert worker.fence_of(run_id) == second["fence"]
    assert engine.store.claim("another-worker", 1, 60.0) == []  # so no one else can take it over
    engine.store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("locked_first", [0, 1])
def test_a_heartbeat_never_holds_one_run_while_it_waits_for_another(tmp_path, project, pg_url, locked_first):
    """A child's end holds the child's row and then wants its parent's (to wake it). A heartbeat
    renewing both leases must not be holding the parent's row while it waits for the child's:
    that was a deadlock (breaker finding: PostgreSQL aborted the parent's driver with
    DeadlockDetected). Injected: a transaction holds one run's row, the heartbeat starts and
    waits for it, then that transaction updates the other run's row and commits."""
    import psycopg

    from flowctl.workers.worker import enqueue

    engine = _engine(project, pg_url)
    ids = [enqueue(engine, "napper", {}) for _ in range(2)]
    held = {c["id"]: c["fence"] for c in engine.store.claim("w", 2, 60.0)}
    assert sorted(held) == sorted(ids)
    first, other = ids[locked_first], ids[1 - locked_first]
    renewed, failed = [], []
    with psycopg.connect(pg_url) as end:  # the child's end, in its transaction
        end.execute("SELECT 1 FROM flowctl_runs WHERE id = %s FOR UPDATE", (first,))

        def heartbeat():
            try:
                renewed.append(engine.store.renew("w", held, 60.0))
            except Exception as exc:  # noqa: BLE001 - reported below
                failed.append(exc)

        thread = threading.Thread(target=heartbeat)
        thread.start()
        with psycopg.connect(pg_url, autocommit=True) as probe:
            _until(lambda: probe.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                         "AND query LIKE 'UPDATE flowctl_runs SET lease_until%%'").fetchone()[0] == 1,
                   30, "the heartbeat to wait for the locked run")
        end.execute("SET LOCAL lock_timeout = '20s'")
        end.execute("UPDATE flowctl_runs SET available_at = available_at WHERE id = %s", (other,))  # the wake-up
    thread.join(30)
    assert not failed, failed
    assert renewed == [set(ids)]
    engine.store.close()


NESTED = {
    "contracts/hold.v1.0.0.yaml": "id: hold\nversion: 1.0.0\nentrypoint: gates:hold\n",
    "states/block.yaml": "id: block\ntype: task\ntool: hold@^1\ninput: {gate: input.gate}\n",
    "states/inner_call.yaml": "id: inner_call\ntype: subflow\nflow: inner\ninput: {gate: input.gate}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/inner.yaml": "flow: inner\nstart: block\ntransitions:\n  - {from: block, to: done}\n",
    "transitions/outer.yaml": "flow: outer\nstart: inner_call\ntransitions:\n  - {from: inner_call, to: done}\n",
    "tools/gates.py": "import os, time\n\n"
                      "def hold(input, call):\n"
                      "    open(input['gate'] + '.called', 'w').close()\n"
                      "    deadline = time.time() + 60\n"
                      "    while not os.path.exists(input['gate']) and time.time() < deadline:\n"
                      "        time.sleep(0.01)\n"
                      "    return {}\n",
}


@pytest.mark.postgres
def test_a_childs_end_takes_its_parents_row_before_the_ledger_head(tmp_path, pg_url):
    """A child's end wakes its parent and appends the ledger's ``end`` row in one transaction; a
    parent's own end holds its row and then wants the ledger's head. The child's end must want the
    parent's row before it takes the head, else the two wait for each other (a deadlock). Injected:
    a transaction holds the parent's row as its end would, the child ends and waits for it, then
    that transaction takes the ledger's head and commits."""
    import psycopg

    import flowctl
    from flowctl.engine.engine import Engine
    from flowctl.store.sql import open_store
    from support.helpers import write_project

    engine = Engine(flowctl.load_project(write_project(tmp_path / "p", NESTED)), open_store(pg_url))
    gate, outcome = tmp_path / "gate", []
    thread = threading.Thread(target=lambda: outcome.append(engine.run("outer", {"gate": str(gate)})))
    thread.start()
    _until(lambda: (tmp_path / "gate.called").exists(), 60, "the child's tool to be called")
    (parent,) = [r["id"] for r in engine.store.list_runs(top_level=True)]
    with psycopg.connect(pg_url) as end:  # the parent's end, in its transaction
        end.execute("SELECT 1 FROM flowctl_runs WHERE id = %s FOR UPDATE", (parent,))
        gate.touch()  # the child's tool returns, and the child ends
        with psycopg.connect(pg_url, autocommit=True) as probe:
            _until(lambda: probe.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                         "AND datname = current_database()").fetchone()[0] == 1,
                   30, "the child's end to wait for the parent's row")
        end.execute("SET LOCAL lock_timeout = '20s'")
        end.execute("SELECT 1 FROM flowctl_ledger_head WHERE id = 1 FOR UPDATE")
    thread.join(60)
    assert [r.status for r in outcome] == ["succeeded"]
    engine.store.close()


def test_a_heartbeat_between_a_runs_last_commit_and_its_slots_finish_loses_nothing(tmp_path, project, db_url):
    """The heartbeat renews a run this worker's own commit has just parked (or ended), before its
    slot has dropped it: that run was let go, not lost (stress finding: each such run was logged
    as `lease_lost` and counted in `leases_lost`). A run another worker took is still lost."""
    from flowctl.workers.worker import Worker, enqueue

    engine = _engine(project, db_url)
    mine, taken = enqueue(engine, "napper", {}), enqueue(engine, "napper", {})
    worker = Worker(engine.project, engine.store, concurrency=2, lease=60, listen=False)
    claims = {c["id"]: c for c in engine.store.claim(worker.id, 2, worker.lease)}
    for claim in claims.values():
        worker.take(claim)
    assert engine.store.release(mine, claims[mine]["fence"], status="waiting")  # parked under this token
    assert engine.store.release(taken, claims[taken]["fence"], delay=-1.0)  # its lease over: claimable
    (other,) = engine.store.claim("another-worker", 1, 60.0)
    assert other["id"] == taken
    logged = []
    worker.log = lambda event, fields: logged.append((event, fields.get("run")))
    worker.beat()
    assert ("lease_lost", taken) in logged and ("lease_lost", mine) not in logged
    assert worker.stats["leases_lost"] == 1
    engine.store.close()


def test_a_slot_that_lost_its_run_to_a_new_claim_of_the_same_worker_writes_nothing(tmp_path, project, db_url):
    """Slot A's lease ran out and another slot of the same worker claimed the run again. A's next
    commit (here: parking the run) carries A's own token, which the store refuses, never the new
    claim's token and never no token at all."""
    import pytest

    from flowctl.errors import LeaseLost
    from flowctl.workers.worker import Worker, enqueue

    engine = _engine(project, db_url)
    run_id = enqueue(engine, "napper", {})
    worker = Worker(engine.project, engine.store, concurrency=2, lease=60, listen=False)
    (first,) = engine.store.claim(worker.id, 1, worker.lease)
    worker.take(first)
    assert engine.store.release(run_id, first["fence"], delay=-1.0)  # A's lease is over
    (second,) = engine.store.claim(worker.id, 1, worker.lease)
    worker.take(second)  # slot B holds it now
    worker._local.drive = (run_id, first["fence"])  # A's thread
    row = engine.store.get_run(run_id)
    with pytest.raises(LeaseLost):
        worker.engine.store.commit(run_id, row["last_seq"], {"status": "waiting"}, [])
    after = engine.store.get_run(run_id)
    assert (after["status"], after["fence"]) == ("running", second["fence"])  # B's, untouched
    engine.store.close()


def test_cancelling_a_map_parent_undoes_the_effects_of_its_children_that_had_ended(tmp_path, db_url, monkeypatch):
    """A map parent waits on queued children; two of them have run to success on a worker (their
    effects in their own sagas: a fan-out hands them to its parent only when it concludes); the
    parent is cancelled. Its compensation undoes those children's effects too, and the children
    not yet run are cancelled (breaker finding: the ended children's effects were never undone)."""
    from flowctl.workers.worker import Worker, enqueue
    from test_workers import _fan_project

    root = _fan_project(tmp_path, monkeypatch)
    engine = _engine(root, db_url)
    parent = enqueue(engine, "mapped2", {"items": [1, 2, 3, 4]})
    worker = Worker(engine.project, engine.store, concurrency=1, lease=60, listen=False)
    (claim,) = engine.store.claim(worker.id, 1, worker.lease)
    worker.take(claim)
    worker._drive(claim)  # the parent queues two children (max_concurrency 2) and waits
    assert engine.store.get_run(parent)["status"] == "waiting"
    children = {r["id"] for r in engine.store.list_runs(parent_id=parent, limit=0)}
    claims = engine.store.claim(worker.id, 4, worker.lease)
    done = [c["id"] for c in claims if c["id"] in children]
    for c in claims:
        if c["id"] in children:
            worker.take(c)
            worker._drive(c)  # the child runs to success; its end makes the parent due
    assert len(done) == 2 and {engine.store.get_run(i)["status"] for i in done} == {"succeeded"}
    result = engine.cancel(parent, by="ops")
    assert result.status == "cancelled"
    undone = sorted(k for k in _ledger(tmp_path, "calls") if k.startswith("undo:"))
    assert undone == sorted(f"undo:{i}-{leg}" for i in done for leg in ("one", "two"))
    engine.store.close()
