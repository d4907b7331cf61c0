"""The operator console's pages on a big store (issue 20: the runs page < 300 ms server time with
100,000 runs stored).

A SQLite store is filled as :mod:`bench_scaling` fills it (a few real runs through the engine, their
rows copied under new ids and times, one in ten marked failed); the app of ``flowctl serve``
(:func:`flowctl.server.create_app`, the console mounted under ``/console``) answers each page in
process through Starlette's test client with a signed-in session, so a time is the server's work
plus the in-process HTTP round trip (no network): ``/console/runs`` (the first page), ``?status=failed``,
the next page (a cursor), ``/console/runs/rows?q=…`` (text in the id: pages read until a page is
full, at most 5,000 runs), one run's page (graph, timeline, audit verify) and ``/console/health``
(the latest 1,000 runs). Medians over ``trials`` interleaved trials; the same pages at the smallest
size give the same-run ratio.

    python benchmarks/bench_console.py [--quick]
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scaling import clone_runs, run_seeds, seed_project  # noqa: E402
from common import interleaved, loadavg, stats, write  # noqa: E402
from report import target  # noqa: E402

LIMIT_MS = 300.0
QUICK = {"store_sizes": (1000, 10000), "trials": 3}


def measure(n: int, trials: int, tmp: Path) -> dict:
    import warnings

    import flowctl
    from flowctl.server import create_app
    from flowctl.store.apikeys import keys_of
    from flowctl.store.sql import open_store

    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

    root = seed_project(tmp / f"seed-{n}")
    project = flowctl.load_project(root)
    path = str(tmp / f"console-{n}.db")
    url = "sqlite:///" + path
    seeds = run_seeds(project, url, "loop", 10)
    t = time.perf_counter()
    ids = clone_runs(path, seeds, n - len(seeds), failed_every=10)
    fill_s = time.perf_counter() - t
    store = open_store(url)
    try:
        app = create_app(project, store, rate=1e9, burst=10**9)
        _, key = keys_of(store).create("bench", ["admin"])
        client = TestClient(app, base_url="http://testserver")
        pre = re.search(r'name="csrf" value="([^"]+)"', client.get("/console/signin").text).group(1)
        client.post("/console/signin", data={"csrf": pre, "key": key}, follow_redirects=False)
        first = client.get("/console/runs").text
        nxt = re.search(r'href="(/console/runs\?[^"]*cursor=[^"]+)" id="next-page"', first).group(1).replace("&amp;", "&")
        pages = {"runs": "/console/runs", "runs ?status=failed": "/console/runs?status=failed", "runs, next page": nxt,
                 "runs ?q= (id text)": f"/console/runs/rows?q={ids[-40][-8:]}", "one run": f"/console/runs/{ids[len(ids) // 2]}",
                 "health (latest 1,000)": "/console/health?window="}

        def timed(url):
            def once():
                started = time.perf_counter()
                r = client.get(url)
                took = time.perf_counter() - started
                assert r.status_code == 200, (url, r.status_code, r.text[:300])
                return took
            return once

        for u in pages.values():
            timed(u)()  # warm
        samples = interleaved({k: timed(u) for k, u in pages.items()}, trials)
    finally:
        store.close()
    return {"runs": n, "fill_s": fill_s,
            "ms": {k: {**stats(v), "median_ms": stats(v)["median_s"] * 1e3} for k, v in samples.items()}}


def run(store_sizes=(1000, 100000), trials: int = 5) -> dict:
    out: dict = {"trials": trials, "loadavg_before": loadavg()}
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-console-") as tmp:
        for n in store_sizes:
            out[str(n)] = measure(n, trials, Path(tmp))
    out["loadavg_after"] = loadavg()
    big, small = str(max(store_sizes)), str(min(store_sizes))
    ms = out[big]["ms"]["runs"]
    out["targets"] = {f"console. the runs page with {int(big):,} stored runs < 300 ms server time": target(
        ms["median_ms"], LIMIT_MS, unit="ms", note="" if big == "100000" else f"measured at {int(big):,} runs",
        ratios={"min–max ms": f"{ms['min_s'] * 1e3:.1f}–{ms['max_s'] * 1e3:.1f}",
                f"x at {int(small):,} runs": ms["median_s"] / out[small]["ms"]["runs"]["median_s"]})}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    out = run(**QUICK) if args.quick else run(trials=args.trials)
    for size, data in out.items():
        if isinstance(data, dict) and "ms" in data:
            print(f"{int(size):>7,} runs: " + ", ".join(f"{k} {v['median_ms']:.1f} ms" for k, v in data["ms"].items()))
    if not args.quick:
        write("console", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
