"""`make bench`: every benchmark in one run on this machine; results to
benchmarks/results/latest.json and the table in BENCHMARKS.md.

Each number is a median over repeated trials taken in the same run; ratios compare flowctl with
its floor measured alongside it. PostgreSQL numbers are included when the server at
FLOWCTL_BENCH_PG (default postgresql://postgres@127.0.0.1:5432/test) answers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_policy  # noqa: E402
import bench_steps  # noqa: E402
import bench_validate  # noqa: E402
from common import FLOWCTL, RESULTS, ROOT, machine, write  # noqa: E402

PG = os.environ.get("FLOWCTL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_database():
    try:
        import psycopg

        name = f"flowctl_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG, connect_timeout=3, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name, PG.rsplit("/", 1)[0] + "/" + name
    except Exception as exc:  # noqa: BLE001
        print(f"PostgreSQL skipped: {exc}")
        return None, None


def _drop(name):
    import psycopg

    with psycopg.connect(PG, connect_timeout=3, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> int:
    started = time.time()
    results = {"machine": machine(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))}
    print("validate: 10,000 states / 1,000 flows, and cold starts ...", flush=True)
    results["validate"] = bench_validate.run()
    print("steps: 3-state loop ...", flush=True)
    name, url = _pg_database()
    try:
        results["steps"] = bench_steps.run(pg_url=url)
    finally:
        if name:
            _drop(name)
    print("policy decisions ...", flush=True)
    results["policy"] = bench_policy.run()
    print("diff of two 1,000-state projects ...", flush=True)
    done = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "bench_diff.py")],
                          capture_output=True, text=True)
    diff_file = RESULTS / "diff.json"
    results["diff"] = json.loads(diff_file.read_text()) if done.returncode == 0 and diff_file.exists() else {
        "error": done.stderr[-2000:]}
    results["seconds"] = time.time() - started
    path = write("latest", results)
    (ROOT / "BENCHMARKS.md").write_text(render(results))
    print(f"wrote {path} and BENCHMARKS.md")
    return 0


def render(r: dict) -> str:
    m, v, s, p = r["machine"], r["validate"], r["steps"], r["policy"]
    lines = [
        "# Benchmarks",
        "",
        f"Measured by `make bench` on {r['started']} ({r['seconds']:.0f} s in all). Results: "
        "`benchmarks/results/latest.json`. Each number is a median over repeated trials taken in the same run.",
        "",
        f"Machine: {m['cpu']} ({m['cores']} cores), {m['platform']}, Python {m['python']}.  ",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in m["versions"].items() if val) + ".",
        "",
        "## validate (issue 2)",
        "",
        "| what | seconds | ratio to floor |",
        "| --- | ---: | ---: |",
        f"| floor: parse the {v['files']:,} files with PyYAML's C loader | {v['parse_floor_s']:.2f} | 1.00 |",
        f"| `flowctl.validate(load_project(...))` in process | {v['validate_library_s']:.2f} | {v['ratio_library_to_floor']:.2f} |",
        f"| `flowctl validate` (CLI, cold) | {v['validate_cli_s']:.2f} | {v['ratio_cli_to_floor']:.2f} |",
        "",
        "| cold start | seconds |",
        "| --- | ---: |",
    ]
    lines += [f"| `{k}` | {val:.3f} |" for k, val in v["cold_start_s"].items()]
    lines += ["", "Targets: " + ", ".join(f"{k}: {'met' if ok else 'NOT met'}" for k, ok in v["targets"].items()) + ".",
              "", "## steps (issue 3)", "",
              f"A 3-state loop with trivial tools and one JMESPath condition per step, {s['steps']:,} steps.", "",
              "| store | steps/s | µs/step | ratio to floor |", "| --- | ---: | ---: | ---: |",
              f"| floor: bare Python loop, same calls and compiled JMESPath | {s['floor']['steps_per_s']:,.0f} | {s['floor']['us_per_step']:.1f} | 1.0 |"]
    for name in ("memory", "sqlite", "postgresql"):
        if name in s:
            lines.append(f"| flowctl, {name} store | {s[name]['steps_per_s']:,.0f} | {s[name]['us_per_step']:.1f} | "
                         f"{s['ratios_to_floor'][name]:.1f} |")
    lines += ["", "## policy decisions (issue 5)", "", "| store | p50 ms | p99 ms |", "| --- | ---: | ---: |"]
    lines += [f"| {k} | {p[k]['p50_ms']:.3f} | {p[k]['p99_ms']:.3f} |" for k in ("memory", "sqlite")]
    d = r.get("diff", {})
    lines += ["", "## diff (issue 4)", ""]
    lines.append("```json\n" + json.dumps(d, indent=2)[:3000] + "\n```")
    lines += ["", "## Reproduce", "", "```sh", "make bench", "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
