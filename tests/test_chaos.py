"""Chaos: 4 worker processes on one PostgreSQL store, killed with SIGKILL about once a second and
restarted, one of them frozen with SIGSTOP past its lease and then continued.

Every run of a two-step flow must finish; each of its two side effects (an idempotent tool that
records every application under the step's idempotency key, with a unique constraint) must be
applied exactly once; no write carrying a stale fencing token may succeed (a trigger in the
database records any event written under a token that is no longer the run's); every run's audit
chain must verify.

``FLOWCTL_CHAOS_RUNS`` sets the number of runs (default 200 for CI; ``make chaos`` runs 1,000).
Every loop is bounded in count and time; all traffic goes to 127.0.0.1.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter

import pytest

from support.helpers import FLOWCTL_EXE, write_project
from support.pg import pg_url  # noqa: F401 - fixture

RUNS = int(os.environ.get("FLOWCTL_CHAOS_RUNS", "200"))
WORKERS = 4
CONCURRENCY = 4
LEASE_S = 3.0
STOP_S = LEASE_S + 3.0          # the SIGSTOPped worker sleeps past its lease
BUDGET_S = 90 + RUNS * 0.45     # the whole chaos phase, at most
SLOW_S = LEASE_S * 1.5          # a few tool calls outlast the lease: the heartbeat must keep them
MIN_UP_S = 0.5                  # a restarted worker works this long before it may be killed again

TOOLS = '''
import os, random, threading, time

import psycopg

_local = threading.local()


def _conn():
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(os.environ["CHAOS_DB"], autocommit=True, connect_timeout=10)
    return conn


def apply(input, call):
    time.sleep(random.uniform(0.02, 0.3))
    conn, pid = _conn(), os.getpid()
    conn.execute("INSERT INTO chaos_invocations (key, pid) VALUES (%s, %s)", (call.idempotency_key, pid))
    # the effect: applied only if this key never was (unique key), and every application logged
    conn.execute(
        "WITH ins AS (INSERT INTO chaos_effects (key, run_id) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING RETURNING key) "
        "INSERT INTO chaos_applications (key, pid) SELECT key, %s FROM ins",
        (call.idempotency_key, call.run_id, pid))
    if random.random() < float(os.environ["CHAOS_SLOW_P"]):
        time.sleep(float(os.environ["CHAOS_SLOW_S"]))
    time.sleep(random.uniform(0.0, 0.1))
    return {"key": call.idempotency_key}


def verify(input, output, call):
    row = _conn().execute("SELECT key FROM chaos_effects WHERE key = %s", (call.idempotency_key,)).fetchone()
    return {"key": row[0]} if row else False


def undo(input, output, call):
    _conn().execute("INSERT INTO chaos_undos (key, pid) VALUES (%s, %s)", (call.idempotency_key, os.getpid()))
    _conn().execute("DELETE FROM chaos_effects WHERE key = %s", (call.idempotency_key,))
'''

FILES = {
    "contracts/apply.v1.0.0.yaml": """
        id: apply
        version: 1.0.0
        entrypoint: chaos_tools:apply
        verify: chaos_tools:verify
        compensate: chaos_tools:undo
        idempotency_key: "join('-', [run.id, input.leg])"
        side_effects:
          - {type: database_write, target: chaos_effects}
        timeout: 60s
        """,
    "policies/chaos.yaml": "policy: chaos\napplies_to: [apply]\nallow: []\n",
    "states/first.yaml": "id: first\ntype: task\ntool: apply@^1\ninput: {leg: \"'first'\"}\n",
    "states/second.yaml": "id: second\ntype: task\ntool: apply@^1\ninput: {leg: \"'second'\"}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/chaos.yaml": "flow: chaos\nversion: 1\nstart: first\ntransitions:\n"
                              "  - {from: first, to: second}\n  - {from: second, to: done}\n",
    "tools/chaos_tools.py": TOOLS,
}

ORACLE = """
CREATE TABLE chaos_effects (key text PRIMARY KEY, run_id text NOT NULL, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE chaos_applications (key text NOT NULL, pid int, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE chaos_invocations (key text NOT NULL, pid int, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE chaos_undos (key text NOT NULL, pid int);
CREATE TABLE chaos_stale_writes (run_id text, seq int, event_fence int, run_fence int,
                                 at timestamptz DEFAULT clock_timestamp());
-- The oracle for fencing: an event that reaches the table must carry the run's current token.
-- (The run row was updated by the same transaction just before, so it is locked by it.)
CREATE FUNCTION chaos_check_fence() RETURNS trigger AS $$
DECLARE current int;
BEGIN
  SELECT fence INTO current FROM flowctl_runs WHERE id = NEW.run_id;
  IF NEW.fence IS NOT NULL AND NEW.fence IS DISTINCT FROM current THEN
    INSERT INTO chaos_stale_writes (run_id, seq, event_fence, run_fence) VALUES (NEW.run_id, NEW.seq, NEW.fence, current);
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER chaos_fence BEFORE INSERT ON flowctl_events FOR EACH ROW EXECUTE FUNCTION chaos_check_fence();
"""


class Fleet:
    """The worker processes: start, SIGKILL + restart, SIGSTOP/SIGCONT, SIGTERM; logs kept per process."""

    def __init__(self, root, url, env, logs):
        self.root, self.url, self.env, self.logs = root, url, env, logs
        self.procs: list = [None] * WORKERS
        self.all: list = []
        self.kills = 0
        self.startups: list = []  # seconds from spawn to worker_started (as seen by the chaos loop)

    def start(self, slot):
        log = open(self.logs / f"worker{slot}-{len(self.all)}.log", "w")
        proc = subprocess.Popen([FLOWCTL_EXE, "worker", "--db", self.url, "--concurrency", str(CONCURRENCY),
                                 "--lease", f"{LEASE_S:g}s", "--poll", "1s", "--log-format", "json"],
                                cwd=self.root, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = log.name
        proc.spawned = time.monotonic()
        log.close()
        self.procs[slot] = proc
        self.all.append(proc)
        return proc

    def is_up(self, slot, for_s=0.0):
        """The worker in ``slot`` started (logged worker_started) at least ``for_s`` seconds ago."""
        proc = self.procs[slot]
        if getattr(proc, "up_since", None) is None:
            with open(proc.log_path) as fh:
                if '"worker_started"' in fh.read():
                    proc.up_since = time.monotonic()
                    self.startups.append(proc.up_since - proc.spawned)
        since = getattr(proc, "up_since", None)
        return since is not None and time.monotonic() - since >= for_s

    def kill_and_restart(self, slot):
        proc = self.procs[slot]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.kills += 1
        self.start(slot)

    def terminate_all(self, timeout=60):
        codes = {}
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                codes[proc.pid] = proc.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
                codes[proc.pid] = "killed after SIGTERM timeout"
        for proc in self.all:  # the SIGKILLed ones are long gone; make sure nothing is left behind
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
        return codes

    def log_events(self, proc):
        out = []
        with open(proc.log_path) as fh:
            for line in fh:
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut by SIGKILL
        return out


@pytest.mark.postgres
def test_chaos_workers_killed_and_stalled_lose_no_run_and_apply_no_effect_twice(tmp_path, pg_url):  # noqa: F811
    import psycopg

    import flowctl
    from flowctl.store.audit import verify_chain
    from flowctl.engine.engine import Engine
    from flowctl.store.sql import open_store
    from flowctl.workers.worker import enqueue

    assert "127.0.0.1" in pg_url
    root = write_project(tmp_path / "proj", FILES)
    store = open_store(pg_url)
    dsn = "postgresql://" + pg_url.split("://", 1)[1]
    db = psycopg.connect(dsn, autocommit=True)
    db.execute(ORACLE)
    env = dict(os.environ, CHAOS_DB=dsn, CHAOS_SLOW_P="0.02", CHAOS_SLOW_S=str(SLOW_S))
    env.pop("FLOWCTL_DEBUG", None)

    engine = Engine(flowctl.load_project(root), store)
    run_ids = [enqueue(engine, "chaos", {}) for _ in range(RUNS // 2)]
    cli = subprocess.run([FLOWCTL_EXE, "submit", "chaos", "--input", "{}", "--db", pg_url], cwd=root, env=env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    run_ids.append(cli.stdout.strip())

    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(root, pg_url, env, logs)
    for slot in range(WORKERS):
        fleet.start(slot)
    rng = random.Random(int(os.environ.get("FLOWCTL_CHAOS_SEED", "0")) or None)
    started = time.monotonic()
    stopped = None   # (slot, proc, since, held run ids)
    continued = False
    submitted_late = False
    remaining = len(run_ids)
    try:
        for _ in range(int(BUDGET_S * 2) + 10):  # bounded in count; each round sleeps about a second
            elapsed = time.monotonic() - started
            assert elapsed < BUDGET_S, f"chaos budget of {BUDGET_S:.0f}s spent with {remaining} runs unfinished"
            if not submitted_late and elapsed > 1.0:  # the other half arrives under load: NOTIFY wakes workers
                run_ids.extend(enqueue(engine, "chaos", {}) for _ in range(RUNS - len(run_ids)))
                submitted_late = True
            if stopped is None and not continued and elapsed > 2.0:
                slot, held = _busy_worker(db, fleet, rng)
                if held:
                    fleet.procs[slot].send_signal(signal.SIGSTOP)
                    stopped = (slot, fleet.procs[slot], time.monotonic(), held)
            if stopped is not None and time.monotonic() - stopped[2] > STOP_S:
                stopped[1].send_signal(signal.SIGCONT)
                continued = True
            remaining = db.execute("SELECT count(*) FROM flowctl_runs WHERE status NOT IN ('succeeded', 'failed', "
                                   "'cancelled')").fetchone()[0]
            if remaining == 0 and submitted_late and continued and time.monotonic() - stopped[2] > STOP_S + LEASE_S:
                break
            if remaining:
                # a worker that has been up a moment (not one still importing after its restart: on a
                # small machine killing those would leave no worker alive long enough to finish a run);
                # not the frozen one, nor the continued one for a lease after it woke (its refused writes count)
                candidates = [s for s in range(WORKERS) if fleet.is_up(s, MIN_UP_S) and not (
                    stopped is not None and fleet.procs[s] is stopped[1]
                    and time.monotonic() - stopped[2] < STOP_S + LEASE_S)]
                if candidates:
                    fleet.kill_and_restart(rng.choice(candidates))
            time.sleep(rng.uniform(0.6, 1.4))
        else:
            pytest.fail("chaos loop ran out of rounds")
    finally:
        codes = fleet.terminate_all()
    took = time.monotonic() - started

    # ------------------------------------------------------------------ every run finished
    statuses = Counter(store.get_run(rid)["status"] for rid in run_ids)
    assert statuses == Counter({"succeeded": len(run_ids)}), statuses

    # ------------------------------------------------------------------ every effect exactly once
    expected = {f"{rid}-{leg}" for rid in run_ids for leg in ("first", "second")}
    effects = {k for (k,) in db.execute("SELECT key FROM chaos_effects")}
    assert effects == expected
    applications = Counter(k for (k,) in db.execute("SELECT key FROM chaos_applications"))
    duplicates = sum(n - 1 for n in applications.values() if n > 1)
    assert set(applications) == expected and duplicates == 0, applications.most_common(3)
    invocations = db.execute("SELECT count(*) FROM chaos_invocations").fetchone()[0]
    assert db.execute("SELECT count(*) FROM chaos_undos").fetchone()[0] == 0
    # and in the runs' own records: one succeeded step and one tool_succeeded event per state
    twice = db.execute("""SELECT run_id, state, count(*) FROM flowctl_steps WHERE status = 'succeeded'
                          GROUP BY run_id, state HAVING count(*) <> 1""").fetchall()
    # (the events as the store reads them back: a commit's events are one packed row, store schema 7)
    logs = {rid: store.events(rid) for rid in run_ids}
    succeeded = Counter((rid, ev["state"]) for rid, log in logs.items() for ev in log if ev["type"] == "tool_succeeded")
    twice += [(rid, state, n) for (rid, state), n in succeeded.items() if n != 1]
    assert twice == [], twice[:5]
    recorded = sum(succeeded.values())
    assert recorded == 2 * len(run_ids)

    # ------------------------------------------------------------------ fencing
    stale = db.execute("SELECT run_id, seq, event_fence, run_fence FROM chaos_stale_writes").fetchall()
    assert stale == [], f"writes with a stale fencing token succeeded: {stale[:5]}"
    unfenced = db.execute("SELECT count(*) FROM flowctl_events WHERE fence IS NULL AND seq > 1").fetchone()[0]
    assert unfenced == 0, "every worker write carries a fencing token"
    backwards = db.execute("""SELECT count(*) FROM (SELECT fence, lag(fence) OVER (PARTITION BY run_id ORDER BY seq) AS prev
                              FROM flowctl_events) e WHERE fence < prev""").fetchone()[0]
    assert backwards == 0, "tokens only grow along a run's events"
    takeovers = sum(1 for log in logs.values() for ev in log
                    if ev["type"] == "run_resumed" and "orphaned" in (ev.get("data_json") or ""))
    claims = db.execute("SELECT sum(fence) FROM flowctl_runs").fetchone()[0]
    worker_events = [ev for proc in fleet.all for ev in fleet.log_events(proc)]
    refused = sum(1 for ev in worker_events if ev["event"] == "stale_commit_refused")
    frozen = fleet.log_events(stopped[1])
    frozen_lost = [ev for ev in frozen if ev["event"] == "lease_lost"]
    frozen_refused = [ev for ev in frozen if ev["event"] == "stale_commit_refused"]
    assert frozen_lost, "the worker frozen past its lease found its leases gone when it woke"
    assert frozen_refused, "the frozen worker tried to write with its old tokens and the database refused"
    assert {ev["run"] for ev in frozen_lost} <= set(run_ids)

    # ------------------------------------------------------------------ audit chains
    broken = {}
    for rid in run_ids:
        row = store.get_run(rid)
        problems = verify_chain(store.events(rid), row["last_seq"], row["last_hash"])
        if problems:
            broken[rid] = problems
    assert broken == {}

    started_ok = {proc.pid for proc in fleet.all if any(ev["event"] == "worker_started" for ev in fleet.log_events(proc))}
    # a worker that had started (handler installed) finishes its steps and exits 0 on SIGTERM; one
    # restarted a moment before the end may still be importing and simply dies of the signal
    assert all(code == 0 for pid, code in codes.items() if pid in started_ok), codes
    assert all(code in (0, -signal.SIGTERM) for code in codes.values()), codes
    assert fleet.kills >= min(3, int(took // 2)), "the chaos loop really killed workers"
    summary = {"runs": len(run_ids), "seconds": round(took, 1), "runs_per_s": round(len(run_ids) / took, 1),
               "sigkills": fleet.kills, "sigkills_per_s": round(fleet.kills / took, 2),
               "worker_startup_s_median": round(sorted(fleet.startups)[len(fleet.startups) // 2], 1) if fleet.startups else None,
               "sigstop_s": STOP_S, "frozen_worker_runs": len(stopped[3]),
               "frozen_worker_lease_losses": len(frozen_lost), "frozen_worker_commits_refused": len(frozen_refused),
               "stale_commits_refused": refused,
               "stale_writes_succeeded": len(stale), "claims": claims, "takeovers": takeovers,
               "tool_invocations": invocations, "reinvocations_same_key": invocations - len(expected),
               "effects": len(effects), "duplicates": duplicates, "steps_recorded_twice": len(twice),
               "chains_verified": len(run_ids) - len(broken)}
    print("\nCHAOS " + json.dumps(summary))
    (tmp_path / "chaos-summary.json").write_text(json.dumps(summary, indent=2))
    out = os.environ.get("FLOWCTL_CHAOS_SUMMARY")
    if out:
        with open(out, "w") as fh:
            json.dump(summary, fh, indent=2)


def _busy_worker(db, fleet, rng):
    """A worker slot holding at least one run under a live lease, and those runs (or (slot, []))."""
    rows = db.execute("SELECT owner, id FROM flowctl_runs WHERE status = 'running' "
                      "AND lease_until >= EXTRACT(EPOCH FROM now())").fetchall()
    by_pid = {}
    for owner, rid in rows:
        pid = owner.rpartition(":")[2]
        by_pid.setdefault(pid, []).append(rid)
    slots = [s for s, proc in enumerate(fleet.procs) if str(proc.pid) in by_pid]
    if not slots:
        return 0, []
    slot = rng.choice(slots)
    return slot, by_pid[str(fleet.procs[slot].pid)]


FAN_RUNS = int(os.environ.get("FLOWCTL_CHAOS_FAN_RUNS", "20"))
FAN_WORKERS = 3
FAN_BUDGET_S = 60 + FAN_RUNS * 3.0
FAN_FILES = dict(FILES, **{
    "states/spread.yaml": "id: spread\ntype: map\nitems: input.items\nflow: chaos\nitem_input: {}\nmax_concurrency: 2\n",
    "states/both.yaml": "id: both\ntype: parallel\nbranches: [chaos, chaos]\ninput: {}\n",
    "transitions/fanchaos.yaml": "flow: fanchaos\nversion: 1\nstart: spread\ntransitions:\n"
                                 "  - {from: spread, to: both}\n  - {from: both, to: done}\n",
})


@pytest.mark.postgres
def test_chaos_workers_killed_during_fan_out_finish_every_run_without_recover(tmp_path, pg_url):  # noqa: F811
    """Parents with a map (3 items, 2 at a time) then a parallel (2 branches), every child a
    two-step flow, on workers SIGKILLed about once a second: every parent and child ends succeeded
    with no ``flowctl recover`` (a lost wake-up would leave a parent waiting), every effect once."""
    import psycopg

    import flowctl
    from flowctl.store.audit import verify_chain
    from flowctl.engine.engine import Engine
    from flowctl.store.sql import open_store
    from flowctl.workers.worker import enqueue

    assert "127.0.0.1" in pg_url
    root = write_project(tmp_path / "proj", FAN_FILES)
    store = open_store(pg_url)
    dsn = "postgresql://" + pg_url.split("://", 1)[1]
    db = psycopg.connect(dsn, autocommit=True)
    db.execute(ORACLE)
    env = dict(os.environ, CHAOS_DB=dsn, CHAOS_SLOW_P="0", CHAOS_SLOW_S="0")
    env.pop("FLOWCTL_DEBUG", None)
    engine = Engine(flowctl.load_project(root), store)
    parents = [enqueue(engine, "fanchaos", {"items": [1, 2, 3]}) for _ in range(FAN_RUNS)]
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(root, pg_url, env, logs)
    fleet.procs = [None] * FAN_WORKERS
    for slot in range(FAN_WORKERS):
        fleet.start(slot)
    rng = random.Random(int(os.environ.get("FLOWCTL_CHAOS_SEED", "0")) or None)
    started = time.monotonic()
    remaining = None
    try:
        for _ in range(int(FAN_BUDGET_S * 2) + 10):  # bounded in count; each round sleeps about a second
            elapsed = time.monotonic() - started
            assert elapsed < FAN_BUDGET_S, f"budget of {FAN_BUDGET_S:.0f}s spent with {remaining} runs unfinished"
            remaining = db.execute("SELECT count(*) FROM flowctl_runs WHERE status NOT IN ('succeeded', 'failed', "
                                   "'cancelled')").fetchone()[0]
            if remaining == 0:
                break
            # kill only while fan-outs are in flight, and never the last worker that is up
            if elapsed < FAN_BUDGET_S / 2:
                candidates = [s for s in range(FAN_WORKERS) if fleet.is_up(s, MIN_UP_S)]
                if len(candidates) > 1:
                    fleet.kill_and_restart(rng.choice(candidates))
            time.sleep(rng.uniform(0.6, 1.4))
        else:
            pytest.fail("chaos loop ran out of rounds")
    finally:
        fleet.terminate_all()
    took = time.monotonic() - started
    statuses = Counter(store.get_run(rid)["status"] for rid in parents)
    assert statuses == Counter({"succeeded": len(parents)}), statuses
    children = [c for rid in parents for c in store.list_runs(parent_id=rid, limit=0)]
    assert len(children) == 5 * len(parents) and {c["status"] for c in children} == {"succeeded"}
    expected = {f"{c['id']}-{leg}" for c in children for leg in ("first", "second")}
    assert {k for (k,) in db.execute("SELECT key FROM chaos_effects")} == expected
    applications = Counter(k for (k,) in db.execute("SELECT key FROM chaos_applications"))
    assert set(applications) == expected and max(applications.values()) == 1, applications.most_common(3)
    assert db.execute("SELECT count(*) FROM chaos_undos").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM chaos_stale_writes").fetchone()[0] == 0
    for rid in parents + [c["id"] for c in children]:
        row = store.get_run(rid)
        assert verify_chain(store.events(rid), row["last_seq"], row["last_hash"]) == [], rid
    assert fleet.kills >= 3, "the chaos loop really killed workers"
    takeovers = sum(1 for rid in parents + [c["id"] for c in children] for ev in store.events(rid)
                    if ev["type"] == "run_resumed" and "orphaned" in (ev.get("data_json") or ""))
    print("\nCHAOS-FANOUT " + json.dumps({"parents": len(parents), "children": len(children), "seconds": round(took, 1),
                                         "sigkills": fleet.kills, "takeovers": takeovers}))
