"""What OpenTelemetry costs a step (issue 21): off, on with spans dropped, and without the hooks.

Three contenders run the in-memory loop of :mod:`loop_flow` in fresh interpreters, interleaved
(order rotated each round) so they see the same load:

- ``base``: the code of revision ``BASE``, the last commit before the engine had tracing hooks;
- ``off``: this checkout with tracing off (the default: no provider, no ``OTEL_*``);
- ``on``: this checkout with an SDK ``TracerProvider`` that has no span processor — every span is
  made, timed and ended, and dropped (a no-op exporter), so the figure is flowctl's own cost.

Target (issue 21): off adds < 2% — ``off / base`` ≤ 1.02. ``on / off`` is reported beside it.

    python benchmarks/bench_otel.py [--base REV] [--transitions N] [--trials N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_regression import extract  # noqa: E402
from common import ROOT, interleaved, loadavg, stats, write  # noqa: E402
from loop_flow import expected_steps, make_project  # noqa: E402
from report import target  # noqa: E402

BASE = "c89cf64"  # main just before the engine got its tracing hooks
LIMIT = 1.02

CHILD = r"""
import json, sys, time
import flowctl
from flowctl.store.sql import MemoryStore
root, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "on":
    from opentelemetry.sdk.trace import TracerProvider
    from flowctl.telemetry import tracing
    tracing.use_provider(TracerProvider())  # no span processor: spans are made and dropped
store = MemoryStore()
engine = flowctl.Engine(flowctl.load_project(root), store, check=False)
started = time.perf_counter()
result = engine.run("loop", {})
store.get_run(result.run_id, exact=True)  # the deferred audit hash chain is part of the step
took = time.perf_counter() - started
assert result.status == "succeeded" and result.steps == steps, (result.status, result.steps)
print(json.dumps({"seconds": took, "flowctl": flowctl.__file__}))
"""


def _child(tree: Path, project: Path, steps: int, mode: str):
    def once() -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["PYTHONPATH"] = str(tree)
        done = subprocess.run([sys.executable, "-c", CHILD, str(project), str(steps), mode],
                              capture_output=True, text=True, timeout=600, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{mode} run on {tree}: {done.stderr.strip()[-600:]}")
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        if not Path(answer["flowctl"]).resolve().is_relative_to(tree.resolve()):
            raise RuntimeError(f"the child imported {answer['flowctl']}, not the tree {tree}")
        return answer["seconds"]

    return once


def run(base: str = BASE, transitions: int = 12000, trials: int = 7) -> dict:
    load_before = loadavg()
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-otel-") as tmp:
        tmp = Path(tmp)
        (tmp / "base").mkdir()
        base_tree = extract(base, tmp / "base")
        project = make_project(tmp / "project", transitions)
        steps = expected_steps(transitions)
        contenders = {"base": _child(base_tree, project, steps, "off"),
                      "off": _child(ROOT / "runtime", project, steps, "off"),
                      "on": _child(ROOT / "runtime", project, steps, "on")}
        samples = interleaved(contenders, trials)
    res = {name: stats(vals, per=transitions) for name, vals in samples.items()}
    off = res["off"]["us_per_op"] / res["base"]["us_per_op"]
    on = res["on"]["us_per_op"] / res["off"]["us_per_op"]
    return {"base": base, "transitions": transitions, "trials": trials, "results": res,
            "ratio_off_to_base": off, "ratio_on_to_off": on,
            "loadavg_before": load_before, "loadavg_after": loadavg(),
            "targets": {"21. OTel off: in-memory step / the step without tracing hooks": target(
                off, LIMIT, unit="x", ratios={"µs/step without hooks": res["base"]["us_per_op"],
                                              "µs/step off": res["off"]["us_per_op"],
                                              "µs/step on (spans dropped)": res["on"]["us_per_op"],
                                              "on / off": on})}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=BASE)
    parser.add_argument("--transitions", type=int, default=12000)
    parser.add_argument("--trials", type=int, default=7)
    args = parser.parse_args(argv)
    out = run(args.base, args.transitions, args.trials)
    write("otel", out)
    print(f"off / base {out['ratio_off_to_base']:.3f}x (limit {LIMIT}); on / off {out['ratio_on_to_off']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
