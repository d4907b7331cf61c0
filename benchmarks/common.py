"""Shared helpers of the benchmarks: timing, medians, machine description, result files."""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
FLOWCTL = str(Path(sys.executable).parent / "flowctl")


def median_time(fn, repeat: int = 5) -> float:
    """Median wall seconds of ``fn()`` over ``repeat`` trials."""
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def median_cmd(args, cwd=None, repeat: int = 10) -> float:
    def once():
        subprocess.run(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

    once()  # warm the page cache and byte-code
    return median_time(once, repeat)


def machine() -> dict:
    import importlib.metadata as md

    def version(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
            "versions": {n: version(n) for n in ("flowctl", "pyyaml", "jsonschema", "jmespath", "sqlalchemy", "psycopg",
                                                 "transitions", "python-statemachine", "dbos")}}


def write(name: str, data: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
