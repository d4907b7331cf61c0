"""`make bench`: every benchmark of issues 8 and 9 in one run on this machine; results to
benchmarks/results/latest.json and the tables in BENCHMARKS.md.

Each number is a median over repeated trials taken in the same run, the trials of the things
compared interleaved so that they see the same machine load (recorded as ``os.getloadavg()``
before and after each part). PostgreSQL numbers are included when the server at
FLOWCTL_BENCH_PG (default postgresql://postgres@127.0.0.1:5432/test) answers; every trial gets a
fresh database, dropped after it.

    python benchmarks/run.py [--quick] [--only memory,durable,validate,cold,policy,diff,workers]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_cold  # noqa: E402
import bench_diff  # noqa: E402
import bench_durable  # noqa: E402
import bench_memory  # noqa: E402
import bench_policy  # noqa: E402
import bench_validate  # noqa: E402
import bench_workers  # noqa: E402
from common import PG, ROOT, loadavg, machine, write  # noqa: E402

# Sizes of the full run (`make bench`, about 12 minutes on 2 cores) and of --quick (a smoke test).
FULL = {"memory": {"transitions": 99_999, "trials": 3}, "durable": {"transitions": 1_200, "trials": 3},
        "validate": {"repeat": 3}, "cold": {"trials": 15}, "policy": {"n": 2000}, "diff": {"states": 1000, "repeat": 5},
        "workers": {"runs": 400, "trials": 3}}
QUICK = {"memory": {"transitions": 3_000, "trials": 3}, "durable": {"transitions": 150, "trials": 1},
         "validate": {"repeat": 1, "flows": 100}, "cold": {"trials": 3}, "policy": {"n": 300}, "diff": {"states": 200, "repeat": 1},
         "workers": {"runs": 60, "trials": 1}}
PARTS = {"memory": bench_memory.run, "durable": bench_durable.run, "validate": bench_validate.run,
         "cold": bench_cold.run, "policy": bench_policy.run, "diff": bench_diff.run, "workers": bench_workers.run}
TITLES = {"memory": "in-memory step: flowctl vs transitions vs python-statemachine vs the bare loop",
          "durable": "durable step: flowctl vs DBOS vs raw sqlite3 / psycopg, SQLite and PostgreSQL",
          "validate": "validate: 10,000 states / 1,000 flows vs PyYAML's C loader",
          "cold": "CLI cold start", "policy": "policy decision latency", "diff": "diff of two 1,000-state projects",
          "workers": "1, 2 and 4 worker processes on PostgreSQL: flowctl worker vs DBOS queues"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one trial: a smoke test, not numbers to quote")
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts to run (default: all)")
    args = parser.parse_args(argv)
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
        results[part] = PARTS[part](**sizes[part])
        results[part]["part_seconds"] = time.time() - t
        if not args.quick:
            write(part, results[part])  # results/<part>.json, as the part's own script writes it
        print(f"  {time.time() - t:.0f} s, load average {loadavg()}", flush=True)
    results["loadavg_end"] = loadavg()
    results["seconds"] = time.time() - started
    full = not args.quick and set(parts) == set(PARTS)
    path = write("latest" if full else ("quick" if args.quick else "partial"), results)  # latest = a full run only
    if not args.quick and set(parts) == set(PARTS):
        (ROOT / "BENCHMARKS.md").write_text(render(results))
        print(f"wrote {path} and BENCHMARKS.md ({results['seconds']:.0f} s)")
    else:
        print(f"wrote {path} (BENCHMARKS.md is only written by a full run of every part)")
    return 0


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
        "memory": "python benchmarks/bench_memory.py --transitions 99999 --trials 3",
        "durable": "python benchmarks/bench_durable.py --transitions 1200 --trials 3",
        "validate": "python benchmarks/bench_validate.py --trials 3",
        "cold": "python benchmarks/bench_cold.py --trials 15",
        "policy": "python benchmarks/bench_policy.py",
        "diff": "python benchmarks/bench_diff.py --states 1000 --repeat 5",
        "workers": "python benchmarks/bench_workers.py --runs 400 --trials 3   # needs PostgreSQL",
        "profile": "python benchmarks/profile_steps.py --pg   # cProfile of flowctl's step: memory, SQLite, PostgreSQL",
    }


# ----------------------------------------------------------------------------- BENCHMARKS.md
def _us(x: float) -> str:
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def _ratio(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def _load(d: dict) -> str:
    b, a = d.get("loadavg_before"), d.get("loadavg_after")
    fmt = lambda v: "/".join(f"{x:.2f}" for x in v) if v else "n/a"  # noqa: E731
    return f"load average (1/5/15 min) {fmt(b)} before, {fmt(a)} after"


def _targets(d: dict) -> list:
    lines = []
    for name, t in d.get("targets", {}).items():
        verdict = "**met**" if t["met"] else "**not met**"
        if t.get("higher_is_better"):
            by = f"{t['value']:.2f}x (needs ≥ {t['limit']:g}x)"
            if not t["met"]:
                by += f"; short by a factor {t['limit'] / t['value']:.2f}"
        else:
            by = f"{t['value']:.3g} (limit {t['limit']:g})"
            if not t["met"]:
                by += f"; over by a factor {t['value'] / t['limit']:.2f}"
        lines.append(f"- {name}: {verdict} — {by}")
    return lines


def render(r: dict) -> str:
    m = r["machine"]
    v = m["versions"]
    lines = [
        "# Benchmarks",
        "",
        f"Measured by `make bench` on {r['started']} ({r['seconds'] / 60:.1f} min in all). Raw results: "
        "`benchmarks/results/latest.json`. Every number is a median over repeated trials taken in this one run; "
        "the trials of the things compared are interleaved (one of each per round, order rotated) so that they "
        "see the same machine load. Other processes were running on the machine: the load average is recorded "
        "with each part.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m.get('memory', '?')} memory, {m['platform']}, "
        f"Python {m['python']}, SQLite {m.get('sqlite', '?')}, PostgreSQL {m.get('postgresql') or 'not reachable'}.  ",
        f"Load average at start {r.get('loadavg_start')}, at end {r.get('loadavg_end')}.  ",
        f"Code: commit {r.get('code', {}).get('commit')}"
        + (" with uncommitted changes in runtime/" if r.get("code", {}).get("runtime_uncommitted_changes") else "") + ".  ",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val) + ".",
        "",
        "Peers are installed by `pip install -e '.[bench]'` (`make bench` does it): "
        "transitions 0.9.x, python-statemachine 3.x, DBOS 3.x, psycopg 3.",
        "",
        "## Targets at a glance",
        "",
        "| part | target | value | verdict |",
        "| --- | --- | ---: | --- |",
    ]
    for part in ("memory", "durable", "validate", "cold", "policy", "diff"):
        for name, t in r.get(part, {}).get("targets", {}).items():
            value = f"{t['value']:.2f}x" if t.get("higher_is_better") else f"{t['value']:.3g}"
            close = abs(t["value"] / t["limit"] - 1) < 0.1
            verdict = ("met" if t["met"] else "**not met**") + (" (within 10% of the limit)" if close else "")
            lines.append(f"| {part} | {name} | {value} | {verdict} |")
    lines += ["", "A verdict within 10% of its limit can flip between runs on this shared 2-core machine. "
              "What dominates where a target is missed, and what to change: `benchmarks/PROFILE.md`."]

    if "memory" in r:
        s = r["memory"]
        res = s["results"]
        lines += ["", "## 1. In-memory step", "",
                  f"A 3-state cycle a → b → c → a with a trivial tool per state and one JMESPath condition per "
                  f"transition, {s['transitions']:,} transitions for every contender, {s['trials']} interleaved trials; "
                  f"{_load(s)}. flowctl runs `Engine(project, MemoryStore(), check=False).run('loop')`: per step the "
                  "input mapping, input and output schema checks, the tool, the condition, `set` and the audit events. "
                  "The peers call the same tool on entering each state and evaluate the same compiled condition as "
                  "their transition guard; the floor is a bare `for` loop doing only that.", "",
                  "| contender | µs / transition | transitions / s | ratio to floor | ratio to `transitions` |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        labels = {"floor": "floor: bare Python loop, same tool calls and compiled JMESPath",
                  "transitions": f"transitions {s['versions']['transitions']} (`Machine`, condition + on_enter)",
                  "python-statemachine": f"python-statemachine {s['versions']['python-statemachine']} (cond + on_enter)",
                  "flowctl": "flowctl, in-memory store"}
        for k in ("floor", "transitions", "python-statemachine", "flowctl"):
            lines.append(f"| {labels[k]} | {_us(res[k]['us_per_op'])} | {res[k]['ops_per_s']:,.0f} | "
                         f"{_ratio(s['ratio_to_floor'][k])} | {_ratio(s['ratio_to_transitions'][k])} |")
        lines += ["", "Targets (issue 8):", *_targets(s)]

    if "durable" in r:
        s = r["durable"]
        res = s["results"]
        lines += ["", "## 2. Durable step", "",
                  f"The same flow with one checkpoint commit per step, {s['transitions']:,} transitions per run, "
                  f"{s['trials']} interleaved trials, a fresh SQLite file or PostgreSQL database per trial; "
                  f"{_load(s)}. Times cover the run only (not opening the store, migrations or `DBOS.launch()`). "
                  "DBOS: a `@DBOS.workflow` calling the tool as one `@DBOS.step` per transition and evaluating the "
                  "same compiled condition, in a child process per trial.", "",
                  "| store | contender | µs / step | steps / s | ratio to floor |", "| --- | --- | ---: | ---: | ---: |"]
        for k, val in res.items():
            store = "PostgreSQL" if ("postgresql" in k or "psycopg" in k) else "SQLite"
            lines.append(f"| {store} | {k} | {_us(val['us_per_op'])} | {val['ops_per_s']:,.0f} | "
                         f"{_ratio(s['ratio_to_floor'][k])} |")
        if "postgresql" in s:
            pg = s["postgresql"]
            lines += ["", f"PostgreSQL {pg['server_version']}: synchronous_commit={pg['synchronous_commit']}, "
                          f"fsync={pg['fsync']}, wal_sync_method={pg['wal_sync_method']}."]
        elif "postgresql_skipped" in s:
            lines += ["", f"PostgreSQL skipped: {s['postgresql_skipped']}"]
        lines += ["", "Durability: " + s["durability"]["sqlite"] + " PostgreSQL: " + s["durability"]["postgresql"],
                  "", "Floors: the bare loop's work plus, per step, raw `sqlite3` doing `BEGIN IMMEDIATE`, one `INSERT` "
                  "(the step's output), one `UPDATE` (the run row), `COMMIT`; or raw `psycopg` doing one `INSERT`, one "
                  "`UPDATE` and `commit()` (a round trip each, plus `BEGIN`).",
                  "", "Targets (issue 8):", *_targets(s)]

    if "validate" in r:
        s = r["validate"]
        lines += ["", "## 3. Validate", "",
                  f"A generated project of {s['files']:,} files (10,000 states, 1,000 flows), {s['trials']} alternating "
                  f"trials; {_load(s)}.", "",
                  "| what | seconds | ratio to floor |", "| --- | ---: | ---: |",
                  f"| floor: parse the {s['files']:,} files with PyYAML's C loader | {s['parse_floor_s']:.2f} | 1.00 |",
                  f"| `flowctl.validate(flowctl.load_project(root))` in process | {s['validate_library_s']:.2f} | "
                  f"{s['ratio_library_to_floor']:.2f} |",
                  f"| `flowctl validate --root ROOT` (CLI, fresh process) | {s['validate_cli_s']:.2f} | "
                  f"{s['ratio_cli_to_floor']:.2f} |",
                  "", "Targets (issue 8):", *_targets(s)]

    if "cold" in r:
        s = r["cold"]
        lines += ["", "## 4. CLI cold start", "",
                  f"A fresh process each, {s['trials']} interleaved trials after one warm-up; {_load(s)}.", "",
                  "| command | seconds | over `python -c pass` |", "| --- | ---: | ---: |"]
        lines += [f"| `{s['commands'][k]}`{' (in the repo root: the shipped example project)' if 'examples' in k else ''} | "
                  f"{val['median_s']:.3f} | {s['over_python_s'][k]:.3f} |"
                  for k, val in s["results"].items()]
        lines += ["", "Targets (issue 8):", *_targets(s)]

    if "policy" in r:
        p = r["policy"]
        lines += ["", "## 5a. Policy decision latency", "",
                  f"`Gate.decide` for a side-effecting tool with four allow checks, a rate limit and dedupe, "
                  f"{p['memory']['decisions']:,} decisions per store; {_load(p)}.", "",
                  "| store | p50 ms | p99 ms |", "| --- | ---: | ---: |"]
        lines += [f"| {k} | {p[k]['p50_ms']:.3f} | {p[k]['p99_ms']:.3f} |" for k in ("memory", "sqlite")]
        lines += ["", "Targets (issue 5):", *_targets(p)]

    if "diff" in r:
        d = r["diff"]
        parts = d["parts_median_seconds"]
        lines += ["", "## 5b. Diff", "",
                  f"`flowctl diff` of two generated projects ({d['states']['base']:,} / {d['states']['head']:,} states, "
                  f"{d['flows']} flows; {d['changes'].get('flows_affected', '?')} flows affected), median of "
                  f"{d['repeat']}; {_load(d)}.", "",
                  "| what | seconds |", "| --- | ---: |",
                  f"| end to end: load both folders, compare, render text | {d['median_seconds']:.3f} |"]
        lines += [f"| {k.replace('_', ' ')} | {val:.4f} |" for k, val in parts.items()]
        lines += ["", "Targets (issue 4):", *_targets(d)]

    if "workers" in r:
        lines += _render_workers(r["workers"])

    lines += ["", "## Reproduce", "", "```sh"]
    lines += list({**r.get("commands", {}), **commands()}.values())
    lines += ["```", "",
              "Each `bench_*.py` also runs alone (it then writes `benchmarks/results/<part>.json`); "
              "`python benchmarks/run.py --quick` is a smoke test of the whole run. The PostgreSQL server is "
              "`FLOWCTL_BENCH_PG` (default `postgresql://postgres@127.0.0.1:5432/test`); each trial creates a "
              "database there and drops it. Profile findings: `benchmarks/PROFILE.md`.", ""]
    return "\n".join(lines)


def _render_workers(w: dict) -> list:
    lines = ["", "## 6. Workers on PostgreSQL (issue 9)", ""]
    if "skipped" in w:
        return lines + [f"Skipped: {w['skipped']}"]
    pg = w.get("postgresql", {})
    lines += [f"{w['runs']:,} queued runs of a 3-step flow (the trivial tool of section 1 in three task states) "
              f"drained by K worker processes, each driving up to {w['concurrency']} runs at once; flowctl "
              f"`flowctl worker --concurrency {w['concurrency']}` vs DBOS {w['versions']['dbos']} queue workers "
              f"(`worker_concurrency={w['concurrency']}`, polling every {w['dbos_polling_interval_s']:g} s), a fresh "
              f"database per trial on PostgreSQL {pg.get('server_version', '?')} (synchronous_commit="
              f"{pg.get('synchronous_commit', '?')}), {w['trials']} interleaved trials; {_load(w)}. "
              "Runs/s = runs / drain; the drain runs from the start signal given to workers that are already up "
              "(runs queued, processes started and initialised beforehand, not timed) to the last run's final commit. "
              "Step commit: wall time of the transaction that makes one step durable, timed inside the workers "
              "(flowctl `SqlStore.commit` ending a task state; DBOS `record_operation_result`); p50/p99 over every "
              "step of a trial, median over trials.", "",
              "| system | workers | runs / s | drain s | scaling vs 1 worker | step commit p50 ms | p99 ms |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, x in w["results"].items():
        lines.append(f"| {x['system']} | {x['workers']} | {x['runs_per_s']:,.0f} | {x['drain_s']:.2f} | "
                     f"{w['scaling_vs_1_worker'].get(name, float('nan')):.2f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} |")
    ratio = w.get("flowctl_over_dbos_runs_per_s", {})
    if ratio:
        lines += ["", "flowctl runs/s over DBOS's, same workers: "
                  + ", ".join(f"{k} worker{'s' if int(k) > 1 else ''} {v:.2f}x" for k, v in ratio.items()) + "."]
    lines += ["", *[f"- {n}" for n in w.get("notes", [])]]
    return lines


if __name__ == "__main__":
    sys.exit(main())
