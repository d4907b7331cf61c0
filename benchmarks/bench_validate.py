"""Validate (issue 8, part 3): ``flowctl validate`` on a generated project (10,000 states, 1,000
flows) against the floor of only parsing the same files with PyYAML's C loader; in process
(``flowctl.validate(flowctl.load_project(root))``) and as the CLI (``flowctl validate --root``,
a fresh process). Trials alternate so that the floor and flowctl see the same machine load.
Target (issue 2/8): the CLI at most 3x the parse floor. The cold start of the CLI is
:mod:`bench_cold`.

    python benchmarks/bench_validate.py [--trials 3]
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FLOWCTL, loadavg, median_time, write
from gen_project import generate


def parse_floor(root: Path) -> None:
    for path in sorted((root / "orchestration").rglob("*.yaml")):
        yaml.load(path.read_bytes(), Loader=yaml.CSafeLoader)


def _cli(root: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([FLOWCTL, "validate", "--root", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    return took


def run(repeat: int = 3, flows: int = 1000) -> dict:
    import flowctl
    from flowctl.check.checks import validate as validate_project  # flowctl.validate turns into the submodule once imported

    with tempfile.TemporaryDirectory() as tmp:
        root = generate(Path(tmp), flows=flows, states_per_flow=10)
        files = sum(1 for _ in (root / "orchestration").rglob("*.yaml"))

        def validate():
            problems = validate_project(flowctl.load_project(root))
            assert not [p for p in problems if p.severity == "error"], problems[:3]

        # Trials alternate so that the floor and flowctl see the same machine load.
        _cli(root)  # warm-up: page cache, byte-code
        before = loadavg()
        floors, libraries, clis = [], [], []
        for _ in range(repeat):
            floors.append(median_time(lambda: parse_floor(root), 1))
            libraries.append(median_time(validate, 1))
            clis.append(_cli(root))
        after = loadavg()
        floor, library, cli = (statistics.median(x) for x in (floors, libraries, clis))
    return {
        "files": files,
        "trials": repeat,
        "loadavg_before": before,
        "loadavg_after": after,
        "parse_floor_s": floor,
        "validate_library_s": library,
        "validate_cli_s": cli,
        "ratio_library_to_floor": library / floor,
        "ratio_cli_to_floor": cli / floor,
        "samples_s": {"parse_floor": floors, "library": libraries, "cli": clis},
        "targets": {"flowctl validate (CLI) <= 3x parse floor": {"value": cli / floor, "limit": 3.0,
                                                                "met": cli / floor <= 3.0}},
    }


if __name__ == "__main__":
    import json

    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    result = run(parser.parse_args().trials)
    write("validate", result)
    print(json.dumps(result, indent=2))
