"""PostgreSQL capacity (docs/scaling.md): CPU per durable step on the server and in flowctl.

One run of the loop flow (:mod:`loop_flow`) of ``transitions`` steps through
``Engine(project, open_store(postgresql://…))`` on a fresh database, after a warm-up run. Measured
over the timed run:

* **server CPU**: user + system time of the PostgreSQL backends serving this database (the
  processes ``pg_stat_activity`` lists for it, read from ``/proc/<pid>/stat`` before and after;
  the WAL writer and checkpointer, shared by every database, are not included);
* **client CPU**: this process's user + system time (``resource.getrusage``);
* **commits**: ``pg_stat_database.xact_commit`` of the database before and after (in the last
  trial, waiting for every backend's statistics to be flushed).

From them: steps per second one core sustains on each side, and cores per 1,000 steps/s.
The server must be on this host (``/proc``); elsewhere the part reports why it skipped.

    python benchmarks/bench_pgcapacity.py [--transitions 3000] [--trials 5]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PG, fresh_pg_database, loadavg, pg_available, write  # noqa: E402
from loop_flow import expected_steps, make_project  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _backend_cpu(conn, name: str) -> dict:
    """``{pid: cpu seconds}`` of the backends connected to database ``name`` (this one excluded)."""
    pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                                       (name,))]
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15 of stat)
    return out


def _commits(conn, name: str) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()[0]


#: Seconds for every backend's statistics to reach ``pg_stat_database``: an idle backend flushes
#: its counters within PostgreSQL's idle interval (10 s), so commits are counted in one trial only.
STATS_FLUSH_S = 11.0


def trial(project, transitions: int, admin: str = PG, *, count_commits: bool = False) -> dict:
    import psycopg

    import flowctl
    from flowctl.store.sql import open_store

    with fresh_pg_database(admin) as url:
        name = url.rsplit("/", 1)[1]
        store = open_store(url)
        try:
            engine = flowctl.Engine(project, store, check=False)
            engine.run("loop", {})  # warm: connections, prepared statements
            with psycopg.connect(url, autocommit=True) as watch:
                if count_commits:
                    time.sleep(STATS_FLUSH_S)
                    c0 = _commits(watch, name)
                s0 = _backend_cpu(watch, name)
                r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                result = engine.run("loop", {})
                wall = time.perf_counter() - t0
                r1, s1 = resource.getrusage(resource.RUSAGE_SELF), _backend_cpu(watch, name)
                commits = None
                if count_commits:
                    time.sleep(STATS_FLUSH_S)
                    commits = _commits(watch, name) - c0 - 1  # less the first _commits's own read
        finally:
            store.close()
    assert result.status == "succeeded" and result.steps == expected_steps(transitions)
    server = sum(v - s0.get(pid, 0.0) for pid, v in s1.items())
    client = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return {"wall_s": wall, "server_cpu_s": server, "client_cpu_s": client, "commits": commits, "steps": transitions}


def run(transitions: int = 3000, trials: int = 5) -> dict:
    reason = pg_available()
    if reason or not Path("/proc/self/stat").exists():
        return {"skipped": reason or "no /proc here"}
    import flowctl

    with tempfile.TemporaryDirectory(prefix="flowctl-bench-pgcap-") as tmp:
        project = flowctl.load_project(make_project(Path(tmp), transitions))
        before = loadavg()
        samples = [trial(project, transitions, count_commits=i == trials - 1) for i in range(trials)]
        after = loadavg()
    per = {k: statistics.median(s[k] / s["steps"] for s in samples) for k in ("wall_s", "server_cpu_s", "client_cpu_s")}
    commits = next(s["commits"] / s["steps"] for s in samples if s["commits"] is not None)
    server_us, client_us = per["server_cpu_s"] * 1e6, per["client_cpu_s"] * 1e6
    return {
        "transitions": transitions, "trials": trials, "loadavg_before": before, "loadavg_after": after,
        "samples": samples,
        "us_per_step": {"wall": per["wall_s"] * 1e6, "server_cpu": server_us, "client_cpu": client_us},
        "commits_per_step": commits,
        "steps_per_s_per_core": {"server": 1e6 / server_us if server_us else None,
                                 "client": 1e6 / client_us if client_us else None},
        "cores_per_1000_steps_per_s": {"server": server_us / 1e3, "client": client_us / 1e3},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=3000)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    result = run(args.transitions, args.trials)
    write("pgcapacity", result)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
