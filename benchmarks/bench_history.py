"""History must not slow the present (issue 17, target 4).

A store holding ``--runs`` runs (default 100,000; one in ten a child run, one in twenty failed,
four events each, with the summary of facts the store keeps when a run ends: schema 9, and its
figures: schema 12) and
``--gate`` gate-log rows is built directly in the store's tables; then, in process, with the
store open, each of these is timed (median of ``--trials`` rounds, min and max beside it,
milliseconds; ``--only stats``: that part alone):

* ``runs``: ``list_runs(limit=50, top_level=True)`` and the database clock, as ``flowctl runs``;
* ``runs_failed``: the same with ``status="failed"``;
* ``prefix``: ``get_run`` of a 10-character run-id prefix;
* ``stats``: ``flowctl stats``' figures over the latest 1,000 top-level runs;
* ``gate_rate``: one gate admission with a per-flow rate limit over the gate log (no insert);
* ``start_paused``: ``fire_due_reviews`` then a one-step run, with ``--paused`` (10,000) paused
  reviews that are not due in the store, next to ``start_empty`` with none (``paused_ratio``;
  the trials of the two interleaved, so that both see the same machine load).

The store is ``ANALYZE``d after it is filled, as PostgreSQL's autovacuum would.

    python benchmarks/bench_history.py --label before|after [--runs N] [--pg] [--out FILE]

Results are merged into ``benchmarks/results/history.json`` under ``label`` and backend.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import RESULTS, fresh_pg_database, interleaved, loadavg, pg_available  # noqa: E402

PROJECT = {
    "contracts/echo.v1.0.0.yaml": "id: echo\nversion: 1.0.0\nentrypoint: tk:echo\n",
    "tools/tk.py": "def echo(input, call):\n    return {'echo': input}\n",
    "states/a.yaml": "id: a\ntype: task\ntool: echo@1.0.0\ninput: {name: input.name}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/f.yaml": "flow: f\nversion: 1\nstart: a\ntransitions:\n  - {from: a, to: done}\n",
}
T0 = 1_700_000_000.0


def _write_project(root: Path) -> Path:
    for rel, text in PROJECT.items():
        path = root / "orchestration" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _run_id(i: int) -> str:
    return f"{i * 2654435761 % 16**12:012x}{i:012x}"


def _fill(store, n_runs: int, n_gate: int, n_paused: int = 0, batch: int = 20_000) -> list:
    """Insert the synthetic history (each ended run with its summary, as the store keeps it); returns the run ids."""
    from flowctl.store.summary import facts_of, summary_text

    try:
        from flowctl.store.summary import figures_text
    except ImportError:  # a flowctl before schema 12 (an A/B against an older tree)
        figures_text = None

    t = store.t
    ids = []
    cursor = json.dumps({"state": "done", "step": 2, "path": ["a", "done"], "context": {"note": "x" * 200}})
    for lo in range(0, n_runs, batch):
        runs, events, summaries = [], [], []
        for i in range(lo, min(n_runs, lo + batch)):
            rid = _run_id(i)
            ids.append(rid)
            failed = i % 20 == 7
            child = i % 10 == 3
            runs.append({"id": rid, "flow": "child" if child else "f", "flow_version": "1", "digest": "d" * 64,
                         "parent_id": ids[i - 1] if child else None, "status": "failed" if failed else "succeeded",
                         "input": '{"name":"x"}', "params": "{}", "output": None if failed else '{"ok":true}',
                         "error": '{"code":"X","type":"ToolError"}' if failed else None, "cursor": cursor,
                         "created_at": T0 + i, "updated_at": T0 + i + 1, "owner": "bench:1", "last_seq": 4,
                         "last_hash": "h" * 64, "steps": 2})
            tool = f"t{i % 50}@1.0.0"
            outcome = "tool_failed" if failed else "tool_succeeded"
            for seq, (typ, data) in enumerate((
                    ("state_entered", {"step": 1, "type": "task"}),
                    ("tool_invoked", {"tool": tool}),
                    (outcome, {"tool": tool, "duration_ms": 1.0 + i % 7, "output": {"ok": True}, "error": "X",
                               "message": "m"}),
                    ("run_failed" if failed else "run_succeeded", {})), start=1):
                events.append({"run_id": rid, "seq": seq, "ts": T0 + i, "type": typ, "state": "a", "attempt": 1,
                               "data": json.dumps(data), "prev_hash": "p" * 64, "hash": "h" * 64})
            # the facts the commit that ended the run keeps (schema 9) and their figures (schema 12)
            parsed = [dict(e, data=json.loads(e["data"])) for e in events[-4:]]
            summaries.append({"run_id": rid, "last_seq": 4, "facts": summary_text(parsed)})
            if figures_text is not None:
                summaries[-1]["figures"] = figures_text(facts_of(parsed))
        with store.engine.begin() as conn:
            conn.execute(t.runs.insert(), runs)
            conn.execute(t.events.insert(), events)
            conn.execute(t.run_summaries.insert(), summaries)
    for lo in range(0, n_gate, batch):
        rows = [{"at": T0 + i * 0.01, "tool": f"t{i % 50}@1.0.0", "flow": f"flow{i % 20}", "run_id": _run_id(i % max(n_runs, 1)),
                 "digest": f"{i:064x}"} for i in range(lo, min(n_gate, lo + batch))]
        with store.engine.begin() as conn:
            conn.execute(t.gate_log.insert(), rows)
    _fill_paused(store, n_paused, batch)
    return ids


def _fill_paused(store, n: int, batch: int = 20_000) -> None:
    """``n`` runs paused for a review whose reminder and deadline lie a year ahead."""
    far = time.time() + 365 * 86400
    cursor = json.dumps({"state": "rev", "step": 2, "path": ["a", "rev"], "context": {"note": "x" * 200},
                         "pending": {"kind": "review", "state": "rev", "deadline": far, "remind_at": far - 3600,
                                     "token_hash": "t" * 64, "decisions": ["approve", "reject"], "show": {"n": 1}}})
    t = store.t
    for lo in range(0, n, batch):
        rows = [{"id": f"paused{i:010d}", "flow": "f", "flow_version": "1", "digest": "d" * 64, "status": "paused",
                 "input": "{}", "params": "{}", "cursor": cursor, "created_at": T0 - n + i, "updated_at": T0,
                 "available_at": far - 3600, "last_seq": 4, "last_hash": "h" * 64, "steps": 2}
                for i in range(lo, min(n, lo + batch))]
        with store.engine.begin() as conn:
            conn.execute(t.runs.insert(), rows)


def _timed(fn, trials: int, inner: int = 1) -> dict:
    fn()  # warm: caches, compiled statements
    samples = []
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t) / inner * 1000.0)
    return {"median_ms": round(statistics.median(samples), 3), "min_ms": round(min(samples), 3),
            "max_ms": round(max(samples), 3), "trials": trials}


def _stats(store):
    from flowctl.cli.commands.stats import compute

    return compute(store, 1000, None)


def measure(url: str, n_runs: int, n_gate: int, n_paused: int, trials: int, only: str | None = None) -> dict:
    import flowctl
    from flowctl.engine.engine import Engine
    from flowctl.store.sql import open_store

    out = {"runs_in_store": n_runs, "gate_rows": n_gate, "paused": n_paused}
    store = open_store(url)
    try:
        t = time.perf_counter()
        ids = _fill(store, n_runs, n_gate)
        with store.engine.begin() as conn:  # table statistics, as autovacuum (PostgreSQL) would gather them
            conn.exec_driver_sql("ANALYZE")
        out["fill_s"] = round(time.perf_counter() - t, 1)
        mid = ids[len(ids) // 2]
        now = lambda: store.now()  # noqa: E731 - as flowctl runs asks it
        out["runs"] = _timed(lambda: (store.list_runs(limit=50, top_level=True), now()), trials)
        out["runs_failed"] = _timed(lambda: store.list_runs(status="failed", limit=50, top_level=True), trials)
        assert store.get_run(mid[:10])["id"] == mid
        out["prefix"] = _timed(lambda: store.get_run(mid[:10]), trials)
        s = _stats(store)
        assert s["runs"] == 1000 and sum(v["calls"] for v in s["tools"].values()) > 0, s
        out["stats"] = _timed(lambda: _stats(store), trials)
        if only == "stats":
            return out
        limits = [{"kind": "rate", "since": T0, "max": 10**9, "column": "flow", "value": "flow3"}]
        out["gate_rate"] = _timed(lambda: store.gate_admit(["t3@1.0.0"], limits, None), trials)
    finally:
        store.close()
    with tempfile.TemporaryDirectory() as tmp:
        project = flowctl.load_project(_write_project(Path(tmp)))
        urls = {label: _fresh(url, label) for label in ("start_empty", "start_paused")}
        stores = {label: open_store(u) for label, u in urls.items()}
        try:
            _fill_paused(stores["start_paused"], n_paused)
            engines = {label: Engine(project, st) for label, st in stores.items()}

            def start(label):
                def once():
                    t = time.perf_counter()
                    engines[label].fire_due_reviews()
                    assert engines[label].run("f", {"name": "x"}).status == "succeeded"
                    return (time.perf_counter() - t) * 1000.0
                return once

            for label in engines:
                start(label)()  # warm
            samples = interleaved({label: start(label) for label in engines}, trials * 3)  # same load for both
            for label, xs in samples.items():
                out[label] = {"median_ms": round(statistics.median(xs), 3), "min_ms": round(min(xs), 3),
                              "max_ms": round(max(xs), 3), "trials": len(xs)}
        finally:
            for label, st in stores.items():
                st.close()
                _drop(urls[label])
        out["paused_ratio"] = round(out["start_paused"]["median_ms"] / out["start_empty"]["median_ms"], 2)
    return out


_TMP: dict = {}


def _fresh(url: str, label: str) -> str:
    """A new empty store next to ``url`` (a new SQLite file, or a new PostgreSQL database)."""
    if url.startswith("sqlite"):
        path = Path(url[len("sqlite:///"):]).with_name(f"{label}.db")
        return f"sqlite:///{path}"
    db = fresh_pg_database()
    fresh = db.__enter__()
    _TMP[fresh] = db
    return fresh


def _drop(url: str) -> None:
    db = _TMP.pop(url, None)
    if db is not None:
        db.__exit__(None, None, None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="before / after: the key the results are kept under")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--gate", type=int, default=100_000)
    parser.add_argument("--paused", type=int, default=10_000)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--only", choices=("stats",), help="measure only this part (the fill is the same)")
    parser.add_argument("--pg", action="store_true", help="also on PostgreSQL (FLOWCTL_BENCH_PG)")
    parser.add_argument("--out", default=str(RESULTS / "history.json"))
    args = parser.parse_args(argv)
    results = {"loadavg_start": loadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = measure(f"sqlite:///{tmp}/history.db", args.runs, args.gate, args.paused, args.trials, args.only)
    if args.pg:
        why = pg_available()
        if why:
            results["postgresql"] = {"skipped": why}
        else:
            with fresh_pg_database() as url:
                results["postgresql"] = measure(url, args.runs, args.gate, args.paused, args.trials, args.only)
    results["loadavg_end"] = loadavg()
    results["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = Path(args.out)
    kept = json.loads(out.read_text()) if out.exists() else {}
    kept[args.label] = results
    out.write_text(json.dumps(kept, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
