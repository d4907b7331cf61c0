"""Scaling (issue 17, targets 4–6): costs that must not grow with the store, the run or the project.

* **Store size** — a SQLite store holding 1,000 / 10,000 / 100,000 runs: in process, on an open
  store, the latency of ``list_runs`` (what ``flowctl runs`` shows: the 50 newest top-level
  runs), ``list_runs(status="failed")`` (``runs --status``), ``get_run`` of a unique id prefix,
  and ``stats`` (:func:`flowctl.cli.commands.stats.compute`, the latest 1,000 runs). The store is
  filled by running a few real runs through the engine and copying their rows (every table that
  has a ``run_id`` column, and the run row) under new ids and creation times, one in ten marked
  failed. Also: ``flowctl run`` in process with 10,000 paused runs (copies of one real paused
  review) against none, and whether the gate's rate table has an index on its tool and time.
* **Run length** — one run of 10,000 / 100,000 steps (:mod:`loop_flow` on SQLite): its µs/step,
  then ``flowctl trace RUN`` and ``flowctl audit verify RUN`` as child processes, wall time and
  peak RSS (``os.wait4``), each stopped after a time box.
* **Project size** — a generated project of 10,000 states (:mod:`gen_project`, 1,000 flows):
  ``flowctl runs`` and a 10-step ``flowctl run`` (flow ``flow0``: 10 task states), child processes.

Each latency is a median over ``trials`` interleaved trials with its min–max. Sizes are given
per harness; a size whose work runs out of its time box is reported as "more than" the box.

    python benchmarks/bench_scaling.py [--quick] [--store 1000,10000,100000] [--steps 9999,99999]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FLOWCTL, interleaved, loadavg, stats, write  # noqa: E402
from gen_project import generate  # noqa: E402
from loop_flow import expected_steps, make_project  # noqa: E402
from report import target  # noqa: E402

HOLD_STATE = "id: hold\ntype: review\nshow: {n: input.n}\ndecisions: [ok]\ntimeout: 1d\non_timeout: {goto: stuck}\n"
HOLD_FLOW = "flow: hold\nstart: hold\ntransitions:\n  - {from: hold, to: done}\n"
LIMIT_MS = 20.0


# ----------------------------------------------------------------------------- filling a store
def seed_project(root: Path) -> Path:
    """The 3-step loop project plus a flow ``hold`` that pauses at a review (1 day deadline)."""
    make_project(root, 3)
    (root / "orchestration" / "states" / "hold.yaml").write_text(HOLD_STATE)
    (root / "orchestration" / "transitions" / "hold.yaml").write_text(HOLD_FLOW)
    return root


def run_seeds(project, url: str, flow: str, n: int) -> list:
    """Run ``flow`` ``n`` times through the engine; the run ids."""
    import flowctl
    from flowctl.store.sql import open_store

    store = open_store(url)
    try:
        engine = flowctl.Engine(project, store, check=False)
        return [engine.run(flow, {}).run_id for _ in range(n)]
    finally:
        store.close()


def clone_runs(path: str, seeds: list, copies: int, *, status: str | None = None, failed_every: int = 0,
               start: float | None = None) -> list:
    """Copy the rows of the ``seeds`` runs ``copies`` times in all (round robin) under new ids,
    directly in the SQLite file ``path``: the run row (``created_at``/``updated_at`` one second
    apart, ending now) and the rows of every other table with a ``run_id`` column except the gate
    log and the ledger. ``status``: the copies' status (default the seed's); ``failed_every``: every k-th copy
    is marked failed. The new ids."""
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        cols = {t: [c[1] for c in conn.execute(f"PRAGMA table_info({t})")] for t in tables}
        # not the ledger (schema 11): a chain of its own, one row per run start and end of the seeds;
        # the copies are not in it (so `audit verify --all` of such a store reports them)
        children = [t for t in tables if "run_id" in cols[t] and "gate" not in t and "ledger" not in t]
        run_cols = cols["flowctl_runs"]
        seed_rows = {s: conn.execute("SELECT * FROM flowctl_runs WHERE id = ?", (s,)).fetchone() for s in seeds}
        child_rows = {(t, s): conn.execute(f"SELECT * FROM {t} WHERE run_id = ?", (s,)).fetchall()
                      for t in children for s in seeds}
        now = start or time.time()
        rng = random.Random(17)
        ids, batch_runs, batch_children = [], [], {t: [] for t in children}
        i_id, i_created, i_updated, i_status = (run_cols.index(c) for c in ("id", "created_at", "updated_at", "status"))
        for i in range(copies):
            seed = seeds[i % len(seeds)]
            at = now - (copies - i)
            new_id = f"{int(at * 1000):012x}{rng.getrandbits(48):012x}"
            row = list(seed_rows[seed])
            row[i_id], row[i_created], row[i_updated] = new_id, at, at
            if status:
                row[i_status] = status
            if failed_every and i % failed_every == 0:
                row[i_status] = "failed"
            batch_runs.append(row)
            for t in children:
                k = cols[t].index("run_id")
                batch_children[t].extend([*r[:k], new_id, *r[k + 1:]] for r in child_rows[(t, seed)])
            ids.append(new_id)
        conn.executemany(f"INSERT INTO flowctl_runs VALUES ({','.join('?' * len(run_cols))})", batch_runs)
        for t in children:
            conn.executemany(f"INSERT INTO {t} VALUES ({','.join('?' * len(cols[t]))})", batch_children[t])
        conn.commit()
        return ids
    finally:
        conn.close()


def gate_rate_index(path: str) -> dict:
    """The gate log's indexes (``{name: [columns]}``) and whether one leads with the tool and holds the
    time (what the rate count's ``WHERE tool = ? AND <scope> = ? AND at >= ?`` needs)."""
    conn = sqlite3.connect(path)
    try:
        table = next((r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE "
                                                 "'%gate%'")), None)
        if table is None:
            return {"table": None, "indexes": {}, "has_rate_index": False}
        idx = {r[1]: [c[2] for c in conn.execute(f"PRAGMA index_info('{r[1]}')")]
               for r in conn.execute(f"PRAGMA index_list('{table}')")}
        ok = any(cs and cs[0] in ("tool", "scope") and "tool" in cs and "at" in cs for cs in idx.values())
        return {"table": table, "indexes": idx, "has_rate_index": ok}
    finally:
        conn.close()


# ----------------------------------------------------------------------------- store size
def store_size(sizes, trials: int, tmp: Path) -> dict:
    import flowctl
    from flowctl.cli.commands.stats import compute
    from flowctl.store.sql import open_store

    root = seed_project(tmp / "seed")
    project = flowctl.load_project(root)
    out: dict = {}
    for n in sizes:
        path = str(tmp / f"store-{n}.db")
        url = "sqlite:///" + path
        seeds = run_seeds(project, url, "loop", 10)
        t = time.perf_counter()
        ids = clone_runs(path, seeds, n - len(seeds), failed_every=10)
        fill_s = time.perf_counter() - t
        prefix = ids[len(ids) // 2][:14]
        store = open_store(url)
        try:
            calls = {
                "runs": lambda: store.list_runs(limit=50, top_level=True),
                "runs --status failed": lambda: store.list_runs(status="failed", limit=50, top_level=True),
                "run-id prefix": lambda: store.get_run(prefix),
                "stats": lambda: compute(store),
            }
            for fn in calls.values():
                fn()  # warm: connection pool, statement caches

            def timed(fn):
                def once():
                    started = time.perf_counter()
                    fn()
                    return time.perf_counter() - started
                return once

            samples = interleaved({k: timed(f) for k, f in calls.items()}, trials)
        finally:
            store.close()
        out[str(n)] = {"runs": n, "fill_s": fill_s,
                       "ms": {k: {**stats(v), "median_ms": stats(v)["median_s"] * 1e3} for k, v in samples.items()}}
    out["gate"] = gate_rate_index(str(tmp / f"store-{sizes[0]}.db"))
    return out


def paused_start(paused: int, trials: int, tmp: Path) -> dict:
    """``flowctl run loop`` in process (click's test runner) on a store with ``paused`` paused runs,
    against one with none; medians."""
    import flowctl
    from click.testing import CliRunner

    from flowctl.cli.main import main

    root = seed_project(tmp / "paused")
    project = flowctl.load_project(root)
    urls = {}
    for label, count in (("none", 0), (f"{paused:,} paused", paused)):
        path = str(tmp / f"paused-{count}.db")
        urls[label] = "sqlite:///" + path
        run_seeds(project, urls[label], "loop", 1)
        if count:
            clone_runs(path, run_seeds(project, urls[label], "hold", 1), count, status="paused")
    runner = CliRunner()

    def start(url):
        def once():
            started = time.perf_counter()
            done = runner.invoke(main, ["run", "loop", "--root", str(root), "--db", url])
            took = time.perf_counter() - started
            assert done.exit_code == 0, done.output
            return took
        return once

    for url in urls.values():
        start(url)()  # warm: imports, byte-code
    samples = interleaved({k: start(u) for k, u in urls.items()}, trials)
    return {"paused": paused, "results": {k: stats(v) for k, v in samples.items()}}


# ----------------------------------------------------------------------------- child processes
#: Runs the command given as its arguments, output discarded, and prints ``{seconds, exit_code,
#: peak_rss_mb}``: the peak RSS of that child alone. (Measured from this benchmark's own process,
#: ``ru_maxrss`` would include the memory of the parent copied at ``fork``, before ``exec``.)
_LAUNCHER = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
took = time.perf_counter() - t
print(json.dumps({"seconds": took, "exit_code": done.returncode,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "stderr": done.stderr.decode(errors="replace")[-500:] if done.returncode else ""}))
"""


def measure_child(argv, box_s: float, cwd=None) -> dict:
    """Run ``argv`` with its output discarded; ``{seconds, peak_rss_mb, exit_code}`` or, past
    ``box_s`` seconds, ``{timed_out_after_s, seconds: None, peak_rss_mb: None}`` (killed)."""
    import signal

    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, *argv], cwd=cwd, stdout=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=box_s + 1)  # + the launcher's own start
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"timed_out_after_s": box_s, "seconds": None, "peak_rss_mb": None}
    found = json.loads(out.decode().strip().splitlines()[-1])
    if found["seconds"] > box_s:
        return {"timed_out_after_s": box_s, "seconds": None, "peak_rss_mb": None}
    if not found["stderr"]:
        found.pop("stderr")
    return found


def run_length(lengths, box_s: float, tmp: Path) -> dict:
    import flowctl
    from flowctl.store.sql import open_store

    out: dict = {}
    for n in lengths:
        root = make_project(tmp / f"long-{n}", n)
        project = flowctl.load_project(root)
        url = "sqlite:///" + str(tmp / f"long-{n}.db")
        store = open_store(url)
        try:
            started = time.perf_counter()
            result = flowctl.Engine(project, store, check=False).run("loop", {})
            took = time.perf_counter() - started
        finally:
            store.close()
        assert result.status == "succeeded" and result.steps == expected_steps(n), (result.status, result.error)
        common = ["--root", str(root), "--db", url]
        out[str(n)] = {"steps": result.steps, "run_s": took, "us_per_step": took / n * 1e6,
                       "trace": measure_child([FLOWCTL, "trace", result.run_id, *common], box_s),
                       "audit verify": measure_child([FLOWCTL, "audit", "verify", result.run_id, *common], box_s)}
    return out


def project_size(flows: int, trials: int, box_s: float, tmp: Path) -> dict:
    root = generate(tmp / "big", flows=flows, states_per_flow=10)
    url = "sqlite:///" + str(tmp / "big.db")
    common = ["--root", str(root), "--db", url]
    subprocess.run([FLOWCTL, "run", "flow0", *common], capture_output=True, timeout=box_s * 2)  # warm, makes the store
    argv = {"flowctl runs": [FLOWCTL, "runs", *common], "flowctl run (10 steps)": [FLOWCTL, "run", "flow0", *common]}
    samples: dict = {k: [] for k in argv}
    for i in range(trials):
        for k in list(argv)[i % 2:] + list(argv)[:i % 2]:
            samples[k].append(measure_child(argv[k], box_s))
    res = {}
    for k, v in samples.items():
        secs = [s["seconds"] for s in v if s["seconds"] is not None]
        res[k] = {**(stats(secs) if secs and len(secs) == len(v) else {"median_s": None, "timed_out_after_s": box_s}),
                  "exit_codes": [s.get("exit_code") for s in v], "peak_rss_mb": max(s["peak_rss_mb"] or 0 for s in v)}
    return {"states": flows * 10 + 1, "flows": flows, "results": res}


# ----------------------------------------------------------------------------- the part
def run(store_sizes=(1000, 10000, 100000), lengths=(9999, 99999), flows: int = 1000, paused: int = 10000,
        trials: int = 5, box_s: float = 60.0) -> dict:
    out: dict = {"trials": trials, "box_s": box_s, "loadavg_before": loadavg()}
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-scaling-") as tmp:
        tmp = Path(tmp)
        t = time.time()
        out["store_size"] = store_size(tuple(store_sizes), trials, tmp)
        out["paused_start"] = paused_start(paused, trials, tmp)
        out["store_s"] = time.time() - t
        t = time.time()
        out["run_length"] = run_length(tuple(lengths), box_s, tmp)
        out["run_length_s"] = time.time() - t
        t = time.time()
        out["project_size"] = project_size(flows, max(3, trials // 2 + 1), box_s, tmp)
        out["project_s"] = time.time() - t
    out["loadavg_after"] = loadavg()
    out["targets"] = targets(out)
    return out


def targets(out: dict) -> dict:
    """Issue 17's targets 4–6 from the largest sizes measured (a note says when that is not the
    issue's size)."""
    t: dict = {}
    ss = out["store_size"]
    biggest = max((k for k in ss if k.isdigit()), key=int)
    note = "" if biggest == "100000" else f"measured at {int(biggest):,} runs, not 100,000"
    for key, name in zip("abcd", ("runs", "runs --status failed", "run-id prefix", "stats")):
        ms = ss[biggest]["ms"][name]
        smallest = min((k for k in ss if k.isdigit()), key=int)
        t[f"4{key}. {name} with 100,000 stored runs <= 20 ms"] = target(
            ms["median_ms"], LIMIT_MS, unit="ms", note=note,
            ratios={"min–max ms": f"{ms['min_s'] * 1e3:.1f}–{ms['max_s'] * 1e3:.1f}",
                    f"x at {int(smallest):,} runs": ms["median_s"] / ss[smallest]["ms"][name]["median_s"]})
    ps = out["paused_start"]["results"]
    none, full = (ps[k]["median_s"] for k in ps)
    t["4e. start a run with 10,000 paused runs <= 1.15x with none"] = target(
        full / none, 1.15, unit="x", ratios={"ms with none": none * 1e3, "ms with paused": full * 1e3},
        note="" if out["paused_start"]["paused"] == 10000 else f"{out['paused_start']['paused']:,} paused runs")
    gate = ss["gate"]
    t["4f. the gate's rate count uses an index on (tool, scope, at)"] = target(
        gate["has_rate_index"], True, note="indexes: " + "; ".join(f"{k} ({', '.join(v)})" for k, v in gate["indexes"].items()))
    rl = out["run_length"]
    longest = max(rl, key=int)
    note = "" if int(longest) >= 99999 else f"measured at {int(longest):,} steps, not 100,000"
    for key, cmd in (("a", "trace"), ("c", "audit verify")):
        m = rl[longest][cmd]
        box = m.get("timed_out_after_s")
        extra = ", ".join(x for x in (note, f"time box {box:g} s ran out" if box else "") if x)
        t[f"5{key}. `{cmd}` of a 100,000-step run <= 10 s"] = target(m["seconds"], 10.0, unit="s", lower_bound=box,
                                                                     note=extra)
        t[f"5{chr(ord(key) + 1)}. `{cmd}` of a 100,000-step run <= 200 MB"] = target(
            m["peak_rss_mb"], 200.0, unit="MB", note=extra)
    ps = out["project_size"]
    note = "" if ps["states"] >= 10000 else f"{ps['states']:,} states"
    for key, cmd, limit in (("a", "flowctl runs", 0.5), ("b", "flowctl run (10 steps)", 1.5)):
        m = ps["results"][cmd]
        t[f"6{key}. {cmd} on a 10,000-state project <= {limit:g} s"] = target(
            m["median_s"], limit, unit="s", lower_bound=m.get("timed_out_after_s"), note=note,
            ratios={"peak RSS MB": m["peak_rss_mb"]})
    return t


QUICK = {"store_sizes": (1000,), "lengths": (1998,), "flows": 100, "paused": 1000, "trials": 3, "box_s": 30.0}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--store", default="1000,10000,100000")
    parser.add_argument("--steps", default="9999,99999")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--box", type=float, default=60.0)
    args = parser.parse_args()
    if args.quick:
        result = run(**QUICK)
    else:
        result = run(tuple(int(x) for x in args.store.split(",")), tuple(int(x) for x in args.steps.split(",")),
                     trials=args.trials, box_s=args.box)
    write("scaling", result)
    print(json.dumps(result, indent=2))
