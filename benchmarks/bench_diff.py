"""Benchmark: ``flowctl diff`` of two generated 1,000-state projects (target: under 2 s).

Generates a base project (20 flows of 50 states each: tasks with retries and handlers, choices,
a review, succeed/fail ends; 40 contracts, 10 policies) and a head that differs in some states,
transitions, contracts and policies, writes both as folders into a temp dir, then times the same
path as ``flowctl diff BASE_DIR HEAD_DIR`` (load both trees, compare, render text), median of 5,
with the parts (load, compare, each renderer) measured separately. Writes
``benchmarks/results/diff.json``.

    python benchmarks/bench_diff.py [--states 1000] [--repeat 5] [--out benchmarks/results/diff.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "runtime"))

FLOW_SIZE = 50


def generate(states: int, variant: str) -> dict[str, str]:
    """``{relative path: text}`` of a project with ``states`` states; ``variant`` "head" changes
    every 25th state's retry, every 40th condition, drops every 100th state's error exit and
    condition, adds two states per flow-pair, bumps 4 contracts, loosens 2 policies."""
    head = variant == "head"
    files: dict[str, str] = {}
    flows = max(1, states // FLOW_SIZE)
    contracts = 40
    for c in range(contracts):
        version = "1.1.0" if head and c % 10 == 0 else "1.0.0"
        effects = "side_effects:\n  - {type: database_write, target: table_%d}\n" % c if c % 2 else ""
        if head and c % 10 == 0 and c % 2:
            effects += "  - {type: external_api_call, target: api/%d}\n" % c
        undo = "verify: tools.t:verify\ncompensate: tools.t:undo\n" if c % 2 else ""
        files[f"orchestration/contracts/tool_{c}.v{version}.yaml"] = (
            f"id: tool_{c}\nversion: {version}\nentrypoint: tools.t:run_{c}\n{undo}{effects}timeout: 5s\n")
    for p in range(10):
        hi = 5000 if head and p < 2 else 500
        files[f"orchestration/policies/policy_{p}.yaml"] = (
            f"policy: policy_{p}\nversion: 1\napplies_to: [tool_{2 * p + 1}]\n"
            f"allow:\n  - {{field: input.amount, range: [0, {hi}]}}\nrate: {{max: 5, window: 1m}}\n")
    for f in range(flows):
        ids = [f"f{f}_s{i}" for i in range(FLOW_SIZE)]
        transitions = []
        for i, sid in enumerate(ids[:-2]):
            n = f * FLOW_SIZE + i
            nxt = ids[i + 1]
            if i % 7 == 3:
                files[f"orchestration/states/{sid}.yaml"] = f"id: {sid}\ntype: choice\n"
                cond = f"context.n > `{n}`" if not (head and n % 40 == 3) else f"context.n >= `{n}` && context.ok"
                transitions += [f"  - from: {sid}\n    when: \"{cond}\"\n    to: {nxt}\n",
                                f"  - from: {sid}\n    to: {ids[-1]}\n"]
                continue
            attempts = 5 if head and n % 25 == 0 else 3
            files[f"orchestration/states/{sid}.yaml"] = (
                f"id: {sid}\ntype: task\ntool: tool_{n % contracts}@^1\ninput: {{order: context.order_id, n: \"`{n}`\"}}\n"
                f"timeout: 3s\nretry:\n  - errors: [ToolTimeout]\n    max_attempts: {attempts}\n    interval: 1s\n"
                f"on_error:\n  - errors: [SchemaMismatch]\n    goto: {ids[-1]}\n")
            if head and n % 100 == 50:
                transitions.append(f"  - from: {sid}\n    to: {nxt}\n")  # no error exit, no condition
            else:
                transitions.append(f"  - from: {sid}\n    when: \"response.ok\"\n    to: {nxt}\n"
                                   f"  - from: {sid}\n    to: {ids[-1]}\n")
        files[f"orchestration/states/{ids[-2]}.yaml"] = f"id: {ids[-2]}\ntype: succeed\n"
        files[f"orchestration/states/{ids[-1]}.yaml"] = f"id: {ids[-1]}\ntype: fail\nerror: Failed{f}\n"
        if head and f % 2 == 0:
            extra = f"f{f}_extra"
            files[f"orchestration/states/{extra}.yaml"] = f"id: {extra}\ntype: pass\nset: {{x: \"`1`\"}}\n"
            transitions = [t.replace(f"to: {ids[-2]}\n", f"to: {extra}\n") for t in transitions]
            transitions.append(f"  - from: {extra}\n    to: {ids[-2]}\n")
        files[f"orchestration/transitions/flow_{f}.yaml"] = (
            f"flow: flow_{f}\nversion: 1\nstart: {ids[0]}\ntransitions:\n" + "".join(transitions)
            + f"on_error:\n  - errors: [\"*\"]\n    compensate: true\n    goto: {ids[-1]}\n")
    return files


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def median_time(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def run(states: int = 1000, repeat: int = 5) -> dict:
    """Median seconds of the end-to-end diff and of its parts; see the module docstring."""
    from flowctl.diff.core import diff_projects
    from flowctl.diff.render import RENDERERS
    from flowctl.definition.loader import load_project

    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-diff-") as tmp:
        base_dir, head_dir = Path(tmp) / "base", Path(tmp) / "head"
        write(base_dir, generate(states, "base"))
        write(head_dir, generate(states, "head"))

        def end_to_end():  # what `flowctl diff BASE_DIR HEAD_DIR` does after start-up
            d = diff_projects(load_project(base_dir), load_project(head_dir), str(base_dir), str(head_dir))
            return RENDERERS["text"](d)

        total, _ = median_time(end_to_end, repeat)
        load, (base, head) = median_time(lambda: (load_project(base_dir), load_project(head_dir)), repeat)
        compare, d = median_time(lambda: diff_projects(base, head), repeat)
        renders = {fmt: median_time(lambda f=fmt: RENDERERS[f](d), repeat)[0] for fmt in ("text", "json", "markdown")}
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    counts = d.counts()
    return {
        "benchmark": "flowctl diff of two generated projects (load both folders, compare, render text)",
        "states": {"base": len(base.states), "head": len(head.states)},
        "flows": len(base.flows),
        "changes": {**counts, "risks": len(d.risks()), "flows_affected": len(d.affected)},
        "repeat": repeat,
        "median_seconds": round(total, 4),
        "target_seconds": 2.0,
        "within_target": total < 2.0,
        "parts_median_seconds": {"load_both": round(load, 4), "compare": round(compare, 4),
                                 **{f"render_{k}": round(v, 4) for k, v in renders.items()}},
        "load_average_1m_before": round(load_before[0], 2) if load_before is not None else None,
        "loadavg_before": [round(x, 2) for x in load_before] if load_before else None,
        "loadavg_after": [round(x, 2) for x in load_after] if load_after else None,
        "targets": {f"flowctl diff ({states:,} states) < 2 s": {"value": total, "limit": 2.0, "met": total < 2.0}},
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(HERE / "results" / "diff.json"))
    args = parser.parse_args(argv)
    result = run(args.states, args.repeat)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
