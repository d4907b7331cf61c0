"""The store-wide ledger of runs (schema 11, :mod:`flowctl.store.ledger`): ``flowctl audit verify``
without RUN names a run deleted from the store, a ledger row edited or removed; on SQLite,
PostgreSQL and the memory store."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from flowctl.cli.main import main
from flowctl.store import ledger
from flowctl.store.prune import prune
from flowctl.store.sql import MemoryStore, open_store
from support.enginekit import Harness, allow_all, build, contract, task
from support.pg import pg_url  # noqa: F401 - fixture

TOOLS = "def echo(input, call):\n    return {'ok': True}\n"
FILES = {**contract("echo", "echo"), **allow_all("echo"), **task("a", "echo@1.0.0"),
         "states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
         "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: done}\n",
         "transitions/g.yaml": "flow: g\nstart: a\ntransitions:\n  - {from: a, to: w}\n  - {from: w, to: done}\n"}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/flowctl.db"
    return request.getfixturevalue("pg_url")


def _runs(tmp_path, url, n=2):
    """A project and its store with ``n`` finished runs of f and one waiting run of g."""
    root = build(tmp_path, FILES, TOOLS)
    store = open_store(url) if url else MemoryStore()
    h = Harness(root, store=store, max_inline_wait=1.0)
    done = [h.run("f").run_id for _ in range(n)]
    waiting = h.run("g")
    assert waiting.status == "waiting"
    return root, store, done, waiting.run_id


def _sql(store, *statements):
    """Change the store behind flowctl's back (as sqlite3 or psql would)."""
    with store._open_sa().begin() as conn:
        for text in statements:
            conn.exec_driver_sql(text)


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_a_clean_store_verifies_and_prints_its_head(tmp_path, url):
    root, store, done, wid = _runs(tmp_path, url)
    report = ledger.verify(store)
    assert report.problems == []
    # a start and an end per finished run, a start for the waiting one
    assert report.rows == 5 and report.runs == 3
    store.close()
    out = _cli("audit", "verify", "--root", root, "--db", url)
    assert out.exit_code == 0, out.output
    assert f"head {report.head_text}" in out.output
    head = _cli("audit", "head", "--ledger", "--root", root, "--db", url)
    assert head.exit_code == 0 and head.output.strip() == report.head_text
    anchored = _cli("audit", "verify", "--all", "--expect-head", report.head_text, "--root", root, "--db", url)
    assert anchored.exit_code == 0, anchored.output


def test_a_deleted_run_is_named(tmp_path, url):
    root, store, (rid, other), wid = _runs(tmp_path, url)
    for table, col in (("flowctl_events", "run_id"), ("flowctl_steps", "run_id"), ("flowctl_runs", "id")):
        _sql(store, f"DELETE FROM {table} WHERE {col} = '{rid}'")
    assert ledger.verify(store).problems == [f"run {rid} is in the ledger but not in the store (deleted)"]
    store.close()
    out = _cli("audit", "verify", "--root", root, "--db", url)
    assert out.exit_code == 1
    assert f"run {rid} is in the ledger but not in the store" in out.output and other not in out.output


def test_a_deleted_run_is_named_on_a_sqlite_file_edited_with_sqlite3(tmp_path):
    import sqlite3

    root, store, (rid, _), _wid = _runs(tmp_path, f"sqlite:///{tmp_path}/flowctl.db")
    store.close()
    with sqlite3.connect(tmp_path / "flowctl.db") as conn:
        for table, col in (("flowctl_events", "run_id"), ("flowctl_steps", "run_id"), ("flowctl_runs", "id")):
            conn.execute(f"DELETE FROM {table} WHERE {col} = ?", (rid,))
    out = _cli("audit", "verify", "--root", root, "--db", f"sqlite:///{tmp_path}/flowctl.db")
    assert out.exit_code == 1 and f"run {rid} is in the ledger but not in the store (deleted)" in out.output


def test_an_ended_run_set_back_and_a_run_inserted_are_named(tmp_path, url):
    _root, store, (rid, _), wid = _runs(tmp_path, url)
    _sql(store, f"UPDATE flowctl_runs SET last_seq = last_seq - 1 WHERE id = '{rid}'",
         f"INSERT INTO flowctl_runs (id, flow, digest, status, created_at, updated_at, last_seq, last_hash, steps) "
         f"VALUES ('forged00', 'f', 'x', 'succeeded', 0, 0, 0, '', 0)")
    problems = ledger.verify(store).problems
    assert any(p.startswith(f"run {rid}: its head is") and "when it ended" in p for p in problems)
    assert "run forged00 is in the store but not in the ledger (inserted outside flowctl)" in problems


def test_an_edited_ledger_row_breaks_the_chain(tmp_path, url):
    _root, store, (rid, _), _wid = _runs(tmp_path, url)
    _sql(store, "UPDATE flowctl_ledger SET run_head_seq = run_head_seq + 1 WHERE n = 2")
    assert any("ledger row 2" in p and "edited" in p for p in ledger.verify(store).problems)


def test_a_removed_middle_row_is_named(tmp_path, url):
    _root, store, _done, _wid = _runs(tmp_path, url)
    _sql(store, "DELETE FROM flowctl_ledger WHERE n = 2")
    assert "ledger rows 2-2 are missing (removed from the store)" in ledger.verify(store).problems


def test_a_cut_tail_changes_the_printed_head_and_only_an_anchor_detects_it(tmp_path, url):
    """Documented limit: the last rows cut off (and the head row set back) leave a valid, shorter
    chain; the head printed changes, and a head anchored outside the store catches it."""
    root, store, _done, wid = _runs(tmp_path, url)
    before = ledger.verify(store)
    (prev,) = [r for r in _ledger_rows(store) if r[0] == before.head[0] - 1]
    _sql(store, f"DELETE FROM flowctl_ledger WHERE n = {before.head[0]}")
    assert "the ledger head row says" in " ".join(ledger.verify(store).problems)  # the head row still says 5
    _sql(store, f"UPDATE flowctl_ledger_head SET n = {prev[0]}, hash = '{prev[1]}' WHERE id = 1")
    _sql(store, f"DELETE FROM flowctl_runs WHERE id = '{wid}'")  # the run whose row was cut
    after = ledger.verify(store)
    assert after.problems == [] and after.head_text != before.head_text
    anchored = ledger.verify(store, before.head)
    assert anchored.problems == [f"the ledger ends at row {after.head[0]}, before the anchored head "
                                 f"{before.head[0]} (its last rows were removed)"]
    store.close()
    out = _cli("audit", "verify", "--expect-head", before.head_text, "--root", root, "--db", url)
    assert out.exit_code == 1 and "before the anchored head" in out.output


def _ledger_rows(store):
    with store._open_sa().connect() as conn:
        return conn.exec_driver_sql("SELECT n, hash FROM flowctl_ledger ORDER BY n").fetchall()


def test_a_prune_keeps_verify_clean(tmp_path, url):
    _root, store, done, _wid = _runs(tmp_path, url)
    result = prune(store, time.time() - 90 * 86400, tmp_path / "arch", now=time.time())
    assert result.skipped == []
    kinds = [k for (k,) in _query(store, "SELECT kind FROM flowctl_ledger ORDER BY n")]
    assert kinds.count("prune") == 2
    assert ledger.verify(store).problems == []


def _query(store, text):
    with store._open_sa().connect() as conn:
        return conn.exec_driver_sql(text).fetchall()


def test_the_upgrade_from_schema_10_adopts_existing_runs(tmp_path, url):
    _root, store, done, wid = _runs(tmp_path, url)
    _sql(store, "DROP TABLE flowctl_ledger", "DROP TABLE flowctl_ledger_head",
         "UPDATE flowctl_meta SET value = '10' WHERE key = 'schema_version'")
    store.close()
    store = open_store(url)
    rows = _query(store, "SELECT n, run_id, kind FROM flowctl_ledger ORDER BY n")
    assert [r[2] for r in rows] == ["adopt"] * 3 and {r[1] for r in rows} == {*done, wid}
    assert _query(store, "SELECT value FROM flowctl_meta WHERE key = 'schema_version'") == [("12",)]  # the current schema (12: the summaries' figures)
    assert ledger.verify(store).problems == []
    h = Harness(build(tmp_path / "again", FILES, TOOLS), store=store, max_inline_wait=1.0)
    h.run("f")  # the chain goes on from the adopted rows
    assert ledger.verify(store).problems == [] and ledger.verify(store).rows == 5


def test_the_memory_store_keeps_a_ledger_too(tmp_path):
    _root, store, (rid, other), wid = _runs(tmp_path, None)
    assert ledger.verify(store).problems == [] and ledger.verify(store).rows == 5
    del store._runs[rid]
    assert ledger.verify(store).problems == [f"run {rid} is in the ledger but not in the store (deleted)"]
    store.ledger.rows[0]["kind"] = "adopt"
    assert any("ledger row 1" in p for p in ledger.verify(store).problems)


def test_verify_all_with_a_run_is_a_usage_error(tmp_path):
    out = _cli("audit", "verify", "abcd", "--all", "--root", tmp_path)
    assert out.exit_code == 2 and "takes no RUN" in out.output


@pytest.mark.postgres
def test_concurrent_run_starts_in_two_processes_take_turns_on_the_chain(tmp_path, pg_url, monkeypatch):
    """Process A holds the ledger head (inside its create_run, between reading the head and writing
    its row) while process B starts a run: B waits on the head row's lock, then chains after A."""
    import psycopg

    root = build(tmp_path, FILES, TOOLS)
    store = open_store(pg_url, create=True)
    h = Harness(root, store=store, max_inline_wait=1.0)
    h.run("f")  # the definition is saved, the chain has rows
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    seen = {}

    def in_a():
        if seen:
            return
        seen["b"] = subprocess.Popen([sys.executable, "-c", "from flowctl.cli.main import main; main()", "run", "f", "--root", str(root),
                                      "--db", pg_url], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while True:  # B is blocked on the head row A holds (a condition, not a guessed delay)
                waiting = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                       "AND wait_event_type = 'Lock'").fetchone()[0]
                if waiting or seen["b"].poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        seen["waited"] = waiting

    monkeypatch.setattr(ledger, "hook", in_a)
    h.run("f")
    monkeypatch.setattr(ledger, "hook", None)
    out, err = seen["b"].communicate(timeout=120)
    assert seen["b"].returncode == 0, err
    assert seen["waited"] == 1
    report = ledger.verify(store)
    assert report.problems == [] and report.rows == 6 and report.runs == 3


def test_a_dropped_ledger_table_is_a_finding_not_a_traceback(tmp_path):
    url = f"sqlite:///{tmp_path}/flowctl.db"
    root, store, _done, _wid = _runs(tmp_path, url)
    _sql(store, "DROP TABLE flowctl_ledger")
    store.close()
    out = _cli("audit", "verify", "--root", root, "--db", url)
    assert out.exit_code == 1 and "[RECORD_TAMPERED] the ledger of runs cannot be read" in out.output
