"""The store and the audit log: round trips, size limits, the hash chain, schema versions."""
from __future__ import annotations

import sqlite3

import pytest

from support.enginekit import Harness, allow_all, build, contract, effect_contract, sqlite_store, task
from flowctl.store.audit import verify_chain
from flowctl.errors import StoreError, UsageError
from flowctl.store.sql import SCHEMA_VERSION, open_store
from support.pg import pg_url  # noqa: F401 - fixture

TOOLS = """
LEDGER = []

def echo(input, call):
    return {"echo": input, "card_number": "4111111111111111"}

def big(input, call):
    return {"blob": "x" * (2 << 20)}

def pay(input, call):
    LEDGER.append(("pay", input["id"]))
    return {"ok": True}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    LEDGER.append(("undo", input["id"]))
"""

UNICODE_FLOW = {
    **contract("echo", "echo", extra="sensitive: [card_number]\n"),
    **task("prüfen_🚚", "echo@1.0.0", extra="input: {name: input.name}\n"),
    "transitions/f.yaml": "flow: f\nstart: prüfen_🚚\ntransitions:\n  - {from: prüfen_🚚, to: done, set: {echo: response.echo}}\n",
}


def _roundtrip(store, tmp_path):
    root = build(tmp_path, UNICODE_FLOW, TOOLS)
    h = Harness(root, store=store)
    result = h.run(input={"name": "Zoë 日本 🚚"})
    assert result.status == "succeeded"
    assert result.path == ["prüfen_🚚", "done"]
    row = store.get_run(result.run_id)
    assert row["output"] == {"echo": {"name": "Zoë 日本 🚚"}}
    events = store.events(result.run_id)
    assert [e["state"] for e in events if e["type"] == "state_entered"] == ["prüfen_🚚", "done"]
    assert verify_chain(events, row["last_seq"], row["last_hash"]) == []
    succeeded = next(e for e in events if e["type"] == "tool_succeeded")
    assert succeeded["data"]["output"]["card_number"] == "***redacted***"  # sensitive fields never stored
    assert "4111111111111111" not in str(events)  # (not "4111": a timestamp or a hash may hold those digits)
    return store


def test_unicode_state_names_and_payloads_round_trip_sqlite(tmp_path):
    _roundtrip(sqlite_store(tmp_path), tmp_path)


@pytest.mark.postgres
def test_unicode_state_names_and_payloads_round_trip_postgresql(tmp_path, pg_url):  # noqa: F811
    _roundtrip(open_store(pg_url), tmp_path)


def test_oversized_payloads_are_refused_clearly(tmp_path):
    root = build(tmp_path, {**contract("big", "big"), **task("a", "big@1.0.0"),
                            "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: done}\n"}, TOOLS)
    h = Harness(root, store=sqlite_store(tmp_path))
    with pytest.raises(UsageError, match="run input is .* bytes; the limit is"):
        h.run(input={"blob": "y" * (2 << 20)})
    result = h.run()
    assert result.status == "failed" and result.error["code"] == "PAYLOAD_TOO_LARGE"
    assert "at most" in result.error["message"]


def test_audit_verify_detects_edits_deletions_and_truncation(tmp_path):
    store = sqlite_store(tmp_path)
    root = build(tmp_path, UNICODE_FLOW, TOOLS)
    run_id = Harness(root, store=store).run(input={"name": "x"}).run_id
    db = sqlite3.connect(tmp_path / "flowctl.db")

    def problems():
        row = store.get_run(run_id)
        return verify_chain(store.events(run_id), row["last_seq"], row["last_hash"])

    assert problems() == []
    db.execute("UPDATE flowctl_events SET data = replace(data, 'x', 'y') WHERE run_id = ? AND seq = 1", (run_id,))
    db.commit()
    assert any("event 1" in p and "modified" in p for p in problems())
    db.execute("UPDATE flowctl_events SET data = replace(data, 'y', 'x') WHERE run_id = ? AND seq = 1", (run_id,))
    # the row holding event 3: a commit's events are one packed row, keyed by the seq of its last event
    held = db.execute("SELECT min(seq) FROM flowctl_events WHERE run_id = ? AND seq >= 3", (run_id,)).fetchone()[0]
    db.execute("DELETE FROM flowctl_events WHERE run_id = ? AND seq = ?", (run_id, held))
    db.commit()
    assert any("is missing (next stored is" in p for p in problems())
    last = db.execute("SELECT max(seq) FROM flowctl_events WHERE run_id = ?", (run_id,)).fetchone()[0]
    db.execute("DELETE FROM flowctl_events WHERE run_id = ? AND seq = ?", (run_id, last))
    db.commit()
    assert any("events deleted or added" in p for p in problems())


def test_a_newer_store_schema_is_refused(tmp_path):
    store = sqlite_store(tmp_path)
    store.close()
    db = sqlite3.connect(tmp_path / "flowctl.db")
    db.execute("UPDATE flowctl_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    with pytest.raises(StoreError, match="newer flowctl"):
        sqlite_store(tmp_path)


def test_unreachable_database_is_a_clear_store_error():
    with pytest.raises(StoreError, match="cannot open store"):
        open_store("postgresql://nobody@127.0.0.1:1/none")


def test_a_second_writer_with_a_stale_checkpoint_writes_nothing(tmp_path):
    store = sqlite_store(tmp_path)
    root = build(tmp_path, {"states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
                            "transitions/f.yaml": "flow: f\nstart: w\ntransitions:\n  - {from: w, to: done}\n"}, TOOLS)
    run = Harness(root, store=store).run()
    row = store.get_run(run.run_id)
    with pytest.raises(StoreError, match="advanced by another process"):
        store.commit(run.run_id, row["last_seq"] - 1, {"status": "failed"}, [])
    assert store.get_run(run.run_id)["status"] == "waiting"


def test_cancel_compensates_a_paused_run_newest_first(tmp_path):
    root = build(tmp_path, {
        **effect_contract("pay", "pay"), **allow_all("pay"),
        **task("p1", "pay@1.0.0", extra="input: {id: \"'1'\"}\n"),
        **task("p2", "pay@1.0.0", extra="input: {id: \"'2'\"}\n"),
        "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
        "transitions/f.yaml": "flow: f\nstart: p1\ntransitions:\n  - {from: p1, to: p2}\n  - {from: p2, to: ask}\n  - {from: ask, to: done}\n",
    }, TOOLS)
    h = Harness(root, store=sqlite_store(tmp_path))
    paused = h.run()
    assert paused.status == "paused"
    cancelled = h.engine.cancel(paused.run_id, by="ops")
    assert cancelled.status == "cancelled" and cancelled.exit_code == 1
    assert h.ledger() == [("pay", "1"), ("pay", "2"), ("undo", "2"), ("undo", "1")]
    with pytest.raises(UsageError, match=r"already ended \(cancelled\)"):
        h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")


def test_sensitive_fields_are_redacted_in_every_event(tmp_path):
    files = dict(UNICODE_FLOW)
    files["contracts/echo.v1.0.0.yaml"] = "id: echo\nversion: 1.0.0\nentrypoint: tk:echo\nsensitive: [card_number, name, to]\n"
    root = build(tmp_path, files, TOOLS)
    h = Harness(root, store=sqlite_store(tmp_path))
    result = h.run(input={"name": "Zoë Secret"})
    assert result.output == {"echo": {"name": "Zoë Secret"}}  # the run itself sees real values
    events = h.store.events(result.run_id)
    assert "Zoë Secret" not in str(events)  # the audit log never does
    # engine fields named like a sensitive field ("to", the next state) stay readable
    taken = [e for e in events if e["type"] == "transition_taken"]
    assert taken and taken[0]["data"]["to"] == "done"
    # the log's redacted run input still vouches for the row's real one
    from flowctl.store.audit import verify_run

    assert verify_run(h.store.get_run(result.run_id), events) == []
    row = h.store.get_run(result.run_id)
    row["input"] = {"name": "Someone Else"}
    assert verify_run(row, events) == []  # a redacted value cannot be compared, but its shape can
    row["input"] = {"name": "x", "extra": 1}
    assert any("input differs" in p for p in verify_run(row, events))


def test_read_only_commands_never_create_a_store(tmp_path):
    with pytest.raises(StoreError, match="no run store"):
        open_store(f"sqlite:///{tmp_path}/missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(StoreError, match="unsupported store address"):
        open_store("garbage")
    with pytest.raises(StoreError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path}/no/such/folder/x.db")


# ------------------------------------------------------------------ packed rows (store schema 7)
PACKED_TOOLS = """
def bump(input, call):
    return {"n": (input.get("n") or 0) + 1, "note": "é\\n\\"q\\""}
"""

PACKED_FLOW = {
    **contract("bump", "bump"),
    **task("a", "bump@1.0.0", extra="input: {n: context.n}\n"), **task("b", "bump@1.0.0", extra="input: {n: context.n}\n"),
    "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n"
                          "  - {from: a, to: b, set: {n: response.n}}\n"
                          "  - {from: b, to: a, when: 'visits.b < `3`', set: {n: response.n}}\n"
                          "  - {from: b, to: done}\n",
}


def _packed_run(tmp_path, store):
    h = Harness(build(tmp_path, PACKED_FLOW, PACKED_TOOLS), store=store)
    result = h.run(run_id="packed-1")
    assert result.status == "succeeded"
    return h, result.run_id


def _problems(store, run_id):
    row = store.get_run(run_id)
    return verify_chain(store.events(run_id), row["last_seq"], row["last_hash"])


def test_a_commit_is_one_packed_row_and_reads_back_as_the_events_the_engine_recorded(tmp_path, monkeypatch):
    import time

    from flowctl.store.sql import MemoryStore

    monkeypatch.setattr(time, "perf_counter", lambda: 12.5)  # every tool takes 0 ms: both records alike
    store = sqlite_store(tmp_path)
    _h, run_id = _packed_run(tmp_path / "sql", store)
    _m, mem_id = _packed_run(tmp_path / "mem", MemoryStore())
    events = store.events(run_id)
    rows = sqlite3.connect(tmp_path / "flowctl.db").execute(
        "SELECT seq, type, n_events FROM flowctl_events WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()
    assert len(rows) < len(events) / 2  # a step's events share one row
    assert {t for _s, t, _n in rows} == {"packed"} and sum(n for _s, _t, n in rows) == len(events)
    assert [s for s, _t, _n in rows] == sorted({e["packed"][1] for e in events})  # keyed by its last event
    # the same record, event for event, as the memory store (one event a row) keeps of the same run
    fields = ("seq", "ts", "type", "state", "attempt", "data", "data_json")
    assert [[e[k] for k in fields] for e in events] == [[e[k] for k in fields] for e in _m.store.events(mem_id)]
    assert _problems(store, run_id) == []
    assert store.get_run(run_id)["last_hash"] == events[-1]["hash"]


def test_every_byte_of_a_packed_row_is_covered_by_its_hash(tmp_path):
    store = sqlite_store(tmp_path)
    _h, run_id = _packed_run(tmp_path, store)
    db = sqlite3.connect(tmp_path / "flowctl.db")
    seq, text = db.execute("SELECT seq, data FROM flowctl_events WHERE run_id = ? AND n_events > 3 ORDER BY seq LIMIT 1",
                           (run_id,)).fetchone()
    for i, ch in enumerate(text):
        edited = text[:i] + ("1" if ch != "1" else "2") + text[i + 1:]
        db.execute("UPDATE flowctl_events SET data = ? WHERE run_id = ? AND seq = ?", (edited, run_id, seq))
        db.commit()
        assert any("was modified (hash differs)" in p for p in _problems(store, run_id)), (i, edited)
    db.execute("UPDATE flowctl_events SET data = ? WHERE run_id = ? AND seq = ?", (text, run_id, seq))
    db.commit()
    assert _problems(store, run_id) == []
    for column, value in (("n_events", 1), ("prev_hash", "0" * 64), ("hash", "0" * 64)):
        (old,) = db.execute(f"SELECT {column} FROM flowctl_events WHERE run_id = ? AND seq = ?", (run_id, seq)).fetchone()
        db.execute(f"UPDATE flowctl_events SET {column} = ? WHERE run_id = ? AND seq = ?", (value, run_id, seq))
        db.commit()
        assert _problems(store, run_id) != [], column
        db.execute(f"UPDATE flowctl_events SET {column} = ? WHERE run_id = ? AND seq = ?", (old, run_id, seq))
        db.commit()
    assert _problems(store, run_id) == []


def test_deleting_or_reordering_packed_rows_is_detected(tmp_path):
    store = sqlite_store(tmp_path)
    _h, run_id = _packed_run(tmp_path, store)
    db = sqlite3.connect(tmp_path / "flowctl.db")
    seqs = [s for (s,) in db.execute("SELECT seq FROM flowctl_events WHERE run_id = ? ORDER BY seq", (run_id,))]
    a, b = seqs[2], seqs[3]
    # reordered: two rows' contents swapped under their keys
    swap = "UPDATE flowctl_events SET data = ?, prev_hash = ?, hash = ?, n_events = ? WHERE run_id = ? AND seq = ?"
    ra = db.execute("SELECT data, prev_hash, hash, n_events FROM flowctl_events WHERE run_id = ? AND seq = ?", (run_id, a)).fetchone()
    rb = db.execute("SELECT data, prev_hash, hash, n_events FROM flowctl_events WHERE run_id = ? AND seq = ?", (run_id, b)).fetchone()
    db.execute(swap, (*rb, run_id, a))
    db.execute(swap, (*ra, run_id, b))
    db.commit()
    assert _problems(store, run_id) != []
    db.execute(swap, (*ra, run_id, a))
    db.execute(swap, (*rb, run_id, b))
    db.commit()
    assert _problems(store, run_id) == []
    # one commit's row deleted in the middle, then the last row
    db.execute("DELETE FROM flowctl_events WHERE run_id = ? AND seq = ?", (run_id, a))
    db.commit()
    found = _problems(store, run_id)
    assert any(f"event {seqs[1] + 1} is missing (next stored is {a + 1})" in p for p in found), found
    assert any("does not follow" in p for p in found), found
    db.execute("DELETE FROM flowctl_events WHERE run_id = ? AND seq = ?", (run_id, seqs[-1]))
    db.commit()
    assert any("events deleted or added" in p for p in _problems(store, run_id))


@pytest.mark.parametrize("batch", [1, 2, 3, 5])
def test_events_read_in_batches_cut_packed_rows_anywhere_and_give_each_event_once(tmp_path, monkeypatch, batch):
    import flowctl.store.events as batched

    store = sqlite_store(tmp_path)
    _h, run_id = _packed_run(tmp_path, store)
    whole = store.events(run_id)
    monkeypatch.setattr(batched, "BATCH", batch)
    assert store.events(run_id) == whole
    assert [e["seq"] for e in whole] == list(range(1, len(whole) + 1))
    page = store.events_page(run_id, 3, batch)
    assert [e["seq"] for e in page] == list(range(4, 4 + batch))


def test_stats_counts_the_tool_calls_of_packed_rows(tmp_path):
    from flowctl.store.history import stats

    store = sqlite_store(tmp_path)
    _packed_run(tmp_path, store)
    found = stats(store)
    assert found["runs"] == 1 and found["tools"]["bump@1.0.0"]["calls"] == 6


@pytest.mark.postgres
def test_postgresql_stores_packed_rows_and_verify_detects_an_edit(tmp_path, pg_url):  # noqa: F811
    import psycopg

    from flowctl.store.history import stats

    store = open_store(pg_url)
    try:
        _h, run_id = _packed_run(tmp_path, store)
        events = store.events(run_id)
        assert _problems(store, run_id) == []
        assert stats(store)["tools"]["bump@1.0.0"]["calls"] == 6
        with psycopg.connect(pg_url, autocommit=True) as db:
            rows = db.execute("SELECT seq, n_events FROM flowctl_events WHERE run_id = %s ORDER BY seq", (run_id,)).fetchall()
            assert sum(n for _s, n in rows) == len(events) and len(rows) < len(events) / 2
            seq = rows[2][0]
            db.execute("UPDATE flowctl_events SET data = replace(data, '\"n\":', '\"m\":') WHERE run_id = %s AND seq = %s",
                       (run_id, seq))
        assert any("was modified (hash differs)" in p for p in _problems(store, run_id))
    finally:
        store.close()
