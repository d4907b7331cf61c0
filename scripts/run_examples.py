"""`make run`: run every example input through its flow with the real tools and the default
SQLite store, answer the reviews, print each run's trace, and check each ends as expected.

The shop database (.flowctl/shop.db) is reseeded first, so every run takes its documented path.
Exit 0 when every run ended as orchestration/examples/runs.yaml says, 1 otherwise.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
FLOWCTL = str(Path(sys.executable).parent / "flowctl")


def flowctl(*args):
    return subprocess.run([FLOWCTL, *args], cwd=ROOT, capture_output=True, text=True)


def main() -> int:
    started = time.time()
    env_db = os.environ.setdefault("FLOWCTL_SHOP_DB", str(ROOT / ".flowctl" / "shop.db"))
    subprocess.run([sys.executable, "-m", "shop_tools.db", "seed", env_db], cwd=ROOT, check=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT / "orchestration" / "tools")))
    check = flowctl("validate")
    print(check.stdout.strip().splitlines()[-1])
    if check.returncode != 0:
        print(check.stdout, check.stderr)
        return 1
    plan = yaml.safe_load((ROOT / "orchestration" / "examples" / "runs.yaml").read_text())
    failures = []
    for item in plan:
        label = f"{item['flow']} < {item['input']}"
        print(f"\n=== {label}")
        done = flowctl("run", item["flow"], "--input", f"@orchestration/examples/{item['input']}", "--format", "json", "-q")
        if done.returncode == 2:
            failures.append(f"{label}: flowctl run refused: {done.stderr.strip()}")
            continue
        result = json.loads(done.stdout)
        if result["status"] == "paused" and item.get("review"):
            token = result["review"]["token"]
            print(f"paused for review at {result['review']['state']}: {json.dumps(result['review']['show'])}")
            print(f"-> {item['review']}")
            data = ["--data", json.dumps(item["data"])] if item.get("data") is not None else []
            done = flowctl("resume", result["run_id"], "--token", token, "--decision", item["review"], *data,
                           "--by", "make-run", "--format", "json", "-q")
            result = json.loads(done.stdout)
        print(flowctl("trace", result["run_id"]).stdout.rstrip())
        if result["status"] != item["expect"]:
            failures.append(f"{label}: ended {result['status']}, expected {item['expect']} ({result.get('error')})")
    print()
    stats = flowctl("stats", "--since", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started - 1)))
    print(stats.stdout.rstrip())
    print()
    if failures:
        print("UNEXPECTED:\n  " + "\n  ".join(failures))
        return 1
    print(f"all {len(plan)} example runs ended as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
