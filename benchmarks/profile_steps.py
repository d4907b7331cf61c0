"""Profile flowctl's step (the loop of :mod:`loop_flow`) with cProfile: in memory and on SQLite
(and PostgreSQL with --pg). Prints, and writes to ``benchmarks/results/profile_<store>.txt``,
the wall time per step with and without the profiler (in memory including the hash chain, which
the memory store computes when the run is first read, as ``bench_memory.py`` times it), the time per source file (self time summed
over its functions), the top functions by self time and by cumulative time, and the SQL
statements per step that go through SQLAlchemy (counted with a ``before_cursor_execute`` listener;
the per-step commit itself runs on the DBAPI connection of ``flowctl.store.hot`` and is not among
them: its share is the ``_commit_sqlite`` / ``_commit_pg`` row).

    python benchmarks/profile_steps.py [--memory 6000] [--sqlite 1200] [--pg]
"""
from __future__ import annotations

import argparse
import cProfile
import collections
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import RESULTS, fresh_pg_database  # noqa: E402
from loop_flow import expected_steps, make_project  # noqa: E402


def _short(path: str) -> str:
    for marker in ("site-packages/", "runtime/", "lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


# (function, file suffix): the parts of a step worth watching, in the engine's call order.
COMPONENTS = [
    ("enter", "flowctl/engine/loop.py", "enter the state: limits, visits, path, state_entered event"),
    ("call_tool", "flowctl/engine/calls.py", "the task: input, checks, gate, tool, output, 2 events"),
    ("_call_plain", "flowctl/engine/calls.py", "the same for a plain read-only call (its step plan: StepPlan)"),
    ("build", "flowctl/expr/scope.py", "input mappings and set values (JMESPath)"),
    ("check_instance", "flowctl/definition/runtime_schemas.py", "input/output schema checks"),
    ("decide", "flowctl/gate/policy.py", "policy gate"),
    ("tool_function", "flowctl/engine/engine.py", "tool lookup"),
    ("deepcopy", "copy.py", "copy of the tool input"),
    ("call_with_timeout", "flowctl/engine/tools.py", "timeout guard around the tool"),
    ("step", "loop_tools.py", "the tool itself"),
    ("_parse_output", "flowctl/engine/calls.py", "output: JSON check and a copy (flat outputs without encoding)"),
    ("flat_copy", "flowctl/engine/payload.py", "flat tool input/output copied instead of encoded"),
    ("_complete", "flowctl/engine/calls.py", "output check + tool_succeeded event"),
    ("advance", "flowctl/engine/transitions.py", "choose the transition, set, event, checkpoint"),
    ("evaluate", "flowctl/expr/expressions.py", "every JMESPath evaluation (input, when, set)"),
    ("apply_set", "flowctl/expr/scope.py", "set: values + payload-size check"),
    ("check_size", "flowctl/engine/context.py", "payload-size check (a bounded walk; encodes only big values)"),
    ("where", "flowctl/definition/model.py", "file:line:col strings built per step"),
    ("emit", "flowctl/engine/context.py", "all audit events"),
    ("encode_data", "flowctl/store/audit.py", "event data -> JSON"),
    ("event_hash", "flowctl/store/audit.py", "hash chain (sha256)"),
    ("iso", "flowctl/engine/clock.py", "ISO timestamps"),
    ("dumps", "json/__init__.py", "every json.dumps"),
    ("commit", "flowctl/engine/context.py", "checkpoint (runner side)"),
    ("to_json", "flowctl/engine/cursor.py", "the typed cursor as the checkpoint dict"),
    ("commit", "flowctl/store/memory.py", "checkpoint (MemoryStore)"),
    ("commit", "flowctl/store/core.py", "checkpoint (SqlStore: one transaction)"),
    ("_dumps", "flowctl/store/sql.py", "run row JSON other than the cursor"),
    ("_kept", "flowctl/store/memory.py", "MemoryStore keeps the events as tuples (data as its text, or marshal bytes)"),
    ("_chain", "flowctl/store/memory.py", "MemoryStore's hash chain, computed when the run is first read (sha256)"),
    ("_commit_sqlite", "flowctl/store/hot.py", "per-step commit on SQLite: BEGIN IMMEDIATE, UPDATE, INSERTs, COMMIT"),
    ("_commit_pg", "flowctl/store/hot.py", "per-step commit on PostgreSQL: one statement"),
    ("begin", "sqlalchemy/engine/base.py", "SQLAlchemy `with engine.begin()` enter+exit: pool checkout, BEGIN, COMMIT, check-in"),
    ("_execute_clauseelement", "sqlalchemy/engine/base.py", "SQLAlchemy Core execute (UPDATE, INSERT)"),
    ("_do_commit", "sqlalchemy/engine/base.py", "COMMIT"),
    ("wait", "psycopg/connection.py", "waiting on the PostgreSQL server"),
]


def profile(name: str, url: str, transitions: int, top: int = 30) -> str:
    import sqlalchemy as sa

    import flowctl
    from flowctl.store.sql import open_store

    with tempfile.TemporaryDirectory(prefix="flowctl-profile-") as tmp:
        project = flowctl.load_project(make_project(Path(tmp) / "p", transitions))
        if url == "sqlite":
            url = f"sqlite:///{tmp}/profile.db"

        def once(prof=None):
            store = open_store(url)
            statements: collections.Counter = collections.Counter()
            engine_ = getattr(store, "engine", None)
            if engine_ is not None:
                @sa.event.listens_for(engine_, "before_cursor_execute")
                def _count(conn, cursor, statement, params, context, executemany):
                    statements[" ".join(statement.split())[:90]] += 1
            engine = flowctl.Engine(project, store, check=False)
            started = time.perf_counter()
            if prof:
                prof.enable()
            result = engine.run("loop", {})
            if getattr(store, "seals_on_read", False):  # the memory store's hash chain, as bench_memory times it
                store.get_run(result.run_id, exact=True)
            if prof:
                prof.disable()
            took = time.perf_counter() - started
            assert result.status == "succeeded" and result.steps == expected_steps(transitions), result
            store.close()
            return took, statements

        plain, statements = once()
        prof = cProfile.Profile()
        profiled, _ = once(prof)

    out = io.StringIO()
    print(f"# flowctl step profile: {name} store, {transitions:,} transitions", file=out)
    print(f"wall: {plain / transitions * 1e6:.1f} µs/step unprofiled, {profiled / transitions * 1e6:.1f} µs/step "
          "under cProfile (the profiler inflates call-heavy code; use the shares, not the absolute numbers)\n", file=out)
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # self time of everything
    print("## where a step goes (cumulative, overlapping: a part includes the parts it calls)", file=out)
    print("scaled µs = share of the profiled run x the unprofiled wall time per step\n", file=out)
    print(f"{'calls/step':>10} {'share':>6} {'~µs/step':>9}  function — what it is", file=out)
    for fn, suffix, what in COMPONENTS:
        hits = [v for (path, _l, f), v in stats.stats.items() if f == fn and path.endswith(suffix)]
        if not hits:
            continue
        calls, cum = sum(v[1] for v in hits), sum(v[3] for v in hits)
        print(f"{calls / transitions:10.2f} {cum / total * 100:5.1f}% {cum / total * plain / transitions * 1e6:9.1f}  "
              f"{suffix.rsplit('/', 1)[-1]}:{fn} — {what}", file=out)
    print(file=out)
    by_file: collections.Counter = collections.Counter()
    for (path, _line, _fn), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        by_file[_short(path)] += tt
    print("## self time per file (share of the profiled run)", file=out)
    for path, tt in by_file.most_common(25):
        print(f"{tt / total * 100:5.1f}%  {tt / transitions * 1e6:7.1f} µs/step  {path}", file=out)
    if statements:
        print("\n## SQL statements executed (count per step)", file=out)
        for stmt, n in statements.most_common(15):
            print(f"{n / transitions:6.2f}  {stmt}", file=out)
        print(f"{sum(statements.values()) / transitions:6.2f}  in all", file=out)
    for key, title in (("tottime", "self time"), ("cumulative", "cumulative time")):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(top)
        text = s.getvalue()
        text = text[text.find("   ncalls"):]
        print(f"\n## top {top} functions by {title}\n{text}", file=out)
    report = out.getvalue()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"profile_{name}.txt").write_text(report)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", type=int, default=6000, help="transitions of the in-memory run")
    parser.add_argument("--sqlite", type=int, default=1200, help="transitions of the SQLite run")
    parser.add_argument("--pg", action="store_true", help="also profile on PostgreSQL (a fresh database, dropped)")
    args = parser.parse_args(argv)
    print(profile("memory", "memory", args.memory))
    print(profile("sqlite", "sqlite", args.sqlite))
    if args.pg:
        with fresh_pg_database() as url:
            print(profile("postgresql", url, args.sqlite))
    return 0


if __name__ == "__main__":
    sys.exit(main())
