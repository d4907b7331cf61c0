"""The stored record of a run does not change when the step's code does: the same runs give the
same audit events (type, state, attempt, data text and hash chain) and the same checkpoint as the
engine of main before the lean step (issue 17, target 1), in memory and on SQLite.

The golden record (``tests/data/step_golden.json``) was written by main's engine
(commit 8139fe0) with ``FLOWCTL_WRITE_GOLDEN=1``; every value that depends on the machine (the
clock, tool durations, the owner, the run id) is fixed here, so the hashes are reproducible.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

import flowctl
from flowctl.engine.clock import FakeClock
from flowctl.store.sql import MemoryStore, open_store
from support.enginekit import allow_all, build, contract, effect_contract, task
from support.engineflows import LAYERED, SAGA, TOOLS, flow, saga_states

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from loop_flow import make_project  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "step_golden.json"

NESTED_TOOLS = TOOLS + '''
def nested(input, call):
    return {"items": [{"n": input["n"], "tags": ["a", "b"]}], "total": 1.5, "name": "caf\\u00e9"}

def as_text(input, call):
    return '{"n": 2, "ok": true}'

def card(input, call):
    return {"card_number": input["card_number"], "status": "ok"}
'''


def _projects(tmp_path, store_kind) -> dict:
    """``{name: (root, flow, input)}``: the runs whose record is pinned."""
    out = {"loop": (make_project(tmp_path / "loop", 30), "loop", {})}
    files = {**SAGA, **saga_states(2), **task("b1", "boom@1.0.0", extra="on_error:\n  - {errors: ['*'], goto: failed}\n"),
             **flow("p1", "  - {from: p1, to: p2}\n  - {from: p2, to: b1}\n  - {from: b1, to: done}\n")}
    out["saga"] = (build(tmp_path, files, TOOLS, name="saga"), "f", {})
    files = {**contract("flaky", "flaky"), **LAYERED,
             **task("r", "flaky@1.0.0", extra="input: {succeed_on: '`3`'}\nretry:\n  - {errors: ['*'], max_attempts: 3, interval: 500ms}\n"),
             **task("d", "declined@1.0.0", extra="on_error:\n  - {errors: [Payments.CardDeclined], goto: recover_state}\n"),
             **flow("r", "  - {from: r, to: d, when: \"response.status == 'success'\", set: {seen: response.status}}\n"
                         "  - {from: d, to: done}\n  - {from: recover_state, to: failed, when: 'context.seen == `null`'}\n"
                         "  - {from: recover_state, to: done}\n")}
    out["retry_errors"] = (build(tmp_path, files, TOOLS, name="retry"), "f", {})
    files = {**contract("nested", "nested", extra="output_schema: {type: object, required: [items]}\n"),
             **contract("as_text", "as_text"),
             **task("x", "nested@1.0.0", extra="input: {n: input.n, deep: {list: [input.n, \"'two'\"]}}\n"),
             **task("t", "as_text@1.0.0", extra="input: {prev: 'response.items[0].n'}\n"),
             **flow("x", "  - {from: x, to: t, set: {total: response.total, deep.name: response.name}}\n"
                         "  - {from: t, to: done, when: 'response.ok'}\n")}
    out["nested"] = (build(tmp_path, files, NESTED_TOOLS, name="nested"), "f", {"n": 7})
    if store_kind == "memory":  # a keyed store (SQLite) redacts with a key of its own: not reproducible
        files = {**contract("card", "card", extra="sensitive: [card_number]\n"),
                 **task("c", "card@1.0.0", extra="input: {card_number: input.card}\n"),
                 **flow("c", "  - {from: c, to: done}\n")}
        out["sensitive"] = (build(tmp_path, files, NESTED_TOOLS, name="card"), "f", {"card": "4111111111111111"})
    files = {**effect_contract("pay", "pay"), **allow_all("pay"),
             **task("p", "pay@1.0.0", extra="input: {id: input.id}\n"), **flow("p", "  - {from: p, to: done}\n")}
    out["effect"] = (build(tmp_path, files, TOOLS, name="effect"), "f", {"id": "A-1"})
    return out


def _record(store, run_id) -> dict:
    row = store.get_run(run_id, exact=True)
    events = [[e["seq"], e["ts"], e["type"], e.get("state"), e.get("attempt"), e["hash"]] for e in store.events(run_id)]
    return {"status": row["status"], "steps": row["steps"], "last_seq": row["last_seq"], "last_hash": row["last_hash"],
            "cursor": json.dumps(row["cursor"], sort_keys=True), "events": events}


def _runs(tmp_path, monkeypatch, store_kind) -> dict:
    monkeypatch.setattr(time, "perf_counter", lambda: 12.5)  # every tool takes 0 ms
    out = {}
    for name, (root, flow_id, run_input) in _projects(tmp_path, store_kind).items():
        project = flowctl.load_project(root)
        store = MemoryStore() if store_kind == "memory" else open_store(f"sqlite:///{tmp_path}/{name}.db")
        engine = flowctl.Engine(project, store, clock=FakeClock(), owner="host:1:1", max_inline_wait=10.0,
                                check=False)
        result = engine.run(flow_id, run_input, run_id=f"run-{name}")
        out[name] = _record(store, result.run_id)
        store.close()
    return out


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_a_run_records_the_same_events_and_checkpoint_as_before(tmp_path, monkeypatch, store_kind):
    got = _runs(tmp_path, monkeypatch, store_kind)
    if os.environ.get("FLOWCTL_WRITE_GOLDEN"):
        golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        golden[store_kind] = got
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())[store_kind]
    assert set(got) == set(golden)
    for name in golden:
        if store_kind == "sqlite":
            # Since schema 7 a commit's events are one packed row under one hash (store.audit.seal_commit):
            # every event is the same as main's engine wrote, its hash is now its commit's.
            for record in (got[name], golden[name]):
                record["events"] = [e[:5] for e in record["events"]]
                record.pop("last_hash")
        assert got[name]["events"] == golden[name]["events"], name
        assert got[name] == golden[name], name


def test_sqlite_stores_the_same_event_data_as_memory(tmp_path, monkeypatch):
    from flowctl.store.audit import verify_run

    runs = {}
    for kind in ("memory", "sqlite"):
        monkeypatch.setattr(time, "perf_counter", lambda: 12.5)
        runs[kind] = {}
        (tmp_path / kind).mkdir()
        for name, (root, flow_id, run_input) in _projects(tmp_path / kind, kind).items():
            project = flowctl.load_project(root)
            store = MemoryStore() if kind == "memory" else open_store(f"sqlite:///{tmp_path}/{kind}-{name}.db")
            engine = flowctl.Engine(project, store, clock=FakeClock(), owner="host:1:1", max_inline_wait=10.0,
                                    check=False)
            result = engine.run(flow_id, run_input, run_id=f"run-{name}")
            events = store.events(result.run_id)
            assert verify_run(store.get_run(result.run_id, exact=True), events) == [], (kind, name)
            runs[kind][name] = [(e["seq"], e["ts"], e["type"], e.get("state"), e.get("attempt"), e["data"])
                                for e in events]
            store.close()
    shared = set(runs["memory"]) & set(runs["sqlite"])  # (the sensitive run is memory-only: its key is random)
    assert len(shared) >= 5
    assert {n: runs["memory"][n] for n in shared} == {n: runs["sqlite"][n] for n in shared}
