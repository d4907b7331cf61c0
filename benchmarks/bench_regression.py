"""The step before and after a change of the engine, in the same run: is the new engine slower?

Issue 16 (the engine redesign) must leave the in-memory step and the SQLite step no slower than
before. This part measures both with the code of a *base* revision (default: ``8da1c8a``, the
last commit before the redesign) and the code of this checkout, side by side: the base's
``runtime/`` is extracted with ``git archive`` into a temporary folder, and every trial runs the
loop of :mod:`loop_flow` in a fresh interpreter whose ``PYTHONPATH`` is one tree or the other,
the two interleaved (order rotated each round), so both see the same machine load. Each child
times only its run (not start-up or imports) and prints the seconds.

The figure is ``head / base`` of the median µs per step: 1.0 is the same speed, below 1 faster.

    python benchmarks/bench_regression.py [--base REV] [--transitions N] [--trials N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ROOT, interleaved, loadavg, stats, write  # noqa: E402
from loop_flow import expected_steps, make_project  # noqa: E402
from report import target  # noqa: E402

BASE = "8da1c8a"
#: "no slower": at most this ratio; the allowance is below the trial spread on a shared 2-core machine
LIMIT = 1.05

CHILD = r"""
import json, sys, time
import flowctl
from flowctl.store.sql import MemoryStore, open_store

root, kind, url, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
project = flowctl.load_project(root)
store = MemoryStore() if kind == "memory" else open_store(url)
engine = flowctl.Engine(project, store, check=False)
started = time.perf_counter()
result = engine.run("loop", {})
if kind == "memory":
    store.get_run(result.run_id, exact=True)  # the deferred audit hash chain is part of the step
took = time.perf_counter() - started
assert result.status == "succeeded" and result.steps == steps, (result.status, result.steps)
store.close()
print(json.dumps({"seconds": took, "flowctl": flowctl.__file__}))
"""


def extract(rev: str, into: Path) -> Path:
    """``runtime/`` of git revision ``rev`` under ``into``; returns the folder to put on PYTHONPATH.
    Raises ``RuntimeError`` when git or the revision is not there."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "runtime"],
                             capture_output=True, timeout=120)
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {rev}: {archive.stderr.decode(errors='replace').strip()}")
    tar_path = into / "base.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    return into / "runtime"


def child(tree: Path, project: Path, kind: str, url: str, steps: int, scratch: Path):
    """A callable for :func:`common.interleaved`: one run in a fresh interpreter on ``tree``."""
    counter = [0]

    def once() -> float:
        counter[0] += 1
        db = url if kind == "memory" else f"sqlite:///{scratch}/{tree.parent.name}-{counter[0]}.db"
        env = dict(os.environ, PYTHONPATH=str(tree))
        done = subprocess.run([sys.executable, "-c", CHILD, str(project), kind, db, str(steps)],
                              capture_output=True, text=True, timeout=600, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{kind} run on {tree}: {done.stderr.strip()[-600:]}")
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        if not Path(answer["flowctl"]).resolve().is_relative_to(tree.resolve()):  # PYTHONPATH must win
            raise RuntimeError(f"the child imported {answer['flowctl']}, not the tree {tree}")
        return answer["seconds"]

    return once


def run(base: str = BASE, transitions: int = 6000, sqlite_transitions: int = 900, trials: int = 5) -> dict:
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "base").mkdir()
        (tmp / "head").mkdir()
        trees = {"base": extract(base, tmp / "base"), "head": ROOT / "runtime"}
        out = {"base": base, "trials": trials, "transitions": {"memory": transitions, "sqlite": sqlite_transitions},
               "results": {}, "ratio_head_to_base": {}}
        for kind, n in (("memory", transitions), ("sqlite", sqlite_transitions)):
            project = make_project(tmp / f"project-{kind}", n)
            contenders = {name: child(tree, project, kind, "memory", expected_steps(n), tmp)
                          for name, tree in trees.items()}
            samples = interleaved(contenders, trials)
            res = {name: stats(vals, per=n) for name, vals in samples.items()}
            out["results"][kind] = res
            out["ratio_head_to_base"][kind] = res["head"]["us_per_op"] / res["base"]["us_per_op"]
    mem, lite = out["ratio_head_to_base"]["memory"], out["ratio_head_to_base"]["sqlite"]
    out["loadavg_before"], out["loadavg_after"] = load_before, loadavg()
    out["targets"] = {
        "16. In-memory step, this engine / the engine before the redesign": target(
            mem, LIMIT, unit="x", ratios={"µs/step before": out["results"]["memory"]["base"]["us_per_op"],
                                          "µs/step now": out["results"]["memory"]["head"]["us_per_op"]}),
        "16. SQLite step, this engine / the engine before the redesign": target(
            lite, LIMIT, unit="x", ratios={"µs/step before": out["results"]["sqlite"]["base"]["us_per_op"],
                                           "µs/step now": out["results"]["sqlite"]["head"]["us_per_op"]}),
    }
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=BASE, help=f"git revision of the engine before (default {BASE})")
    parser.add_argument("--transitions", type=int, default=6000, help="in-memory steps per run (multiple of 3)")
    parser.add_argument("--sqlite-transitions", type=int, default=900, help="SQLite steps per run (multiple of 3)")
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    data = run(args.base, args.transitions, args.sqlite_transitions, args.trials)
    path = write("regression", data)
    for kind, ratio in data["ratio_head_to_base"].items():
        r = data["results"][kind]
        print(f"{kind}: before {r['base']['us_per_op']:.1f} µs/step, now {r['head']['us_per_op']:.1f} µs/step: "
              f"{ratio:.3f}x (limit {LIMIT})")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
