"""Capture checkpoints as the engine of the day writes them, and the outcome of resuming each.

Run from the repository root (``.venv/bin/python tests/data/checkpoints/capture.py``): for each
scenario it builds a small project, drives a run on a SQLite store with a fake clock until it
pauses, dumps the store's rows *as stored* (runs, events, steps, definitions: the checkpoint JSON
text untouched) to ``<scenario>.json``, then resumes the run to completion the way a user would
and records the outcome. ``test_checkpoints.py`` loads each file into a fresh store and resumes it
with the engine of its day, expecting the same outcome: a run paused before an engine change
resumes after it.

The JSON holds ``files`` (the project), ``key`` (the store's test-only key file, for the sealed
sensitive run), ``tables`` (``{table: [row]}``), ``clock`` (fake time at the pause), ``action``
(how it is resumed: ``{kind: review|advance_resume|advance_recover, ...}``) and ``outcome``.
"""
from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLES = ("flowctl_definitions", "flowctl_runs", "flowctl_events", "flowctl_steps")

TOOLS = """
def ok(input, call):
    return {"ok": True, "n": input.get("n")}

def flaky(input, call):
    if call.attempt == 1:
        raise ConnectionError("the first call fails")
    return {"ok": True, "attempt": call.attempt}

def card(input, call):
    return {"ok": True, "last4": input["card_number"][-4:]}
"""

BASE = {
    "contracts/ok.v1.0.0.yaml": "id: ok\nversion: 1.0.0\nentrypoint: tk:ok\n",
    "contracts/flaky.v1.0.0.yaml": "id: flaky\nversion: 1.0.0\nentrypoint: tk:flaky\n",
    "contracts/card.v1.0.0.yaml": "id: card\nversion: 1.0.0\nentrypoint: tk:card\nsensitive: [card_number]\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/rejected.yaml": "id: rejected\ntype: fail\nerror: Rejected\ncause: the reviewer said no\n",
    "states/a.yaml": "id: a\ntype: task\ntool: ok@^1\ninput: {n: input.n}\n",
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\nshow: {n: input.n}\ntimeout: 2d\n",
    "tools/tk.py": TOOLS,
}

SCENARIOS = {
    "review": {
        "files": {"transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: ask, set: {out: response}}\n"
                                        "  - {from: ask, to: done, when: \"review.decision == 'approve'\"}\n"
                                        "  - {from: ask, to: rejected}\noutput: {out: context.out, by: review.by}\n"},
        "input": {"n": 7},
        "action": {"kind": "review", "decision": "approve", "by": "ann"},
    },
    "wait": {
        "files": {"states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
                  "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: w, set: {out: response}}\n"
                                        "  - {from: w, to: done}\noutput: context.out\n"},
        "input": {"n": 1},
        "action": {"kind": "advance_resume", "seconds": 3600},
    },
    "retry": {
        "files": {"states/t.yaml": "id: t\ntype: task\ntool: flaky@^1\n"
                                   "retry: [{errors: [ConnectionError], max_attempts: 3, interval: 1h}]\n",
                  "transitions/f.yaml": "flow: f\nstart: t\ntransitions:\n  - {from: t, to: done, set: {out: response}}\n"
                                        "output: context.out\n"},
        "input": {},
        "action": {"kind": "advance_resume", "seconds": 3600},
    },
    "parallel": {
        "files": {"states/fan.yaml": "id: fan\ntype: parallel\nbranches: [asking, quick]\ninput: {n: input.n}\n",
                  "transitions/asking.yaml": "flow: asking\nstart: ask\ntransitions:\n  - {from: ask, to: done}\n"
                                             "output: {decision: review.decision}\n",
                  "transitions/quick.yaml": "flow: quick\nstart: a\ntransitions:\n  - {from: a, to: done, set: {o: response}}\n"
                                            "output: context.o\n",
                  "transitions/f.yaml": "flow: f\nstart: fan\ntransitions:\n  - {from: fan, to: done, set: {out: response}}\n"
                                        "output: context.out\n"},
        "input": {"n": 3},
        "action": {"kind": "child_review", "decision": "approve", "by": "bo"},
    },
    "map": {
        "files": {"states/pick.yaml": "id: pick\ntype: choice\n",
                  "states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
                  "states/fan.yaml": "id: fan\ntype: map\nitems: input.items\nflow: item\nmax_concurrency: 1\n"
                                     "item_input: {n: item}\n",
                  "transitions/item.yaml": "flow: item\nstart: pick\ntransitions:\n"
                                           "  - {from: pick, to: w, when: 'input.n == `1`'}\n  - {from: pick, to: a}\n"
                                           "  - {from: w, to: a}\n  - {from: a, to: done, set: {o: response}}\n"
                                           "output: context.o\n",
                  "transitions/f.yaml": "flow: f\nstart: fan\ntransitions:\n  - {from: fan, to: done, set: {out: response}}\n"
                                        "output: context.out\n"},
        "input": {"items": [0, 1, 2]},
        "action": {"kind": "advance_recover", "seconds": 3600},
    },
    "sensitive": {
        "files": {"states/c.yaml": "id: c\ntype: task\ntool: card@^1\ninput: {card_number: input.card}\n",
                  "transitions/f.yaml": "flow: f\nstart: c\ntransitions:\n  - {from: c, to: ask, set: {out: response}}\n"
                                        "  - {from: ask, to: done}\noutput: context.out\n"},
        "input": {"card": "4111111111111111", "n": 2},
        "action": {"kind": "review", "decision": "approve", "by": "cy"},
    },
}


def write(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        target = root / "orchestration" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def dump_tables(db: Path) -> dict:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return {t: [dict(r) for r in conn.execute(f"SELECT * FROM {t}")] for t in TABLES}
    finally:
        conn.close()


def load_tables(db: Path, tables: dict) -> None:
    """Insert the dumped rows as they were stored (the store's schema must exist already)."""
    conn = sqlite3.connect(db)
    try:
        for table in TABLES:
            for row in tables.get(table, ()):
                cols = ", ".join(row)
                marks = ", ".join("?" for _ in row)
                conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(row.values()))
        conn.commit()
    finally:
        conn.close()


def act(engine, clock, store, run_id: str, action: dict, token: str | None):
    """Resume the paused run as ``action`` says; return the top run's row once it ended."""
    kind = action["kind"]
    if kind == "review":
        engine.resume(run_id, token=token, decision=action["decision"], by=action["by"])
    elif kind == "child_review":
        child_id, child_token = token.split(" ")
        engine.resume(child_id, token=child_token, decision=action["decision"], by=action["by"])
    elif kind == "advance_resume":
        clock.advance(action["seconds"])
        engine.resume(run_id)
    elif kind == "advance_recover":
        clock.advance(action["seconds"])
        engine.recover()
    return store.get_run(run_id)


def outcome(store, row) -> dict:
    """What a user sees of a finished run: status, output, error, path, steps, its event types, and
    each child run's flow, status and output (by branch/item order)."""
    children = sorted(store.list_runs(parent_id=row["id"], limit=0),
                      key=lambda r: (r["cursor"].get("parent") or {}).get("index", 0))
    return {"status": row["status"], "output": row["output"], "error": row["error"],
            "path": row["cursor"]["path"], "steps": row["steps"],
            "events": [e["type"] for e in store.events(row["id"])],
            "children": [{"flow": c["flow"], "status": c["status"], "output": c["output"]} for c in children]}


def capture(name: str, spec: dict, work: Path) -> dict:
    import flowctl
    from flowctl.engine.clock import FakeClock
    from flowctl.store.sql import open_store

    files = {**BASE, **spec["files"]}
    root = write(work / name, files)
    db = work / f"{name}.db"
    store = open_store(f"sqlite:///{db}")
    clock = FakeClock()
    engine = flowctl.Engine(flowctl.load_project(root), store, clock=clock)
    result = engine.run("f", spec["input"], run_id=f"cp-{name}")
    token = (result.review or {}).get("token")
    if spec["action"]["kind"] == "child_review":
        child = next(c for c in result.children if c["review"])
        token = f"{child['run_id']} {child['review']['token']}"
    paused = {"status": result.status, "tables": dump_tables(db), "clock": clock.time()}
    key = Path(str(db) + ".key")
    row = act(engine, clock, store, result.run_id, spec["action"], token)
    store.close()
    return {"scenario": name, "files": files, "key": key.read_text() if key.exists() else None,
            "run_id": result.run_id, "paused_status": paused["status"], "clock": paused["clock"],
            "token": token, "action": spec["action"], "tables": paused["tables"], "outcome": outcome(store, row)}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in SCENARIOS.items():
            data = capture(name, spec, Path(tmp))
            (HERE / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            print(name, data["paused_status"], "->", data["outcome"]["status"])


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[2] / "runtime"))
    main()
