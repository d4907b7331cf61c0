"""Map fan-out (issue 6): a ``map`` state over N trivial items (default 10,000) with
``max_concurrency`` 1, 8 and 32, in memory.

Each item is one child run of the flow ``item``: one task state calling the trivial tool of
:mod:`loop_flow` (``{n} -> {n + 1}``), then ``done``. The parent is ``map_<c>``: one map state
``fan_<c>`` over ``input.items``, then ``finished``. Everything runs through
``Engine(project, MemoryStore(), check=False)``, as :mod:`bench_memory` does.

On SQLite (issue 17, 3): the same map (``max_concurrency`` 8) over 1,000 and 10,000 items, each
size in a child process with a time box; a size that runs out of time is reported as "more than
box / items". Before issue 17 the 10,000-item map was quadratic (about 58 ms per item: the
parent's checkpoint held every child's input and outcome and was re-encoded on each child's
end); since, the parent keeps counters and the children in flight, and reads the outcomes once at
the end, so ms/item at 10,000 should be no more than at 1,000 (target 3b: ratio <= 1.25).

Reported per concurrency: wall seconds (median of the trials), items per second, time per child
and the per-child overhead — time per child minus the in-memory step time (one loop-flow
transition, :mod:`loop_flow`), measured in the same run, interleaved with the map trials. The
overhead is what a child run costs on top of the one step it does: creating the run, its input,
its own events and end state, scheduling it on the pool and collecting its output in item order.

    python benchmarks/bench_map.py [--items 1000] [--trials 5] [--loop-transitions 9000]
        [--sqlite-sizes 1000,10000] [--box 240]
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import interleaved, loadavg, stats, write  # noqa: E402
from loop_flow import expected_steps, make_project  # noqa: E402
from report import target  # noqa: E402

CONCURRENCY = (1, 8, 32)


def make_map_project(root: Path, items: int, loop_transitions: int, concurrency=CONCURRENCY) -> Path:
    """The loop project of :mod:`loop_flow` plus a child flow ``item`` and a parent ``map_<c>`` per
    concurrency ``c``."""
    make_project(root, loop_transitions)
    orch = root / "orchestration"
    (orch / "states" / "work.yaml").write_text("id: work\ntype: task\ntool: step@^1\ninput: {n: input.n}\n")
    (orch / "states" / "finished.yaml").write_text("id: finished\ntype: succeed\n")
    (orch / "transitions" / "item.yaml").write_text(
        "flow: item\nstart: work\ntransitions:\n  - {from: work, to: done, set: {n: response.n}}\n"
        "output: context.n\n")
    for c in concurrency:
        (orch / "states" / f"fan_{c}.yaml").write_text(
            f"id: fan_{c}\ntype: map\nitems: input.items\nflow: item\nitem_input: {{n: item}}\n"
            f"max_concurrency: {c}\nmax_items: {max(items, 1)}\n")
        (orch / "transitions" / f"map_{c}.yaml").write_text(
            f"flow: map_{c}\nstart: fan_{c}\ntransitions:\n  - {{from: fan_{c}, to: finished, set: {{count: length(response)}}}}\n"
            "output: context.count\n")
    return root


def _collected(fn):
    def run_once():
        gc.collect()
        return fn()
    return run_once


def sqlite_child(items: int, concurrency: int = 8) -> dict:
    """In a child process: one map of ``items`` items on a fresh SQLite store; wall seconds."""
    import flowctl
    from flowctl.store.sql import open_store

    with tempfile.TemporaryDirectory(prefix="flowctl-bench-map-sqlite-") as tmp:
        root = make_map_project(Path(tmp), items, 3, (concurrency,))
        project = flowctl.load_project(root)
        store = open_store("sqlite:///" + str(Path(tmp) / "runs.db"))
        try:
            engine = flowctl.Engine(project, store, check=False)
            started = time.perf_counter()
            result = engine.run(f"map_{concurrency}", {"items": list(range(items))})
            took = time.perf_counter() - started
        finally:
            store.close()
    assert result.status == "succeeded" and result.output == items, (result.status, result.error)
    return {"seconds": took}


def sqlite_sizes(sizes=(1000, 10000), box_s: float = 240.0, trials: int = 1, concurrency: int = 8) -> dict:
    """``{items: {ms_per_item, seconds | timed_out_after_s, trials}}`` on SQLite, each trial a child
    process killed after ``box_s`` seconds (then ``ms_per_item`` is None and ``more_than_ms``
    the bound known)."""
    import subprocess

    out = {}
    for n in sizes:
        samples, timed_out = [], False
        for _ in range(trials if n <= 1000 else 1):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--sqlite-child", str(n), "--concurrency", str(concurrency)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=box_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                break
            if done.returncode != 0:
                raise RuntimeError(f"map child ({n} items) failed: {done.stderr[-2000:]}")
            samples.append(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])
        if timed_out:
            out[str(n)] = {"items": n, "ms_per_item": None, "timed_out_after_s": box_s, "more_than_ms": box_s / n * 1e3}
        else:
            st = stats(samples, n)
            out[str(n)] = {"items": n, **st, "ms_per_item": st["us_per_op"] / 1e3,
                           "spread_ms_per_item": [st["min_s"] / n * 1e3, st["max_s"] / n * 1e3]}
    return out


def run(items: int = 1000, trials: int = 5, loop_transitions: int = 9000, concurrency=CONCURRENCY,
        sqlite=(1000, 10000), box_s: float = 240.0) -> dict:
    import flowctl
    from flowctl.store.sql import MemoryStore

    payload = {"items": list(range(items))}
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-map-") as tmp:
        root = make_map_project(Path(tmp), items, loop_transitions, concurrency)
        project = flowctl.load_project(root)

        def loop_once() -> float:
            engine = flowctl.Engine(project, MemoryStore(), check=False)
            started = time.perf_counter()
            result = engine.run("loop", {})
            took = time.perf_counter() - started
            assert result.status == "succeeded" and result.steps == expected_steps(loop_transitions)
            return took

        def map_once(c):
            def once() -> float:
                store = MemoryStore()
                engine = flowctl.Engine(project, store, check=False)
                started = time.perf_counter()
                result = engine.run(f"map_{c}", payload)
                took = time.perf_counter() - started
                assert result.status == "succeeded" and result.output == items, (result.status, result.error)
                return took
            return once

        contenders = {"step": loop_once, **{f"map_{c}": map_once(c) for c in concurrency}}
        before = loadavg()
        samples = interleaved({k: _collected(f) for k, f in contenders.items()}, trials)
        after = loadavg()
    step = stats(samples["step"], loop_transitions)
    step_us = step["us_per_op"]
    out: dict = {"items": items, "trials": trials, "loop_transitions": loop_transitions,
                 "loadavg_before": before, "loadavg_after": after,
                 "step": {**step, "note": "one in-memory loop-flow transition (tool call + condition + set)"},
                 "results": {}}
    for c in concurrency:
        s = stats(samples[f"map_{c}"], items)
        out["results"][str(c)] = {
            "max_concurrency": c, **s,
            "items_per_s": s["ops_per_s"], "us_per_child": s["us_per_op"],
            "child_overhead_us": s["us_per_op"] - step_us,
            "child_cost_in_steps": s["us_per_op"] / step_us,
        }
    out["samples_s"] = samples
    out["sqlite_concurrency"] = 8
    out["sqlite"] = sqlite_sizes(sqlite, box_s, trials=min(trials, 3))
    out["loadavg_after_sqlite"] = loadavg()
    out["targets"] = _targets(out["sqlite"])
    return out


def _targets(sq: dict) -> dict:
    """Issue 17's map targets from the largest size measured (10,000 in a full run) and the smallest."""
    if len(sq) < 2:
        return {}
    small, big = (sq[k] for k in sorted(sq, key=int)[::len(sq) - 1])
    per = big["ms_per_item"]
    flat = per / small["ms_per_item"] if (small["ms_per_item"] and per is not None) else None
    size_note = "" if big["items"] == 10000 else f"measured at {big['items']:,} items, not 10,000 (a quick run)"
    if per is None:
        size_note = ", ".join(x for x in (size_note, f"time box {big['timed_out_after_s']:g} s ran out") if x)
    return {
        "3a. map over 10,000 items on SQLite <= 2 ms per item": target(
            per, 2.0, unit="ms/item", lower_bound=big.get("more_than_ms"), note=size_note),
        "3b. map flat in the item count": target(
            flat, 1.25, unit="x (largest / smallest per item)",
            lower_bound=big["more_than_ms"] / small["ms_per_item"] if per is None and small["ms_per_item"] else None,
            ratios={f"ms/item at {small['items']:,}": small["ms_per_item"]}, note=size_note),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--loop-transitions", type=int, default=9000)
    parser.add_argument("--sqlite-sizes", default="1000,10000")
    parser.add_argument("--box", type=float, default=240.0, help="seconds a SQLite map may take before it is stopped")
    parser.add_argument("--sqlite-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=8, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sqlite_child:
        print(json.dumps(sqlite_child(args.sqlite_child, args.concurrency)))
        sys.exit(0)
    sizes = tuple(int(x) for x in args.sqlite_sizes.split(",") if x.strip())
    result = run(args.items, args.trials, args.loop_transitions, sqlite=sizes, box_s=args.box)
    write("map", result)
    print(json.dumps({k: v for k, v in result.items() if k != "samples_s"}, indent=2))
