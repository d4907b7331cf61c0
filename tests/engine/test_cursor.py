"""The typed cursor reads every stored checkpoint and writes the same JSON back."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowctl.engine.cursor import ALWAYS, WHEN_SET, Cursor

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoints"


def _stored_checkpoints():
    for path in sorted(DATA.glob("*.json")):
        for row in json.loads(path.read_text())["tables"]["flowctl_runs"]:
            if row["cursor"].startswith("{"):  # the sensitive run's is sealed (read back in test_checkpoints)
                yield pytest.param(row["cursor"], id=f"{path.stem}-{row['id'][-6:]}")


def _encode(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("text", list(_stored_checkpoints()))
def test_a_stored_checkpoint_is_written_back_as_the_same_json(text):
    data = json.loads(text)
    cursor = Cursor.from_json(data)
    assert _encode(cursor.to_json()) == text
    assert (cursor.state, cursor.step, cursor.path) == (data["state"], data["step"], data["path"])


def test_keys_it_does_not_know_are_kept_and_missing_ones_take_defaults():
    cursor = Cursor.from_json({"state": "a", "step": 3, "from_the_future": {"x": 1}})
    assert (cursor.depth, cursor.fanout, cursor.attempt, cursor.saga) == (0, None, 1, [])
    out = cursor.to_json()
    assert out["from_the_future"] == {"x": 1} and list(out)[:len(ALWAYS)] == list(ALWAYS)
    assert not set(WHEN_SET) & set(out)


def test_optional_keys_are_written_once_set_in_a_fixed_order():
    cursor = Cursor(state="a")
    cursor.cancelling = {"by": "ann", "compensate": True}
    cursor.path_dropped = 4
    assert list(cursor.to_json())[len(ALWAYS):] == ["path_dropped", "cancelling"]


def test_a_new_run_writes_every_always_key_and_nothing_else(tmp_path):
    from support.enginekit import Harness, build, contract, task

    root = build(tmp_path, {**contract("t", "t"), **task("a", "t@1.0.0"),
                            "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: done}\n"},
                 "def t(input, call):\n    return {}\n")
    h = Harness(root)
    result = h.run()
    stored = h.store.get_run(result.run_id)["cursor"]
    assert list(stored) == list(ALWAYS)
    assert stored["path"] == ["a", "done"] and stored["done"] is True
