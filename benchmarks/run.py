"""`make bench`: every benchmark of issues 8, 9 and 17 in one run on this machine; results to
benchmarks/results/latest.json and the tables in BENCHMARKS.md (written by :mod:`report`).

Each number is a median over repeated trials taken in the same run, the trials of the things
compared interleaved so that they see the same machine load (recorded as ``os.getloadavg()``
before and after each part). PostgreSQL numbers are included when the server at
FLOWCTL_BENCH_PG (default postgresql://postgres@127.0.0.1:5432/test) answers; every trial gets a
fresh database, dropped after it.

    python benchmarks/run.py [--quick] [--only memory,durable,map,validate,cold,policy,diff,workers,pgcapacity,scaling,regression,serve,console,otel,events,model]
    python benchmarks/run.py --only serve,workers --update   # those parts again, merged into latest.json and BENCHMARKS.md
    python benchmarks/run.py --render   # BENCHMARKS.md again from results/latest.json, measuring nothing

A full run took 19 minutes on this shared 2-core machine with a load average of 3–8 from other
processes (the biggest sizes are time-boxed: a size that runs out of its box is reported as "more
than"; the 10,000-item SQLite map alone may take its 2-minute box); ``--quick`` about 2 minutes,
at small sizes: a smoke test whose numbers are not to be quoted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_cold  # noqa: E402
import bench_console  # noqa: E402
import bench_diff  # noqa: E402
import bench_durable  # noqa: E402
import bench_events  # noqa: E402
import bench_map  # noqa: E402
import bench_memory  # noqa: E402
import bench_model  # noqa: E402
import bench_pgcapacity  # noqa: E402
import bench_regression  # noqa: E402
import bench_policy  # noqa: E402
import bench_scaling  # noqa: E402
import bench_otel  # noqa: E402
import bench_serve  # noqa: E402
import bench_validate  # noqa: E402
import bench_workers  # noqa: E402
from common import PG, RESULTS, ROOT, loadavg, machine, write  # noqa: E402
from report import render  # noqa: E402

# Sizes of the full run (`make bench`, under 20 minutes on 2 cores) and of --quick (a smoke test).
FULL = {"memory": {"transitions": 60_000, "trials": 5}, "durable": {"transitions": 1_200, "trials": 5},
        "map": {"items": 1000, "trials": 5, "loop_transitions": 3000, "sqlite": (1000, 10000), "box_s": 120.0},
        "validate": {"repeat": 5}, "cold": {"trials": 15}, "policy": {"n": 2000}, "diff": {"states": 1000, "repeat": 5},
        "workers": {"runs": 400, "trials": 5}, "pgcapacity": {"transitions": 3000, "trials": 5},
        "scaling": {"store_sizes": (1000, 10000, 100000), "lengths": (9999, 99999), "flows": 1000, "paused": 10000,
                    "trials": 5, "box_s": 60.0},
        "regression": {"transitions": 6000, "sqlite_transitions": 900, "trials": 5},
        "console": {"store_sizes": (1000, 100000), "trials": 5},
        "serve": {"single": 1000, "per_client": 250, "trials": 10, "rounds": 5}, "otel": {"transitions": 12000, "trials": 7},
        "events": {"events": 1_000_000, "days": 7.0, "trials": 5},
        "model": {"delay": 0.3, "trials": 15, "zero_trials": 60}}
QUICK = {"memory": {"transitions": 3_000, "trials": 5}, "durable": {"transitions": 150, "trials": 5},
         "map": {"items": 200, "trials": 5, "loop_transitions": 300, "sqlite": (200, 1000), "box_s": 30.0},
         "validate": {"repeat": 1, "flows": 100}, "cold": {"trials": 5}, "policy": {"n": 300}, "diff": {"states": 200, "repeat": 1},
         "workers": {"runs": 60, "trials": 1}, "pgcapacity": {"transitions": 300, "trials": 1}, "scaling": bench_scaling.QUICK,
         "regression": {"transitions": 1500, "sqlite_transitions": 150, "trials": 3}, "console": bench_console.QUICK,
         "serve": {"single": 200, "per_client": 50, "trials": 3, "rounds": 2}, "otel": {"transitions": 1500, "trials": 3},
         "events": bench_events.QUICK,
         "model": {"delay": 0.3, "trials": 3, "zero_trials": 10}}
PARTS = {"memory": bench_memory.run, "durable": bench_durable.run, "map": bench_map.run, "validate": bench_validate.run,
         "cold": bench_cold.run, "policy": bench_policy.run, "diff": bench_diff.run, "workers": bench_workers.run,
         "pgcapacity": bench_pgcapacity.run, "scaling": bench_scaling.run, "regression": bench_regression.run,
         "console": bench_console.run, "serve": bench_serve.run, "otel": bench_otel.run, "events": bench_events.run,
         "model": bench_model.run}
TITLES = {"memory": "in-memory step: flowctl vs transitions vs python-statemachine vs the bare loop",
          "durable": "durable step: flowctl vs DBOS vs raw sqlite3 / psycopg, SQLite and PostgreSQL",
          "map": "map fan-out: in memory (1, 8, 32 at once) and on SQLite (1k / 10k items)",
          "pgcapacity": "PostgreSQL capacity: server and client CPU per durable step",
          "scaling": "scaling: store size, paused runs, run length, project size",
          "validate": "validate: 10,000 states / 1,000 flows vs PyYAML's C loader",
          "cold": "CLI cold start", "policy": "policy decision latency", "diff": "diff of two 1,000-state projects",
          "workers": "1, 2 and 4 worker processes on PostgreSQL: flowctl worker vs DBOS queues",
          "regression": "the step before and after the engine redesign (issue 16), side by side",
          "console": "the operator console's pages with 100,000 stored runs (issue 20)",
          "serve": "flowctl serve on loopback: gate check p50/p99 (1 and 8 clients), session invoke overhead, against a bare Starlette route (the floor)",
          "otel": "OpenTelemetry: the in-memory step with tracing off, on (spans dropped) and without the hooks",
          "events": "flowctl events with 1,000,000 stored events: by tool over the last hour, by run (SQLite, PostgreSQL)",
          "model": "model step (issue 18): one llm state vs the direct SDK call to the same local server"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one trial: a smoke test, not numbers to quote")
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts to run (default: all)")
    parser.add_argument("--update", action="store_true",
                        help="with --only: put the parts measured now into results/latest.json (each noted as measured "
                             "again on its own, with its commit and load) and write BENCHMARKS.md from it")
    parser.add_argument("--render", action="store_true",
                        help="measure nothing: write BENCHMARKS.md again from results/latest.json (after editing report.py)")
    args = parser.parse_args(argv)
    if args.render:
        results = json.loads((RESULTS / "latest.json").read_text())
        (ROOT / "BENCHMARKS.md").write_text(render(results, commands()))
        print("wrote BENCHMARKS.md from results/latest.json")
        return 0
    sizes = QUICK if args.quick else FULL
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}; choose from {list(PARTS)}")

    started = time.time()
    results = {"machine": machine(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
               "quick": args.quick, "sizes": {p: sizes[p] for p in parts}, "loadavg_start": loadavg(),
               "pg_admin_url": PG, "commands": commands(), "code": code_state()}
    for part in parts:
        print(f"{part}: {TITLES[part]} {sizes[part]} ...", flush=True)
        t = time.time()
        try:
            results[part] = PARTS[part](**sizes[part])
        except Exception as exc:  # noqa: BLE001 - one broken part must not lose the others' numbers
            import traceback

            results.setdefault("errors", {})[part] = traceback.format_exc()[-3000:]
            print(f"  {part} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            continue
        results[part]["part_seconds"] = time.time() - t
        if not args.quick:
            write(part, results[part])  # results/<part>.json, as the part's own script writes it
        print(f"  {time.time() - t:.0f} s, load average {loadavg()}", flush=True)
    results["loadavg_end"] = loadavg()
    results["seconds"] = time.time() - started
    full = not args.quick and set(parts) == set(PARTS)  # a part that failed is listed in BENCHMARKS.md
    if args.update and not full and not args.quick:
        update(results, parts)
        return 0
    path = write("latest" if full else ("quick" if args.quick else "partial"), results)  # latest = a full run only
    if full:
        (ROOT / "BENCHMARKS.md").write_text(render(results, commands()))
        print(f"wrote {path} and BENCHMARKS.md ({results['seconds']:.0f} s)")
    else:
        if args.quick:  # to look at the tables; not committed as BENCHMARKS.md
            (RESULTS / "quick.md").write_text(render(results, commands()))
        print(f"wrote {path} (BENCHMARKS.md is only written by a full run of every part)")
    return 0


def update(results: dict, parts: list) -> None:
    """Merge the ``parts`` of a partial run (``results``) into ``results/latest.json``: each part's
    figures and sizes replaced, and noted under ``remeasured`` (when, at which commit, the load
    before and after), which BENCHMARKS.md's header lists; then BENCHMARKS.md is written from it."""
    path = RESULTS / "latest.json"
    latest = json.loads(path.read_text())
    for part in parts:
        if part not in results:  # it failed: the old figures stay, and so does its error
            continue
        latest[part] = results[part]
        latest.setdefault("sizes", {})[part] = results["sizes"][part]
        latest.setdefault("remeasured", {})[part] = {k: results[k] for k in ("started", "code")} | {
            "loadavg_start": results["loadavg_start"], "loadavg_end": results["loadavg_end"]}
        latest.get("errors", {}).pop(part, None)
    write("latest", latest)
    (ROOT / "BENCHMARKS.md").write_text(render(latest, commands()))
    print(f"merged {', '.join(p for p in parts if p in results)} into {path} and wrote BENCHMARKS.md")


def code_state() -> dict:
    """The commit measured, and whether runtime/ had uncommitted changes (others edit it meanwhile)."""
    import subprocess

    def git(*a):
        done = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    dirty = git("status", "--porcelain", "--", "runtime")
    return {"commit": git("rev-parse", "--short", "HEAD"), "runtime_uncommitted_changes": bool(dirty) if dirty is not None else None}


def commands() -> dict:
    return {
        "all": "make bench   # = .venv/bin/pip install -e '.[bench]' && .venv/bin/python benchmarks/run.py",
        "memory": "python benchmarks/bench_memory.py --transitions 60000 --trials 5",
        "durable": "python benchmarks/bench_durable.py --transitions 1200 --trials 5",
        "map": "python benchmarks/bench_map.py --items 1000 --trials 5 --sqlite-sizes 1000,10000 --box 120",
        "validate": "python benchmarks/bench_validate.py --trials 5",
        "cold": "python benchmarks/bench_cold.py --trials 15",
        "policy": "python benchmarks/bench_policy.py",
        "diff": "python benchmarks/bench_diff.py --states 1000 --repeat 5",
        "workers": "python benchmarks/bench_workers.py --runs 400 --trials 5   # needs PostgreSQL",
        "pgcapacity": "python benchmarks/bench_pgcapacity.py --transitions 3000 --trials 5",
        "scaling": "python benchmarks/bench_scaling.py --store 1000,10000,100000 --steps 9999,99999 --box 60",
        "regression": "python benchmarks/bench_regression.py --base 8da1c8a --trials 5",
        "console": "python benchmarks/bench_console.py --trials 5   # the console's pages, 1,000 and 100,000 runs",
        "events": "python benchmarks/bench_events.py --events 1000000 --trials 5   # issue 21: events across runs",
        "model": "python benchmarks/bench_model.py --delay 0.3 --trials 15 --zero-trials 60   # about 20 s",
        "profile": "python benchmarks/profile_steps.py --pg   # cProfile of flowctl's step: memory, SQLite, PostgreSQL",
    }


if __name__ == "__main__":
    sys.exit(main())
