"""CLI cold start (issue 8, part 4): wall time of a fresh process for ``python -c pass`` (the
floor: the interpreter alone), ``flowctl --help`` and ``flowctl validate`` on the shipped example
project (``orchestration/`` of this repo), and the store commands on a SQLite store: ``flowctl run``
of a 3-step flow (:mod:`loop_flow`), ``flowctl trace RUN`` and ``flowctl runs``. flowctl's
byte-code is compiled first (as ``pip install`` does; with ``PYTHONDONTWRITEBYTECODE`` set a
warm-up run would not write it, and every trial would compile the modules changed since the last
``make install``), then one warm-up run each (page cache), then ``trials`` rounds, each running
every command once in rotated order; medians with min–max.
Targets: issue 2, ``flowctl validate`` on the example under 0.25 s; issue 17 (7), each store
command at most 200 ms.

    python benchmarks/bench_cold.py [--trials 15]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FLOWCTL, ROOT, interleaved, loadavg, stats, write  # noqa: E402
from loop_flow import make_project  # noqa: E402
from report import target  # noqa: E402

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "flowctl --help": [FLOWCTL, "--help"],
    "flowctl validate (examples)": [FLOWCTL, "validate"],
}
TARGET_S = 0.25
STORE_TARGET_S = 0.2
STORE_COMMANDS = ("flowctl run", "flowctl trace", "flowctl runs")


def store_commands(tmp: Path) -> dict:
    """``{name: argv}`` of the store commands on a fresh 3-step project in ``tmp`` whose SQLite
    store holds one finished run (``trace`` reads it; every ``run`` trial adds one)."""
    root = make_project(tmp, 3)
    db = "sqlite:///" + str(tmp / "runs.db")
    common = ["--root", str(root), "--db", db]
    subprocess.run([FLOWCTL, "run", "loop", *common], capture_output=True, check=True)
    import json as _json

    listed = subprocess.run([FLOWCTL, "runs", *common, "--format", "json"], capture_output=True, text=True, check=True)
    run_id = _json.loads(listed.stdout)[0]["id"]
    return {"flowctl run": [FLOWCTL, "run", "loop", *common], "flowctl trace": [FLOWCTL, "trace", run_id, *common],
            "flowctl runs": [FLOWCTL, "runs", *common]}


def _timer(args):
    def once() -> float:
        started = time.perf_counter()
        subprocess.run(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        return time.perf_counter() - started
    return once


def run(trials: int = 15) -> dict:
    import tempfile

    import compileall

    import flowctl

    compileall.compile_dir(str(Path(flowctl.__file__).parent), quiet=1)
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-cold-") as tmp:
        commands = {**COMMANDS, **store_commands(Path(tmp))}
        codes = {k: subprocess.run(v, cwd=ROOT, capture_output=True).returncode for k, v in commands.items()}  # warm-up
        before = loadavg()
        samples = interleaved({k: _timer(v) for k, v in commands.items()}, trials)
        after = loadavg()
    results = {k: stats(v) for k, v in samples.items()}
    floor = results["python -c pass"]["median_s"]
    validate = results["flowctl validate (examples)"]["median_s"]
    targets = {f"7{'abc'[i]}. cold start `{name}` <= 200 ms": target(
        results[name]["median_s"], STORE_TARGET_S, unit="s",
        ratios={"min": results[name]["min_s"], "max": results[name]["max_s"],
                "over python -c pass": results[name]["median_s"] - floor})
        for i, name in enumerate(STORE_COMMANDS)}
    targets["flowctl validate (examples) < 0.25 s (issue 2)"] = target(validate, TARGET_S, unit="s")
    return {
        "trials": trials, "loadavg_before": before, "loadavg_after": after, "exit_codes": codes,
        "commands": {k: " ".join(Path(a).name if i == 0 else ("…" if "/" in a else a) for i, a in enumerate(v))
                     for k, v in commands.items()},
        "results": results,
        "over_python_s": {k: v["median_s"] - floor for k, v in results.items()},
        "targets": targets,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=15)
    args = parser.parse_args()
    result = run(args.trials)
    write("cold", result)
    print(json.dumps(result, indent=2))
