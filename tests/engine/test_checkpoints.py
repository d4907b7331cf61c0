"""Runs paused by an earlier engine resume with this one: each checkpoint in tests/data/checkpoints
(written by ``capture.py`` with the engine of its day, stored rows untouched) is loaded into a
fresh SQLite store and resumed the way a user would; the run must end exactly as it did then."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import flowctl
from flowctl.engine.clock import FakeClock
from flowctl.store.sql import open_store

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoints"
sys.path.insert(0, str(DATA))
import capture  # noqa: E402

CASES = sorted(p.stem for p in DATA.glob("*.json"))


def test_every_kind_of_pause_was_captured():
    assert set(CASES) == {"review", "wait", "retry", "parallel", "map", "sensitive"}


@pytest.mark.parametrize("name", CASES)
def test_checkpoint_of_the_previous_engine_resumes_to_the_same_outcome(tmp_path, name):
    data = json.loads((DATA / f"{name}.json").read_text())
    root = capture.write(tmp_path / "p", data["files"])
    db = tmp_path / "flowctl.db"
    if data["key"]:
        key = Path(str(db) + ".key")
        key.write_text(data["key"])
        os.chmod(key, 0o600)
    store = open_store(f"sqlite:///{db}")
    capture.load_tables(db, data["tables"])
    assert store.get_run(data["run_id"])["status"] == data["paused_status"]
    clock = FakeClock(data["clock"])
    engine = flowctl.Engine(flowctl.load_project(root), store, clock=clock)
    row = capture.act(engine, clock, store, data["run_id"], data["action"], data["token"])
    assert capture.outcome(store, row) == data["outcome"]
    store.close()
