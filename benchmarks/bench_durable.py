"""Durable step (issue 8, part 2): the loop of :mod:`loop_flow` with a checkpoint per step.

SQLite (a fresh file per trial):

* floor — raw ``sqlite3`` (WAL, ``synchronous=NORMAL``): the bare loop's work plus one
  transaction per step doing one INSERT (the step's output) and one UPDATE (the run's cursor);
* flowctl — ``Engine(project, open_store("sqlite:///…"), check=False)`` (WAL, ``synchronous=NORMAL``:
  that is the store's own setting);
* DBOS — a ``@DBOS.workflow`` calling the tool as a ``@DBOS.step`` per transition, evaluating the
  same compiled condition, with the same pragmas as flowctl (WAL, ``synchronous=NORMAL``, set on
  every connection by an SQLAlchemy ``connect`` listener), and again with DBOS's own defaults
  (rollback journal, ``synchronous=FULL``).

PostgreSQL (the server at ``FLOWCTL_BENCH_PG``; a fresh database per trial, dropped after):

* floor — raw ``psycopg`` in autocommit: one statement per step, the UPDATE of the run row and
  the INSERT of the step's output in one CTE (one round trip, one commit — as many as flowctl's
  step makes);
* flowctl — ``open_store("postgresql://…")``;
* DBOS — the same workflow with ``system_database_url`` on that server.

Group commit (issue 17, 2b): 8 runs of the flow driven at once by 8 threads sharing one flowctl
SQLite store, against the same 8 runs one after the other on one store; steps/s of each.

Beside the wall times, ``cpu_us_per_step`` gives the process's CPU time per step of the SQLite floor
and of flowctl on SQLite (both run in process), and ``cpu_ratio_to_floor``: on a loaded machine
it moves less than the wall-time ratio (the target stays the wall-time ratio).

DBOS runs in a child process per trial (its singleton, threads and loggers stay out of the other
contenders' way); every contender's time covers only the run itself, not opening the store,
migrations or ``DBOS.launch()``. Trials are interleaved, one of each per round.

    python benchmarks/bench_durable.py [--transitions 1200] [--trials 3] [--no-pg]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import PG, fresh_pg_database, interleaved, loadavg, pg_available, stats, write  # noqa: E402
from loop_flow import CONDITIONS, NEXT, drive, expected_steps, make_project, tool  # noqa: E402
from report import target  # noqa: E402

CONCURRENT = 8            # runs driven at once for the group-commit measurement
GROUP_TRANSITIONS = 150   # steps of each of those runs
#: CPU seconds of this process (``time.process_time``) over the timed part of each in-process SQLite
#: trial: beside the wall-time target, a figure a loaded machine disturbs less (SQLite runs in process)
_CPU: dict = {"sqlite floor": [], "flowctl sqlite": []}


# ----------------------------------------------------------------------------- floors
def _floor_steps(transitions: int, checkpoint) -> None:
    """The bare loop, with ``checkpoint(step_no, state, output_json, context_json)`` after each step."""
    visits = {"a": 0, "b": 0, "c": 0}
    context = {"n": 0}
    state = "a"
    for i in range(transitions):
        visits[state] += 1
        response = tool({"n": context["n"]})
        if not CONDITIONS[state]({"visits": visits, "response": response, "context": context}):
            raise AssertionError("condition false")
        context = {"n": response["n"]}
        state = NEXT[state]
        checkpoint(i, state, json.dumps(response), json.dumps(context))


def sqlite_floor(path: str, transitions: int) -> float:
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, state TEXT, context TEXT, seq INTEGER)")
    conn.execute("CREATE TABLE steps (run_id TEXT, seq INTEGER, state TEXT, output TEXT, PRIMARY KEY (run_id, seq))")
    conn.execute("INSERT INTO runs VALUES ('r1', 'a', '{}', 0)")

    def checkpoint(i, state, output, context):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO steps VALUES ('r1', ?, ?, ?)", (i, state, output))
        conn.execute("UPDATE runs SET state = ?, context = ?, seq = ? WHERE id = 'r1'", (state, context, i))
        conn.execute("COMMIT")

    started, cpu = time.perf_counter(), time.process_time()
    _floor_steps(transitions, checkpoint)
    took = time.perf_counter() - started
    _CPU["sqlite floor"].append(time.process_time() - cpu)
    assert conn.execute("SELECT count(*) FROM steps").fetchone()[0] == transitions
    conn.close()
    return took


def psycopg_floor(url: str, transitions: int) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, state TEXT, context TEXT, seq INTEGER)")
        conn.execute("CREATE TABLE steps (run_id TEXT, seq INTEGER, state TEXT, output TEXT, PRIMARY KEY (run_id, seq))")
        conn.execute("INSERT INTO runs VALUES ('r1', 'a', '{}', 0)")
        cur = conn.cursor()
        # one statement, one round trip, one (auto)commit per step: the run row and the step's output together
        sql = ("WITH moved AS (UPDATE runs SET state = %s, context = %s, seq = %s WHERE id = 'r1' RETURNING id) "
               "INSERT INTO steps SELECT id, %s, %s, %s FROM moved")

        def checkpoint(i, state, output, context):
            cur.execute(sql, (state, context, i, i, state, output))

        started = time.perf_counter()
        _floor_steps(transitions, checkpoint)
        took = time.perf_counter() - started
        assert conn.execute("SELECT count(*) FROM steps").fetchone()[0] == transitions
    return took


# ----------------------------------------------------------------------------- flowctl
def flowctl_durable(project, url: str, transitions: int) -> float:
    import flowctl
    from flowctl.store.sql import open_store

    store = open_store(url)
    try:
        engine = flowctl.Engine(project, store, check=False)
        started, cpu = time.perf_counter(), time.process_time()
        result = engine.run("loop", {})
        took = time.perf_counter() - started
        if url.startswith("sqlite"):
            _CPU["flowctl sqlite"].append(time.process_time() - cpu)
        assert result.status == "succeeded" and result.steps == expected_steps(transitions), (result.status, result.steps)
    finally:
        store.close()
    return took


def flowctl_concurrent(project, url: str, transitions: int, runs: int, at_once: bool) -> float:
    """``runs`` runs of the loop on one store: driven by ``runs`` threads at once (``at_once``) or
    one after the other. Wall seconds for all of them."""
    import threading

    import flowctl
    from flowctl.store.sql import open_store

    store = open_store(url)
    results: list = []
    try:
        def one():
            results.append(flowctl.Engine(project, store, check=False).run("loop", {}))

        started = time.perf_counter()
        if at_once:
            threads = [threading.Thread(target=one) for _ in range(runs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            for _ in range(runs):
                one()
        took = time.perf_counter() - started
    finally:
        store.close()
    assert len(results) == runs and all(r.status == "succeeded" and r.steps == expected_steps(transitions)
                                        for r in results), [(r.status, r.error) for r in results]
    return took


# ----------------------------------------------------------------------------- DBOS (child process)
def dbos_child(url: str, transitions: int, pragmas: bool) -> dict:
    """Run in a child process: launch DBOS on ``url``, time one workflow of ``transitions`` steps."""
    import logging

    import sqlalchemy as sa

    if pragmas and url.startswith("sqlite"):
        @sa.event.listens_for(sa.engine.Engine, "connect")
        def _pragmas(dbapi_conn, _record):  # the same durability setting as flowctl's store
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    from dbos import DBOS

    DBOS(config={"name": "flowctl_bench", "system_database_url": url, "log_level": "WARNING"})

    @DBOS.step()
    def call_tool(input):
        return tool(input)

    @DBOS.workflow()
    def loop(n):
        return drive(n, call_tool)

    DBOS.launch()
    logging.getLogger("dbos").setLevel(logging.WARNING)
    try:
        started = time.perf_counter()
        out = loop(transitions)
        took = time.perf_counter() - started
        assert out["n"] == transitions, out
        if url.startswith("sqlite"):
            path = url[len("sqlite:///"):]
            import sqlite3

            with sqlite3.connect(path) as c:
                journal = c.execute("PRAGMA journal_mode").fetchone()[0]
        else:
            journal = None
    finally:
        DBOS.destroy()
    return {"seconds": took, "journal_mode": journal}


def dbos_trial(url: str, transitions: int, pragmas: bool) -> float:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--dbos-child", url, "--transitions", str(transitions)]
    if pragmas:
        cmd.append("--pragmas")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"DBOS child failed ({done.returncode}): {done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if url.startswith("sqlite"):
        assert out["journal_mode"] == ("wal" if pragmas else "delete"), out
    return out["seconds"]


# ----------------------------------------------------------------------------- the benchmark
def _pg_settings(url: str) -> dict:
    import psycopg

    with psycopg.connect(url) as conn:
        return {k: conn.execute(f"SHOW {k}").fetchone()[0] for k in ("server_version", "synchronous_commit", "fsync",
                                                                     "wal_sync_method")}


def run(transitions: int = 1200, trials: int = 3, pg: bool = True, pg_url: str = PG) -> dict:
    import importlib.metadata as md

    import flowctl

    out: dict = {"transitions": transitions, "trials": trials,
                 "group": {"runs": CONCURRENT, "transitions": GROUP_TRANSITIONS}}
    pg_reason = pg_available(pg_url) if pg else "disabled (--no-pg)"
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-durable-") as tmp:
        tmp_path = Path(tmp)
        project = flowctl.load_project(make_project(tmp_path / "project", transitions))
        group_project = flowctl.load_project(make_project(tmp_path / "group", GROUP_TRANSITIONS))
        counter = iter(range(10**6))

        def db_file(kind: str) -> str:
            return str(tmp_path / f"{kind}-{next(counter)}.db")

        def pg_trial(fn):
            def once():
                with fresh_pg_database(pg_url) as url:
                    return fn(url)
            return once

        contenders = {
            "sqlite floor": lambda: sqlite_floor(db_file("floor"), transitions),
            "flowctl sqlite": lambda: flowctl_durable(project, "sqlite:///" + db_file("flowctl"), transitions),
            "DBOS sqlite (WAL, NORMAL)": lambda: dbos_trial("sqlite:///" + db_file("dbos"), transitions, True),
            "DBOS sqlite (its defaults)": lambda: dbos_trial("sqlite:///" + db_file("dbos-default"), transitions, False),
            f"flowctl sqlite, {CONCURRENT} runs at once": lambda: flowctl_concurrent(
                group_project, "sqlite:///" + db_file("group"), GROUP_TRANSITIONS, CONCURRENT, True),
            f"flowctl sqlite, {CONCURRENT} runs one by one": lambda: flowctl_concurrent(
                group_project, "sqlite:///" + db_file("serial"), GROUP_TRANSITIONS, CONCURRENT, False),
        }
        if pg_reason is None:
            contenders.update({
                "psycopg floor": pg_trial(lambda url: psycopg_floor(url, transitions)),
                "flowctl postgresql": pg_trial(lambda url: flowctl_durable(project, url, transitions)),
                "DBOS postgresql": pg_trial(lambda url: dbos_trial(url, transitions, False)),
            })
            out["postgresql"] = _pg_settings(pg_url)
        else:
            out["postgresql_skipped"] = pg_reason
        out["loadavg_before"] = loadavg()
        samples = interleaved(contenders, trials)
        out["loadavg_after"] = loadavg()
    out["versions"] = {p: md.version(p) for p in ("dbos", "sqlalchemy", "psycopg")}
    out["durability"] = {
        "sqlite": "flowctl, the floor and 'DBOS (WAL, NORMAL)': journal_mode=WAL, synchronous=NORMAL (a commit survives "
                  "a process crash; the last commits before an OS crash or power loss may be lost). DBOS's defaults: "
                  "rollback journal, synchronous=FULL.",
        "postgresql": "the server's settings (see 'postgresql'): every COMMIT waits for its WAL flush when "
                      "synchronous_commit=on.",
    }
    out["results"] = {k: stats(v, GROUP_TRANSITIONS * CONCURRENT if "runs" in k else transitions)
                      for k, v in samples.items()}
    out["samples_s"] = samples
    r = {k: v["median_s"] for k, v in out["results"].items()}
    us = {k: v["us_per_op"] for k, v in out["results"].items()}
    out["ratio_to_floor"] = {k: us[k] / us["sqlite floor"] for k in r if "sqlite" in k}
    cpu = {k: statistics.median(v) / transitions * 1e6 for k, v in _CPU.items() if v}
    if len(cpu) == 2:
        out["cpu_us_per_step"] = cpu
        out["cpu_ratio_to_floor"] = cpu["flowctl sqlite"] / cpu["sqlite floor"]
    group = us[f"flowctl sqlite, {CONCURRENT} runs one by one"] / us[f"flowctl sqlite, {CONCURRENT} runs at once"]
    ratios = {"DBOS sqlite (WAL, NORMAL) / flowctl": r["DBOS sqlite (WAL, NORMAL)"] / r["flowctl sqlite"]}
    if "flowctl postgresql" in r:
        out["ratio_to_floor"].update({k: r[k] / r["psycopg floor"] for k in r if "postgresql" in k or "psycopg" in k})
        ratios["flowctl postgresql / one-statement psycopg floor"] = r["flowctl postgresql"] / r["psycopg floor"]
        ratios["DBOS postgresql / flowctl"] = r["DBOS postgresql"] / r["flowctl postgresql"]
    out["targets"] = {
        "2a. SQLite durable step <= 1.5x the raw sqlite3 floor": target(
            r["flowctl sqlite"] / r["sqlite floor"], 1.5, unit="x floor", ratios=ratios),
        "2b. group commit >= 2x steps/s at 8 concurrent runs": target(
            group, 2.0, higher_is_better=True, unit="x one by one",
            ratios={"µs/step at once": us[f"flowctl sqlite, {CONCURRENT} runs at once"],
                    "µs/step one by one": us[f"flowctl sqlite, {CONCURRENT} runs one by one"]}),
    }
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=1200)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--dbos-child", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--pragmas", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dbos_child:
        print(json.dumps(dbos_child(args.dbos_child, args.transitions, args.pragmas)))
        sys.exit(0)
    result = run(args.transitions, args.trials, pg=not args.no_pg)
    write("durable", result)
    print(json.dumps({k: v for k, v in result.items() if k != "samples_s"}, indent=2))
