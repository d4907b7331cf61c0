"""Map fan-out (issue 6): a ``map`` state over N trivial items (default 10,000) with
``max_concurrency`` 1, 8 and 32, in memory.

Each item is one child run of the flow ``item``: one task state calling the trivial tool of
:mod:`loop_flow` (``{n} -> {n + 1}``), then ``done``. The parent is ``map_<c>``: one map state
``fan_<c>`` over ``input.items``, then ``finished``. Everything runs through
``Engine(project, MemoryStore(), check=False)``, as :mod:`bench_memory` does (for the map, a
``MemoryStore`` whose reads hold its lock: see :func:`locked_memory_store`).

Reported per concurrency: wall seconds (median of the trials), items per second, time per child
and the per-child overhead — time per child minus the in-memory step time (one loop-flow
transition, :mod:`loop_flow`), measured in the same run, interleaved with the map trials. The
overhead is what a child run costs on top of the one step it does: creating the run, its input,
its own events and end state, scheduling it on the pool and collecting its output in item order.

    python benchmarks/bench_map.py [--items 10000] [--trials 3] [--loop-transitions 9000]
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


def locked_memory_store():
    """``MemoryStore`` whose reads take its lock. The stock one reads without it: with
    ``max_concurrency`` > 1, ``get_run`` of a child not created yet scans ``_runs`` for an id prefix
    while another thread's ``create_run`` inserts, and a 10,000-item map fails at random with
    "RuntimeError: dictionary changed size during iteration". The reads do the same work; only
    the lock is added (uncontended when ``max_concurrency`` is 1)."""
    from flowctl.store.sql import MemoryStore

    class LockedMemoryStore(MemoryStore):
        def get_run(self, run_id):
            with self._lock:
                return super().get_run(run_id)

        def list_runs(self, *args, **kwargs):
            with self._lock:
                return super().list_runs(*args, **kwargs)

        def events(self, run_id):
            with self._lock:
                return super().events(run_id)

        def steps(self, run_id):
            with self._lock:
                return super().steps(run_id)

    return LockedMemoryStore()


def _collected(fn):
    def run_once():
        gc.collect()
        return fn()
    return run_once


def run(items: int = 10000, trials: int = 3, loop_transitions: int = 9000, concurrency=CONCURRENCY) -> dict:
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
                store = locked_memory_store()
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
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--loop-transitions", type=int, default=9000)
    args = parser.parse_args()
    result = run(args.items, args.trials, args.loop_transitions)
    write("map", result)
    print(json.dumps({k: v for k, v in result.items() if k != "samples_s"}, indent=2))
