"""`flowctl validate` on a generated project (10,000 states, 1,000 flows) against the floor of
only parsing the same files with PyYAML's C loader; and the CLI's cold start against
`python -c pass`. Targets (issue 2): validate at most 3x the parse floor; validate on the shipped
example flows under 0.25 s wall."""
from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from common import FLOWCTL, ROOT, median_cmd, median_time, write
from gen_project import generate


def parse_floor(root: Path) -> None:
    for path in sorted((root / "orchestration").rglob("*.yaml")):
        yaml.load(path.read_bytes(), Loader=yaml.CSafeLoader)


def run(repeat: int = 3) -> dict:
    import flowctl

    with tempfile.TemporaryDirectory() as tmp:
        root = generate(Path(tmp), flows=1000, states_per_flow=10)
        files = sum(1 for _ in (root / "orchestration").rglob("*.yaml"))

        def validate():
            problems = flowctl.validate(flowctl.load_project(root))
            assert not [p for p in problems if p.severity == "error"], problems[:3]

        # Trials alternate so that the floor and flowctl see the same machine load.
        floors, libraries, clis = [], [], []
        for _ in range(repeat):
            floors.append(median_time(lambda: parse_floor(root), 1))
            libraries.append(median_time(validate, 1))
            clis.append(median_cmd([FLOWCTL, "validate", "--root", str(root)], repeat=1))
        floor, library, cli = (statistics.median(x) for x in (floors, libraries, clis))
    cold = {
        "python -c pass": median_cmd([sys.executable, "-c", "pass"]),
        "flowctl --help": median_cmd([FLOWCTL, "--help"]),
        "flowctl validate (examples)": median_cmd([FLOWCTL, "validate"], cwd=ROOT),
    }
    return {
        "files": files,
        "parse_floor_s": floor,
        "validate_library_s": library,
        "validate_cli_s": cli,
        "ratio_library_to_floor": library / floor,
        "ratio_cli_to_floor": cli / floor,
        "cold_start_s": cold,
        "targets": {"ratio_cli_to_floor <= 3": cli / floor <= 3,
                    "validate examples < 0.25 s": cold["flowctl validate (examples)"] < 0.25},
    }


if __name__ == "__main__":
    import json

    result = run()
    write("validate", result)
    print(json.dumps(result, indent=2))
