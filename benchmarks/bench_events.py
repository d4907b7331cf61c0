"""``flowctl events`` with 1,000,000 stored events, on SQLite and PostgreSQL (issue 21).

The store is built by bulk insert, not by running flows: ``runs`` runs of ``rows_per_run`` commits,
each commit a packed row (:func:`flowctl.store.audit.pack_text`, chained with
:func:`~flowctl.store.audit.pack_hash`) of the events a task step writes (``state_entered``,
``policy_decided``, ``tool_invoked``, ``tool_succeeded`` or ``tool_failed``, ``transition_taken``)
with realistic data, over ``tools`` tools. The runs start at random times over the last ``days``
days, so the last hour holds about 1/(24·days) of the events. The store is made at the current
schema by :func:`flowctl.store.sql.open_store` (its indexes), then filled (SQLite ``executemany``,
PostgreSQL ``COPY``) and analysed.

Timed through the DBAPI reader the CLI uses (:func:`flowctl.store.reader.open_reader`), every
matching event read: ``--tool T --since 1h`` and ``--run R`` (the p50 of ``trials`` runs each, the
queries interleaved). Target (issue 21): a filtered query of the last hour < 200 ms.

    python benchmarks/bench_events.py [--events N] [--trials N]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import PG, fresh_pg_database, loadavg, pg_available, write  # noqa: E402
from report import target  # noqa: E402

LIMIT_MS = 200.0
EVENTS_PER_ROW = 5


def build_rows(events: int, days: float, tools: int, seed: int = 21):
    """``(runs, event_rows, probe)``: run tuples, event-row tuples (the columns of :func:`_EVENT_COLS`)
    and what to query (a tool, a run id)."""
    from flowctl.store.audit import encode_data, pack_hash, pack_text

    rng = random.Random(seed)
    now = time.time()
    rows_per_run = 10
    n_runs = max(1, events // (EVENTS_PER_ROW * rows_per_run))
    names = [f"tool_{i:02d}" for i in range(tools)]
    runs, rows = [], []
    for r in range(n_runs):
        run_id = f"01bench{r:017d}"
        t = now - rng.random() * days * 86400
        created = t
        prev, seq = "", 0
        for step in range(rows_per_run):
            tool = f"{rng.choice(names)}@1.0.0"
            state = f"step_{step}"
            ok = rng.random() > 0.05
            evs = []
            for typ, data in (("state_entered", {"step": step + 1, "type": "task", "visit": 1}),
                              ("policy_decided", {"tool": tool, "outcome": "allow", "policy": "p", "rule": "allow",
                                                  "reason": "every check of p holds"}),
                              ("tool_invoked", {"tool": tool, "input": {"order_id": f"A-{r}", "amount": 49.9},
                                                "idempotency_key": f"hmac:{r:064x}"[:69]}),
                              (("tool_succeeded", {"tool": tool, "duration_ms": 2.5, "output": {"ok": True, "id": r}})
                               if ok else ("tool_failed", {"tool": tool, "duration_ms": 1.0, "error": "Timeout",
                                                           "message": "the carrier did not answer"})),
                              ("transition_taken", {"to": f"step_{step + 1}", "when": "true"})):
                seq += 1
                t += rng.random() * 0.01
                evs.append({"seq": seq, "ts": t, "type": typ, "state": state, "attempt": 1,
                            "data_json": encode_data(data)})
            text = pack_text(evs)
            digest = pack_hash(prev, text)
            rows.append((run_id, seq, t, "packed", state, None, text, prev, digest, None, len(evs)))
            prev = digest
        runs.append((run_id, "bench_flow", "1", "0" * 64, None, "succeeded", "{}", "{}", "{}", None, "{}", created, t,
                     None, None, seq, prev, rows_per_run, "default", 0, None, 0, None, None))
    return runs, rows, {"tool": names[0], "run_id": runs[len(runs) // 2][0]}


_RUN_COLS = ("id", "flow", "flow_version", "digest", "parent_id", "status", "input", "params", "output", "error",
             "cursor", "created_at", "updated_at", "available_at", "owner", "last_seq", "last_hash", "steps", "queue",
             "priority", "lease_until", "fence", "cancel_requested", "seal")
_EVENT_COLS = ("run_id", "seq", "ts", "type", "state", "attempt", "data", "prev_hash", "hash", "fence", "n_events")


def fill(url: str, runs: list, rows: list) -> float:
    """Create the store at ``url`` (current schema) and bulk insert; seconds taken."""
    from flowctl.store.sql import open_store

    started = time.perf_counter()
    open_store(url, create=True).close()
    if url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///"):])
        conn.executemany(f"INSERT INTO flowctl_runs ({', '.join(_RUN_COLS)}) VALUES ({', '.join('?' * len(_RUN_COLS))})", runs)
        conn.executemany(f"INSERT INTO flowctl_events ({', '.join(_EVENT_COLS)}) VALUES "
                         f"({', '.join('?' * len(_EVENT_COLS))})", rows)
        conn.commit()
        conn.execute("ANALYZE")
        conn.close()
    else:
        import psycopg

        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
            for table, cols, data in (("flowctl_runs", _RUN_COLS, runs), ("flowctl_events", _EVENT_COLS, rows)):
                with conn.cursor().copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy:
                    for row in data:
                        copy.write_row(row)
            conn.execute("ANALYZE")
    return time.perf_counter() - started


def time_queries(url: str, probe: dict, trials: int) -> dict:
    """p50/min/max milliseconds and events found of each query, through the CLI's reader."""
    from flowctl.store.core import SCHEMA_VERSION
    from flowctl.store.query import EventFilter, query_events
    from flowctl.store.reader import open_reader
    from flowctl.store.url import normalise_url

    reader = open_reader(normalise_url(url, Path(".")), SCHEMA_VERSION)
    assert reader is not None, "the bench store is not at this flowctl's schema"
    queries = {"tool + last hour": lambda: EventFilter(tool=probe["tool"], since=time.time() - 3600),
               "type tool_failed + last hour": lambda: EventFilter(type="tool_failed", since=time.time() - 3600),
               "run": lambda: EventFilter(run_id=probe["run_id"])}
    from flowctl.cli.commands.stats import compute

    samples = {k: [] for k in (*queries, "stats --since 1h --bucket 1h")}
    found = {}
    try:
        for i in range(trials + 1):  # the first round warms the caches and is not counted
            for name, make in queries.items():
                flt = make()
                t = time.perf_counter()
                n = sum(1 for _ in query_events(reader, flt))
                if i:
                    samples[name].append((time.perf_counter() - t) * 1000)
                found[name] = n
            # `flowctl stats` over the last hour, per tool per hour: the bulk-loaded runs keep no
            # summaries (schema 9), so this reads their events: the slow path, as after an upgrade
            t = time.perf_counter()
            figures = compute(reader, since=time.time() - 3600, bucket=3600.0)
            if i:
                samples["stats --since 1h --bucket 1h"].append((time.perf_counter() - t) * 1000)
            found["stats --since 1h --bucket 1h"] = figures.get("runs", 0)
    finally:
        reader.close()
    import statistics

    return {k: {"p50_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v), "events_found": found[k]}
            for k, v in samples.items()}


def run(events: int = 1_000_000, days: float = 7.0, tools: int = 12, trials: int = 5) -> dict:
    load_before = loadavg()
    t = time.perf_counter()
    runs, rows, probe = build_rows(events, days, tools)
    built = time.perf_counter() - t
    out = {"events": len(rows) * EVENTS_PER_ROW, "rows": len(rows), "runs": len(runs), "days": days, "tools": tools,
           "trials": trials, "build_seconds": built, "stores": {}, "targets": {}}
    with tempfile.TemporaryDirectory(prefix="flowctl-bench-events-") as tmp:
        url = f"sqlite:///{tmp}/events.db"
        fill_s = fill(url, runs, rows)
        out["stores"]["sqlite"] = dict(fill_seconds=fill_s, queries=time_queries(url, probe, trials))
    why = pg_available(PG)
    if why is None:
        with fresh_pg_database(PG, "flowctl_bench_events") as pg:
            url = pg.replace("postgresql://", "postgresql+psycopg://", 1)
            fill_s = fill(url, runs, rows)
            out["stores"]["postgresql"] = dict(fill_seconds=fill_s, queries=time_queries(url, probe, trials))
    else:
        out["postgresql_skipped"] = why
    for store, res in out["stores"].items():
        q = res["queries"]
        for name in ("tool + last hour", "run", "stats --since 1h --bucket 1h"):
            label = name if name.startswith("stats") else f"events {name}"
            found = "runs counted" if name.startswith("stats") else "events found"
            out["targets"][f"21. {label}, {out['events']:,} events, {store}"] = target(
                q[name]["p50_ms"], LIMIT_MS, unit="ms", ratios={found: q[name]["events_found"],
                                                                "max ms": q[name]["max_ms"]})
    out.update(loadavg_before=load_before, loadavg_after=loadavg())
    return out


QUICK = {"events": 50_000, "days": 7.0, "tools": 12, "trials": 2}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    out = run(args.events, args.days, trials=args.trials)
    write("events", out)
    print(f"{out['events']:,} events in {out['rows']:,} rows, built in {out['build_seconds']:.1f} s")
    for store, res in out["stores"].items():
        print(f"{store}: filled in {res['fill_seconds']:.1f} s; " + "; ".join(
            f"{k} p50 {v['p50_ms']:.1f} ms ({v['events_found']} {'runs' if k.startswith('stats') else 'events'})" for k, v in res["queries"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
