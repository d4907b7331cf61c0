"""CLI cold start (issue 8, part 4): wall time of a fresh process for ``python -c pass`` (the
floor: the interpreter alone), ``flowctl --help`` and ``flowctl validate`` on the shipped example
project (``orchestration/`` of this repo). One warm-up run each (page cache, byte-code), then
``trials`` rounds, each running every command once in rotated order; medians.
Target (issue 2): ``flowctl validate`` on the example under 0.25 s.

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

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "flowctl --help": [FLOWCTL, "--help"],
    "flowctl validate (examples)": [FLOWCTL, "validate"],
}
TARGET_S = 0.25


def _timer(args):
    def once() -> float:
        started = time.perf_counter()
        subprocess.run(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        return time.perf_counter() - started
    return once


def run(trials: int = 15) -> dict:
    codes = {k: subprocess.run(v, cwd=ROOT, capture_output=True).returncode for k, v in COMMANDS.items()}  # warm-up
    before = loadavg()
    samples = interleaved({k: _timer(v) for k, v in COMMANDS.items()}, trials)
    after = loadavg()
    results = {k: stats(v) for k, v in samples.items()}
    floor = results["python -c pass"]["median_s"]
    validate = results["flowctl validate (examples)"]["median_s"]
    return {
        "trials": trials, "loadavg_before": before, "loadavg_after": after, "exit_codes": codes,
        "commands": {k: " ".join(Path(a).name if i == 0 else a for i, a in enumerate(v)) for k, v in COMMANDS.items()},
        "results": results,
        "over_python_s": {k: v["median_s"] - floor for k, v in results.items()},
        "targets": {"flowctl validate (examples) < 0.25 s": {"value": validate, "limit": TARGET_S,
                                                             "met": validate < TARGET_S}},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=15)
    args = parser.parse_args()
    result = run(args.trials)
    write("cold", result)
    print(json.dumps(result, indent=2))
