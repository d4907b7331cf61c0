"""Targets and verdicts of issue 17, and the table of them at the top of BENCHMARKS.md.

A *target* is ``{value, limit, met, higher_is_better, unit, ratios}``: ``value`` is measured in
this run, ``limit`` is the issue's bound, ``met`` the verdict. ``value`` may be None when the
measurement did not finish (a time-boxed size that ran out of time); then ``lower_bound`` says
what is known (the value is at least that) and the verdict follows from it.

:func:`collect` gathers every part's targets into issue-17 order; :func:`render_targets` writes
the rows (value, limit, verdict, same-run ratios).
"""
from __future__ import annotations

import math

#: issue 17's targets, in its order: (number, text). Each part's ``targets`` keys start with the number.
ISSUE_17 = (
    ("1", "In-memory step <= 0.8x one `transitions` transition (compiled conditions, hash chain included)"),
    ("2a", "SQLite durable step <= 1.5x the raw sqlite3 floor"),
    ("2b", "Group commit: >= 2x steps/s at 8 concurrent runs (vs the same runs one at a time)"),
    ("3a", "Map over 10,000 items on SQLite <= 2 ms per item"),
    ("3b", "Map flat in the item count: ms per item at 10,000 <= 1.25x at 1,000"),
    ("4a", "100,000 stored runs: `runs` (list_runs, 50 newest) <= 20 ms"),
    ("4b", "100,000 stored runs: `runs --status failed` <= 20 ms"),
    ("4c", "100,000 stored runs: run-id prefix lookup <= 20 ms"),
    ("4d", "100,000 stored runs: `stats` <= 20 ms"),
    ("4e", "Starting a run with 10,000 paused runs <= 1.15x with none"),
    ("4f", "The gate's rate count uses an index on (tool, scope, at)"),
    ("5a", "`trace` of a 100,000-step run <= 10 s"),
    ("5b", "`trace` of a 100,000-step run <= 200 MB peak RSS"),
    ("5c", "`audit verify` of a 100,000-step run <= 10 s"),
    ("5d", "`audit verify` of a 100,000-step run <= 200 MB peak RSS"),
    ("6a", "10,000-state project: `flowctl runs` <= 0.5 s"),
    ("6b", "10,000-state project: a 10-step `flowctl run` <= 1.5 s"),
    ("7a", "Cold start `flowctl run` (3-step flow, SQLite) <= 200 ms"),
    ("7b", "Cold start `flowctl trace RUN` <= 200 ms"),
    ("7c", "Cold start `flowctl runs` <= 200 ms"),
    ("8a", "One worker process >= 1.5x the runs/s before issue 17 (same machine)"),
    ("8b", "p99 step commit < 10 ms at 4 worker processes"),
)


def met(value, limit, higher_is_better: bool = False) -> bool:
    """The verdict: ``value`` within ``limit`` (a bool ``limit``: ``value`` is it). ``value`` None
    (a time-boxed measurement that ran out of time, the value at least ``lower_bound``, or one that
    did not run): not met — nothing shows it within the limit."""
    if isinstance(limit, bool):
        return value is limit
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return value >= limit if higher_is_better else value <= limit


def target(value, limit: float, *, higher_is_better: bool = False, unit: str = "", ratios: dict | None = None,
           lower_bound=None, note: str = "") -> dict:
    """One target's row (see the module docstring); ``ratios``: other same-run ratios to show."""
    out = {"value": value, "limit": limit, "higher_is_better": higher_is_better, "unit": unit,
           "met": met(value, limit, higher_is_better), "ratios": dict(ratios or {})}
    if lower_bound is not None:
        out["lower_bound"] = lower_bound
    if note:
        out["note"] = note
    return out


def collect(results: dict) -> list:
    """``[(number, text, part, target or None)]`` for every issue-17 target, in the issue's order;
    None where no part of this run measured it."""
    found: dict = {}
    for part, data in results.items():
        if isinstance(data, dict):
            for name, t in (data.get("targets") or {}).items():
                number = name.split(" ", 1)[0].rstrip(".")
                if any(number == n for n, _ in ISSUE_17):
                    found[number] = (part, t)
    return [(n, text, *found.get(n, (None, None))) for n, text in ISSUE_17]


def fmt_value(t: dict) -> str:
    unit = t.get("unit", "")
    if t.get("value") is None:
        return f"> {t['lower_bound']:.3g} {unit}".strip() if t.get("lower_bound") is not None else "not measured"
    v = t["value"]
    if isinstance(v, bool):
        return "yes" if v else "no"
    return f"{v:.3g} {unit}".strip()


def verdict(t: dict | None) -> str:
    if t is None:
        return "not measured"
    word = "met" if t["met"] else "**not met**"
    v = t.get("value")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and t["limit"] and abs(v / t["limit"] - 1) < 0.1:
        word += " (within 10%)"
    return word


def render_targets(results: dict) -> list:
    """Markdown lines: one row per issue-17 target."""
    lines = ["| # | target (issue 17) | value | limit | verdict | same-run ratios / notes |",
             "| --- | --- | ---: | ---: | --- | --- |"]
    for number, text, part, t in collect(results):
        if t is None:
            lines.append(f"| {number} | {text} | – | – | not measured | part not run |")
            continue
        limit = "yes" if isinstance(t["limit"], bool) else f"{'≥' if t.get('higher_is_better') else '≤'} {t['limit']:g}"
        extra = "; ".join(f"{k} {v:.3g}" if isinstance(v, (int, float)) else f"{k} {v}"
                          for k, v in t.get("ratios", {}).items())
        if t.get("note"):
            extra = f"{extra}; {t['note']}" if extra else t["note"]
        lines.append(f"| {number} | {text} | {fmt_value(t)} | {limit} | {verdict(t)} | {extra} |")
    return lines


def render_other_targets(results: dict) -> list:
    """Markdown lines: the targets of the other issues (16, 18–21) that the parts of this run
    measured, one row each (``[]`` when there are none)."""
    rows = []
    for part, data in results.items():
        if not isinstance(data, dict):
            continue
        for name, t in (data.get("targets") or {}).items():
            number = name.split(" ", 1)[0].rstrip(".")
            if any(number == n for n, _ in ISSUE_17) or not isinstance(t, dict) or "limit" not in t:
                continue
            limit = "yes" if isinstance(t["limit"], bool) else f"{'≥' if t.get('higher_is_better') else '≤'} {t['limit']:g}"
            extra = "; ".join(f"{k} {v:.3g}" if isinstance(v, (int, float)) else f"{k} {v}"
                              for k, v in (t.get("ratios") or {}).items())
            if t.get("note"):
                extra = f"{extra}; {t['note']}" if extra else t["note"]
            verdict_text = verdict(t) if "met" in t else ("met" if t.get("value") is not None and (
                t["value"] >= t["limit"] if t.get("higher_is_better") else t["value"] <= t["limit"]) else "**not met**")
            rows.append(f"| {part} | {name} | {fmt_value(t)} | {limit} | {verdict_text} | {extra} |")
    if not rows:
        return []
    return ["## Other issues' targets", "",
            "The targets of issues 16 and 18–21 that this run measured (same-run ratios where a ratio is given).", "",
            "| part | target | value | limit | verdict | notes |", "| --- | --- | ---: | ---: | --- | --- |",
            *rows, ""]


# ----------------------------------------------------------------------------- BENCHMARKS.md
def _us(x: float) -> str:
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def _ratio(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def _spread(st: dict, per: int = 1, scale: float = 1e6) -> str:
    """``min–max`` of a :func:`common.stats` dict, per unit (µs by default)."""
    lo, hi = st["min_s"] / per * scale, st["max_s"] / per * scale
    return f"{_us(lo)}–{_us(hi)}"


def _load(d: dict) -> str:
    b, a = d.get("loadavg_before"), d.get("loadavg_after")
    fmt = lambda v: "/".join(f"{x:.2f}" for x in v) if v else "n/a"  # noqa: E731
    return f"load average (1/5/15 min) {fmt(b)} before, {fmt(a)} after"


def _targets(d: dict) -> list:
    """A part's targets as a bullet list: name, verdict, value against limit, and by how much it misses."""
    lines = []
    for name, t in d.get("targets", {}).items():
        limit = ("yes" if t["limit"] else "no") if isinstance(t["limit"], bool) else f"{t['limit']:g}"
        by = f"{fmt_value(t)} ({'needs ≥' if t.get('higher_is_better') else 'limit'} {limit})"
        v = t.get("value")
        if not t["met"] and isinstance(v, (int, float)) and not isinstance(v, bool) and v:
            factor = t["limit"] / v if t.get("higher_is_better") else v / t["limit"]
            by += f"; {'short' if t.get('higher_is_better') else 'over'} by a factor {factor:.2f}"
        lines.append(f"- {name}: {'**met**' if t['met'] else '**not met**'} — {by}")
    return lines


def render(r: dict, commands: dict) -> str:
    """BENCHMARKS.md from a run's results (``run.py``'s dict); ``commands``: how to reproduce each part."""
    m = r["machine"]
    v = m["versions"]
    lines = [
        "# Benchmarks",
        "",
        f"Measured by `make bench` on {r['started']} ({r['seconds'] / 60:.1f} min in all). Raw results: "
        "`benchmarks/results/latest.json`. Every number is a median over repeated trials taken in this one run; "
        "the trials of the things compared are interleaved (one of each per round, order rotated) so that they "
        "see the same machine load. Other processes were running on the machine: the load average is recorded "
        "with each part.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m.get('memory', '?')} memory, {m['platform']}, "
        f"Python {m['python']}, SQLite {m.get('sqlite', '?')}, PostgreSQL {m.get('postgresql') or 'not reachable'}.  ",
        f"Load average at start {r.get('loadavg_start')}, at end {r.get('loadavg_end')}.  ",
        f"Code: commit {r.get('code', {}).get('commit')}"
        + (" with uncommitted changes in runtime/" if r.get("code", {}).get("runtime_uncommitted_changes") else "") + ".  "
        + "".join(f"Part `{p}` measured again on its own (`run.py --only {p}`) at commit {x.get('code', {}).get('commit')}, "
                  f"load {x.get('loadavg_start')} → {x.get('loadavg_end')}.  " for p, x in r.get("remeasured", {}).items()),
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val) + ".",
        "",
        "Peers are installed by `pip install -e '.[bench]'` (`make bench` does it): "
        "transitions 0.9.x, python-statemachine 3.x, DBOS 3.x, psycopg 3.",
        "",
        "## Issue 17's targets",
        "",
        "Every target of issue 17, measured in this run (ratios are same-run ratios). A value `> x` is a "
        "time-boxed measurement that ran out of its box: the value is at least x. A verdict within 10% of its "
        "limit can flip between runs on this shared 2-core machine.",
        "",
        *render_targets(r),
        "",
        *render_other_targets(r),
        "Spread: every table below shows the median and, where the trials are repeated, the min–max of the "
        "trials. What dominates where a target is missed: `benchmarks/PROFILE.md`.",
    ]

    if "memory" in r:
        s = r["memory"]
        res = s["results"]
        lines += ["", "## 1. In-memory step", "",
                  f"A 3-state cycle a → b → c → a with a trivial tool per state and one JMESPath condition per "
                  f"transition, {s['transitions']:,} transitions for every contender, {s['trials']} interleaved trials; "
                  f"{_load(s)}. flowctl runs `Engine(project, MemoryStore(), check=False).run('loop')`: per step the "
                  "input mapping, input and output schema checks, the tool, the condition, `set` and the audit events; "
                  "its timing ends with reading the run back (`store.get_run`), which computes the audit hash chain the "
                  "memory store defers until a read. The peers call the same tool on entering each state and evaluate "
                  "the same condition as their transition guard; the floor is a bare `for` loop doing only that. Every "
                  "contender evaluates flowctl's compiled conditions (`flowctl.expr.expressions.compile_expr`: closures "
                  "built from the JMESPath parse tree), not jmespath's tree interpreter. `floor + the record` is the "
                  "floor plus the audit record flowctl keeps of a step and nothing else (`loop_flow.record_loop`: the "
                  "four events' stored texts, a timestamp each, and their sha256 hash chain computed when read, as the "
                  "memory store keeps them): the least any step keeping this record costs.", "",
                  "| contender | µs / transition | min–max µs | transitions / s | ratio to floor | ratio to `transitions` |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        labels = {"floor": "floor: bare Python loop, same tool calls and compiled conditions",
                  "transitions": f"transitions {s['versions']['transitions']} (`Machine`, condition + on_enter)",
                  "python-statemachine": f"python-statemachine {s['versions']['python-statemachine']} (cond + on_enter)",
                  "floor + the record": "floor + the record alone: the 4 events' stored texts and their hash chain",
                  "flowctl": "flowctl, in-memory store"}
        for k in ("floor", "floor + the record", "transitions", "python-statemachine", "flowctl"):
            if k not in res:  # (a run of this part before the record floor was measured)
                continue
            lines.append(f"| {labels[k]} | {_us(res[k]['us_per_op'])} | {_spread(res[k], s['transitions'])} | "
                         f"{res[k]['ops_per_s']:,.0f} | "
                         f"{_ratio(s['ratio_to_floor'][k])} | {_ratio(s['ratio_to_transitions'][k])} |")
        lines += ["", "Targets:", *_targets(s)]

    if "durable" in r:
        s = r["durable"]
        res = s["results"]
        lines += ["", "## 2. Durable step", "",
                  f"The same flow with one checkpoint commit per step, {s['transitions']:,} transitions per run, "
                  f"{s['trials']} interleaved trials, a fresh SQLite file or PostgreSQL database per trial; "
                  f"{_load(s)}. Times cover the run only (not opening the store, migrations or `DBOS.launch()`). "
                  "DBOS: a `@DBOS.workflow` calling the tool as one `@DBOS.step` per transition and evaluating the "
                  "same compiled condition, in a child process per trial.", "",
                  "| store | contender | µs / step | min–max µs | steps / s | ratio to floor |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        for k, val in res.items():
            store = "PostgreSQL" if ("postgresql" in k or "psycopg" in k) else "SQLite"
            per = round(val["median_s"] / val["us_per_op"] * 1e6)
            lines.append(f"| {store} | {k} | {_us(val['us_per_op'])} | {_spread(val, per)} | {val['ops_per_s']:,.0f} | "
                         f"{_ratio(s['ratio_to_floor'][k])} |")
        if "postgresql" in s:
            pg = s["postgresql"]
            lines += ["", f"PostgreSQL {pg['server_version']}: synchronous_commit={pg['synchronous_commit']}, "
                          f"fsync={pg['fsync']}, wal_sync_method={pg['wal_sync_method']}."]
        elif "postgresql_skipped" in s:
            lines += ["", f"PostgreSQL skipped: {s['postgresql_skipped']}"]
        lines += ["", "Durability: " + s["durability"]["sqlite"] + " PostgreSQL: " + s["durability"]["postgresql"],
                  "", "Floors: the bare loop's work plus, per step, raw `sqlite3` doing `BEGIN IMMEDIATE`, one `INSERT` "
                  "(the step's output), one `UPDATE` (the run row), `COMMIT`; or raw `psycopg` in autocommit sending one "
                  "statement per step — the `UPDATE` of the run row and the `INSERT` of the output in one CTE: one round "
                  "trip and one commit, as flowctl's step makes.",
                  "", "Group commit: `8 runs at once` is 8 threads each driving one run of "
                  f"{s.get('group', {}).get('transitions', '?')} steps on one shared "
                  "SQLite store; `one by one` the same 8 runs in turn on one store; µs per step over all 8 runs' steps.",
                  "", "Targets:", *_targets(s)]

    if "validate" in r:
        s = r["validate"]
        lines += ["", "## 3. Validate", "",
                  f"A generated project of {s['files']:,} files (10,000 states, 1,000 flows), {s['trials']} alternating "
                  f"trials; {_load(s)}.", "",
                  "| what | seconds | ratio to floor |", "| --- | ---: | ---: |",
                  f"| floor: parse the {s['files']:,} files with PyYAML's C loader | {s['parse_floor_s']:.2f} | 1.00 |",
                  f"| `flowctl.validate(flowctl.load_project(root))` in process | {s['validate_library_s']:.2f} | "
                  f"{s['ratio_library_to_floor']:.2f} |",
                  f"| `flowctl validate --root ROOT` (CLI, fresh process) | {s['validate_cli_s']:.2f} | "
                  f"{s['ratio_cli_to_floor']:.2f} |",
                  "", "Targets:", *_targets(s)]

    if "cold" in r:
        s = r["cold"]
        lines += ["", "## 4. CLI cold start", "",
                  f"A fresh process each, {s['trials']} interleaved trials after one warm-up; {_load(s)}.", "",
                  "| command | seconds | min–max s | over `python -c pass` |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| `{s['commands'][k]}`{' (in the repo root: the shipped example project)' if 'examples' in k else ''} | "
                  f"{val['median_s']:.3f} | {val['min_s']:.3f}–{val['max_s']:.3f} | {s['over_python_s'][k]:.3f} |"
                  for k, val in s["results"].items()]
        lines += ["", "The store commands run on a 3-step project with a SQLite store (`--root`, `--db` given); every "
                  "`flowctl run` trial adds a run to it."]
        lines += ["", "Targets:", *_targets(s)]

    if "policy" in r:
        p = r["policy"]
        lines += ["", "## 5a. Policy decision latency", "",
                  f"`Gate.decide` for a side-effecting tool with four allow checks, a rate limit and dedupe, "
                  f"{p['memory']['decisions']:,} decisions per store; {_load(p)}.", "",
                  "| store | p50 ms | p99 ms |", "| --- | ---: | ---: |"]
        lines += [f"| {k} | {p[k]['p50_ms']:.3f} | {p[k]['p99_ms']:.3f} |" for k in ("memory", "sqlite")]
        lines += ["", "Targets (issue 5):", *_targets(p)]

    if "diff" in r:
        d = r["diff"]
        parts = d["parts_median_seconds"]
        lines += ["", "## 5b. Diff", "",
                  f"`flowctl diff` of two generated projects ({d['states']['base']:,} / {d['states']['head']:,} states, "
                  f"{d['flows']} flows; {d['changes'].get('flows_affected', '?')} flows affected), median of "
                  f"{d['repeat']}; {_load(d)}.", "",
                  "| what | seconds |", "| --- | ---: |",
                  f"| end to end: load both folders, compare, render text | {d['median_seconds']:.3f} |"]
        lines += [f"| {k.replace('_', ' ')} | {val:.4f} |" for k, val in parts.items()]
        lines += ["", "Targets (issue 4):", *_targets(d)]

    if "workers" in r:
        lines += _render_workers(r["workers"])
    if "map" in r:
        lines += _render_map(r["map"])
    if "scaling" in r:
        lines += _render_scaling(r["scaling"])
    if "pgcapacity" in r:
        lines += _render_pgcapacity(r["pgcapacity"])
    if "regression" in r:
        lines += _render_regression(r["regression"])
    if "events" in r:
        lines += _render_events(r["events"])
    if "model" in r:
        lines += _render_model(r["model"])

    for part, trace in r.get("errors", {}).items():
        lines += ["", f"## {part}: failed in this run", "", "```", trace.strip().splitlines()[-1], "```"]

    lines += ["", "## Reproduce", "", "```sh"]
    lines += list({**commands, **r.get("commands", {})}.values())  # the commands this run was made with
    lines += ["```", "",
              "Each `bench_*.py` also runs alone (it then writes `benchmarks/results/<part>.json`); "
              "`python benchmarks/run.py --quick` is a smoke test of the whole run. The PostgreSQL server is "
              "`FLOWCTL_BENCH_PG` (default `postgresql://postgres@127.0.0.1:5432/test`); each trial creates a "
              "database there and drops it. Profile findings: `benchmarks/PROFILE.md`.", ""]
    return "\n".join(lines)


def _render_events(e: dict) -> list:
    """Issue 21: ``flowctl events`` across runs with a million stored events (bench_events)."""
    lines = ["", "## Events across runs (issue 21)", "",
             f"`flowctl events` on a store of {e['events']:,} events ({e['rows']:,} packed rows, {e['runs']:,} runs over "
             f"the last {e['days']:g} days, {e['tools']} tools), filled by bulk insert; every matching event read through "
             f"the CLI's reader; p50 of {e['trials']}; {_load(e)}. `stats --since 1h --bucket 1h` counts the runs of the "
             f"last hour from their events (bulk-loaded runs keep no schema-9 summary: the slow path).", "",
             "| store | filled in s | query | p50 ms | max ms | events found (stats: runs counted) |", "| --- | ---: | --- | ---: | ---: | ---: |"]
    for store, res in e.get("stores", {}).items():
        for name, q in res["queries"].items():
            lines.append(f"| {store} | {res['fill_seconds']:.1f} | {name} | {q['p50_ms']:.1f} | {q['max_ms']:.1f} | "
                         f"{q['events_found']:,} |")
    if e.get("postgresql_skipped"):
        lines.append(f"PostgreSQL not measured: {e['postgresql_skipped']}")
    lines += ["", "Targets (issue 21):", *_targets(e)]
    return lines


def _render_workers(w: dict) -> list:
    lines = ["", "## 6. Workers on PostgreSQL (issue 9)", ""]
    if "skipped" in w:
        return lines + [f"Skipped: {w['skipped']}"]
    pg = w.get("postgresql", {})
    lines += [f"{w['runs']:,} queued runs of a 3-step flow (the trivial tool of section 1 in three task states) "
              f"drained by K worker processes, each driving up to {w['concurrency']} runs at once; flowctl "
              f"`flowctl worker --concurrency {w['concurrency']}` vs DBOS {w['versions']['dbos']} queue workers "
              f"(`worker_concurrency={w['concurrency']}`, polling every {w['dbos_polling_interval_s']:g} s), a fresh "
              f"database per trial on PostgreSQL {pg.get('server_version', '?')} (synchronous_commit="
              f"{pg.get('synchronous_commit', '?')}), {w['trials']} interleaved trials; {_load(w)}. "
              "Runs/s = runs / drain; the drain runs from the start signal given to workers that are already up "
              "(runs queued, processes started and initialised beforehand, not timed) to the last run's final commit. "
              "Step commit: wall time of the transaction that makes one step durable, timed inside the workers "
              "(flowctl `SqlStore.commit` ending a task state; DBOS `record_operation_result`); p50/p99 over every "
              "step of a trial, median over trials.", "",
              "| system | workers | runs / s | drain s | scaling vs 1 worker | step commit p50 ms | p99 ms |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, x in w["results"].items():
        lines.append(f"| {x['system']} | {x['workers']} | {x['runs_per_s']:,.0f} | {x['drain_s']:.2f} | "
                     f"{w['scaling_vs_1_worker'].get(name, float('nan')):.2f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} |")
    base = w.get("base")
    if base:  # target 8a's baseline, measured in the same rounds (bench_workers.base_contender)
        lines.append(f"| flowctl before issue 17 ({base['commit']}) | 1 | {base['runs_per_s']:,.0f} | "
                     f"{w['runs'] / base['runs_per_s']:.2f} | | | |")
    elif w.get("base_unavailable"):
        lines += ["", f"The code before issue 17 could not be measured beside this one: {w['base_unavailable']}"]
    ratio = w.get("flowctl_over_dbos_runs_per_s", {})
    if ratio:
        lines += ["", "flowctl runs/s over DBOS's, same workers: "
                  + ", ".join(f"{k} worker{'s' if int(k) > 1 else ''} {v:.2f}x" for k, v in ratio.items()) + "."]
    lines += ["", *[f"- {n}" for n in w.get("notes", [])]]
    return lines


def _render_map(m: dict) -> list:
    lines = ["", "## 7. Map fan-out", "",
             f"A `map` state over N items, each item a child run of a one-task flow (the trivial tool), then `done`. "
             f"In memory: {m['items']:,} items at `max_concurrency` 1, 8 and 32, {m['trials']} trials interleaved with "
             f"the in-memory step ({m['loop_transitions']:,}-transition loop) to show what a child costs in steps; "
             f"{_load(m)}.", "",
             "| max_concurrency | ms per item | min–max ms | items / s | child cost in steps |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for c, x in m["results"].items():
        lo, hi = x["min_s"] / m["items"] * 1e3, x["max_s"] / m["items"] * 1e3
        lines.append(f"| {c} | {x['us_per_child'] / 1e3:.3f} | {lo:.3f}–{hi:.3f} | "
                     f"{x['items_per_s']:,.0f} | {x['child_cost_in_steps']:.1f} |")
    lines += ["", f"On SQLite, `max_concurrency` {m.get('sqlite_concurrency', 8)}, a fresh store and a child process per "
              "size, each stopped after its time box:", "",
              "| items | ms per item | min–max ms | seconds |", "| ---: | ---: | ---: | ---: |"]
    for n, x in m.get("sqlite", {}).items():
        if x["ms_per_item"] is None:
            lines.append(f"| {int(n):,} | > {x['more_than_ms']:.1f} | – | > {x['timed_out_after_s']:g} (time box) |")
        else:
            lo, hi = x["spread_ms_per_item"]
            lines.append(f"| {int(n):,} | {x['ms_per_item']:.2f} | {lo:.2f}–{hi:.2f} | {x['median_s']:.1f} |")
    return lines + ["", "Targets:", *_targets(m)]


def _mb(x) -> str:
    return "–" if x is None else f"{x:,.0f}"


def _secs(m: dict) -> str:
    return f"> {m['timed_out_after_s']:g} (time box)" if m.get("seconds") is None else f"{m['seconds']:.2f}"


def _render_scaling(s: dict) -> list:
    ss = s["store_size"]
    sizes = sorted((k for k in ss if k.isdigit()), key=int)
    names = list(ss[sizes[0]]["ms"])
    lines = ["", "## 8. Scaling", "", f"{_load(s)}; {s['trials']} interleaved trials per latency.", "",
             "### Store size", "",
             "A SQLite store filled with N runs: ten real 3-step runs, copied (run row, events, every table keyed by "
             "`run_id`) under new ids one second apart, one in ten marked failed. In process on an open store: "
             "`list_runs` as `flowctl runs` calls it (50 newest top-level runs), with `status='failed'`, `get_run` of "
             "a unique 14-character id prefix, and `stats` (`flowctl.cli.commands.stats.compute`, latest 1,000 runs). "
             "Milliseconds, median (min–max).", "",
             "| runs in store | " + " | ".join(f"`{n}`" for n in names) + " | fill s |",
             "| ---: | " + " | ".join("---:" for _ in names) + " | ---: |"]
    for n in sizes:
        row = ss[n]["ms"]
        lines.append(f"| {int(n):,} | " + " | ".join(
            f"{row[k]['median_ms']:.1f} ({row[k]['min_s'] * 1e3:.1f}–{row[k]['max_s'] * 1e3:.1f})" for k in names)
            + f" | {ss[n]['fill_s']:.1f} |")
    ps = s["paused_start"]
    lines += ["", f"Starting a run (`flowctl run loop`, in process through click's test runner, store given by `--db`) "
              f"with {ps['paused']:,} paused runs (copies of one real run paused at a review with a 1-day deadline) "
              "and with none:", "", "| store | ms | min–max ms |", "| --- | ---: | ---: |"]
    lines += [f"| {k} | {v['median_s'] * 1e3:.1f} | {_spread(v, 1, 1e3)} |" for k, v in ps["results"].items()]
    gate = ss["gate"]
    lines += ["", f"Gate log `{gate['table']}` indexes: "
              + ("; ".join(f"`{k}` ({', '.join(v)})" for k, v in gate["indexes"].items()) or "none") + "."]
    lines += ["", "### Run length", "",
              "One run of the loop flow with N steps on SQLite, then `flowctl trace RUN` and `flowctl audit verify RUN` "
              f"as child processes (output discarded), wall seconds and peak RSS (of the command alone: a small launcher process runs it and reads `RUSAGE_CHILDREN`), time box {s['box_s']:g} s.", "",
              "| steps | run µs/step | trace s | trace peak MB | verify s | verify peak MB |",
              "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, x in s["run_length"].items():
        tr, vf = x["trace"], x["audit verify"]
        lines.append(f"| {x['steps']:,} | {x['us_per_step']:.0f} | {_secs(tr)} | {_mb(tr['peak_rss_mb'])} | "
                     f"{_secs(vf)} | {_mb(vf['peak_rss_mb'])} |")
    pj = s["project_size"]
    lines += ["", "### Project size", "",
              f"A generated project of {pj['states']:,} states ({pj['flows']:,} flows of 10 task states), a SQLite store "
              "holding its earlier runs; child processes, median (min–max).", "",
              "| command | seconds | min–max s | peak MB |", "| --- | ---: | ---: | ---: |"]
    for k, x in pj["results"].items():
        if x.get("median_s") is None:
            lines.append(f"| `{k}` | > {x['timed_out_after_s']:g} (time box) | – | {_mb(x['peak_rss_mb'])} |")
        else:
            lines.append(f"| `{k}` | {x['median_s']:.2f} | {x['min_s']:.2f}–{x['max_s']:.2f} | {_mb(x['peak_rss_mb'])} |")
    return lines + ["", "Targets:", *_targets(s)]


def _render_pgcapacity(c: dict) -> list:
    lines = ["", "## 9. PostgreSQL capacity per step", ""]
    if "skipped" in c:
        return lines + [f"Skipped: {c['skipped']}"]
    us, cores = c["us_per_step"], c["cores_per_1000_steps_per_s"]
    return lines + [
        f"One run of {c['transitions']:,} steps of the loop flow through `open_store(postgresql://…)` on a fresh "
        f"database, one run at a time, median of {c['trials']} trials; {_load(c)}. Server CPU: user + system time of "
        "the backends serving the database (`/proc/<pid>/stat`; the WAL writer and checkpointer are not included); "
        "client CPU: the flowctl process. Used by `docs/scaling.md`.", "",
        "| per step | wall µs | server CPU µs | client CPU µs | commits |", "| --- | ---: | ---: | ---: | ---: |",
        f"| flowctl step | {us['wall']:.0f} | {us['server_cpu']:.0f} | {us['client_cpu']:.0f} | {c['commits_per_step']:.2f} |",
        "", f"Cores per 1,000 steps/s: server {cores['server']:.2f}, client {cores['client']:.2f}."]


def _render_regression(d: dict) -> list:
    """The step with the engine before the redesign (issue 16) and with this one, same run."""
    lines = ["", "## The engine before and after the redesign (issue 16)", "",
             f"The loop of section 1, run by the code of `{d['base']}` (the last commit before the engine redesign, "
             "extracted with `git archive`) and by this checkout, each trial in a fresh interpreter, the two "
             f"interleaved, {d['trials']} trials; {_load(d)}. Each child times only its run (the in-memory run "
             "including the audit hash chain).", "",
             "| store | steps per run | before µs / step | min–max | now µs / step | min–max | now / before |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for kind, label in (("memory", "in memory"), ("sqlite", "SQLite")):
        res, n = d["results"][kind], d["transitions"][kind]
        lines.append(f"| {label} | {n:,} | {_us(res['base']['us_per_op'])} | {_spread(res['base'], n)} | "
                     f"{_us(res['head']['us_per_op'])} | {_spread(res['head'], n)} | "
                     f"{_ratio(d['ratio_head_to_base'][kind])} |")
    return lines + ["", "Targets (issue 16, \"no slower than before\"):", *_targets(d)]


def _render_model(m: dict) -> list:
    """The model-step part (issue 18): flowctl's llm state against the direct SDK call."""
    fast = m["instant_server"]
    lines = ["", "## Model step overhead (issue 18)", "",
             f"One `llm` state (prompt rendered in the Jinja2 sandbox, the request through the official openai SDK, "
             "the reply's JSON read and checked against its output_schema, the `model_called` record, the durable "
             "step on SQLite) against the same SDK call made directly, both to the local Chat Completions server of "
             f"the tests (tests/support/modelserver.py); {m['trials']} interleaved trials with the server answering "
             f"after {m['delay_ms']:.0f} ms, {m['zero_trials']} with it answering at once; {_load(m)}.", "",
             "| server answers after | direct SDK call ms | flowctl llm run ms | overhead ms | overhead / call |",
             "| ---: | ---: | ---: | ---: | ---: |",
             f"| {m['delay_ms']:.0f} ms | {m['direct_sdk_ms']:.1f} | {m['flowctl_llm_run_ms']:.1f} | "
             f"{m['overhead_ms']:.2f} | {m['overhead_fraction_of_call']:.2%} |",
             f"| at once | {fast['direct_sdk_ms']:.2f} | {fast['flowctl_llm_run_ms']:.2f} | {fast['overhead_ms']:.2f} | – |"]
    return lines + ["", "Targets (issue 18):", *_targets(m)]
