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


def loadavg() -> list | None:
    """``os.getloadavg()`` (1, 5, 15 minutes), rounded; None where the platform has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def interleaved(contenders: dict, trials: int) -> dict:
    """Run ``trials`` rounds; each round calls every contender once (a callable returning wall
    seconds), the order rotated each round so that none always runs first or last. Every contender
    thus sees the same machine load. Returns ``{name: [seconds, ...]}``."""
    names = list(contenders)
    samples: dict = {n: [] for n in names}
    for i in range(trials):
        for name in names[i % len(names):] + names[:i % len(names)]:
            samples[name].append(contenders[name]())
    return samples


def stats(values: list, per: int = 1) -> dict:
    """Median (and min/max) of wall-second samples, also per unit when ``per`` > 1."""
    med = statistics.median(values)
    out = {"median_s": med, "min_s": min(values), "max_s": max(values), "trials": len(values)}
    if per > 1:
        out["us_per_op"] = med / per * 1e6
        out["ops_per_s"] = per / med
    return out


PG = os.environ.get("FLOWCTL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def pg_available(url: str = PG) -> str | None:
    """None when the PostgreSQL server at ``url`` answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3):
            return None
    except Exception as exc:  # noqa: BLE001 - no driver, refused, bad credentials
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


class fresh_pg_database:
    """``with fresh_pg_database() as url:`` a new, empty database on the server of :data:`PG`,
    dropped (``WITH (FORCE)``) on exit."""

    def __init__(self, admin_url: str = PG, prefix: str = "flowctl_bench"):
        import uuid

        self.admin_url = admin_url
        self.name = f"{prefix}_{uuid.uuid4().hex[:10]}"

    def __enter__(self) -> str:
        import psycopg

        with psycopg.connect(self.admin_url, connect_timeout=3, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        return self.admin_url.rsplit("/", 1)[0] + "/" + self.name

    def __exit__(self, *exc) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, connect_timeout=3, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


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
    mem = ""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
                break
    except OSError:
        pass
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
            "memory": mem, "postgresql": _pg_version(),
            "versions": {n: version(n) for n in ("flowctl", "pyyaml", "jsonschema", "jmespath", "sqlalchemy", "psycopg",
                                                 "transitions", "python-statemachine", "dbos", "fastjsonschema")},
            "sqlite": __import__("sqlite3").sqlite_version}


def _pg_version() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG, connect_timeout=3) as conn:
            return conn.execute("SHOW server_version").fetchone()[0]
    except Exception:  # noqa: BLE001
        return None


def write(name: str, data: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
