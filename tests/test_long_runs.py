"""Long runs stream (issue 17, target 5) and the read commands start without SQLAlchemy (target 7).

A run's events are read in batches (keyset pagination on ``seq``) from every kind of store, the
audit checks are fed one event at a time, ``trace`` folds steps as they are read and prints plain
lines past its table limit, ``trace --last N`` says what it left out; the DBAPI reader answers as
the SQLAlchemy store does."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from support.enginekit import Harness, build, contract
from support.pg import pg_url  # noqa: F401 - fixture

TOOLS = """
def inc(input, call):
    return {"n": (input.get("n") or 0) + 1}
"""


def loop(n: int) -> dict:
    """A flow ``f`` whose state ``a`` runs ``n`` times, then ``done``."""
    return {
        **contract("inc", "inc"),
        "states/a.yaml": "id: a\ntype: task\ntool: inc@^1\ninput: {n: context.n}\n",
        "transitions/f.yaml": textwrap.dedent(f"""\
            flow: f
            start: a
            limits: {{max_steps: {n + 10}, max_visits: {n + 10}}}
            transitions:
              - {{from: a, to: a, when: 'response.n < `{n}`', set: {{n: response.n}}}}
              - {{from: a, to: done}}
            """),
    }


def _store(kind, tmp_path, request):
    from flowctl.store.sql import open_store

    if kind == "memory":
        return open_store("memory")
    url = request.getfixturevalue("pg_url") if kind == "postgresql" else f"sqlite:///{tmp_path}/flowctl.db"
    return open_store(url)


def _ran(tmp_path, store, n=20):
    h = Harness(build(tmp_path, loop(n), TOOLS), store=store)
    result = h.run()
    assert result.status == "succeeded" and result.steps == n + 1
    return h, result.run_id


def _reader(store):
    from flowctl.store.core import SCHEMA_VERSION
    from flowctl.store.reader import open_reader

    reader = open_reader(store.url, SCHEMA_VERSION)
    assert reader is not None
    return reader


KINDS = ["memory", "sqlite", "sqlite reader", pytest.param("postgresql", marks=pytest.mark.postgres),
         pytest.param("postgresql reader", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_runs_events_are_read_in_batches_after_the_last_seq_seen(kind, tmp_path, request):
    from flowctl.store.events import iter_events

    store = _store(kind.split()[0], tmp_path, request)
    _h, run_id = _ran(tmp_path, store)
    source = _reader(store) if kind.endswith("reader") else store
    whole = store.events(run_id)
    pages = []
    page = source.events_page

    def spy(rid, after, limit):
        got = page(rid, after, limit)
        pages.append((after, limit, [e["seq"] for e in got]))
        return got

    source.events_page = spy
    try:
        streamed = list(iter_events(source, run_id, batch=7))
    finally:
        if source is not store:
            source.close()
        store.close()
    assert [dict(e, fence=None) for e in streamed] == [dict(e, fence=None) for e in whole]  # same events, same order
    assert len(whole) > 7 * 3
    assert all(len(seqs) <= 7 and limit == 7 for _after, limit, seqs in pages)
    assert [after for after, _limit, _seqs in pages] == [0] + [seqs[-1] for _a, _l, seqs in pages[:-1]]
    assert len(pages) == len(whole) // 7 + 1  # the last (short or empty) page ends it


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_the_dbapi_reader_answers_as_the_sqlalchemy_store(kind, tmp_path, request):
    store = _store(kind, tmp_path, request)
    try:
        _h, first = _ran(tmp_path / "one", store, n=3)
        _h, second = _ran(tmp_path / "two", store, n=4)
        reader = _reader(store)
        try:
            assert reader.get_run(first) == store.get_run(first)
            assert reader.get_run(second[:-2]) == store.get_run(second[:-2])  # a unique id prefix
            for kw in ({}, {"limit": 1}, {"status": "succeeded"}, {"flow": "f", "top_level": True}, {"status": "paused"}):
                assert reader.list_runs(**kw) == store.list_runs(**kw), kw
            assert reader.events(first) == store.events(first)
            assert reader.steps(first) == store.steps(first)
            assert reader.stats_rows(10) == store.stats_rows(10)
            digest = store.get_run(first)["digest"]
            assert reader.load_definition(digest) == store.load_definition(digest)
            assert abs(reader.now() - store.now()) < 5
            from flowctl.errors import RunNotFound

            with pytest.raises(RunNotFound):
                reader.get_run("nosuchrun")
        finally:
            reader.close()
    finally:
        store.close()


def test_a_store_at_another_schema_version_is_left_to_the_sqlalchemy_store(tmp_path):
    from flowctl.store.core import SCHEMA_VERSION
    from flowctl.store.reader import open_reader
    from flowctl.store.sql import open_store

    url = f"sqlite:///{tmp_path}/flowctl.db"
    open_store(url).close()
    assert open_reader(url, SCHEMA_VERSION + 1) is None  # it would have to be upgraded first
    assert open_reader(url + "?mode=ro", SCHEMA_VERSION) is None  # options only SQLAlchemy's URLs know


def _cli(*args):
    from flowctl.cli.main import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _sqlite_run(tmp_path, n):
    from flowctl.store.sql import open_store

    url = f"sqlite:///{tmp_path}/flowctl.db"
    h, run_id = _ran(tmp_path, open_store(url), n=n)
    h.store.close()
    return ["--root", str(h.root), "--db", url], tmp_path / "flowctl.db", run_id


def test_audit_verify_reads_in_batches_and_still_finds_an_edit_or_a_cut_past_the_first(tmp_path, monkeypatch):
    import flowctl.store.events as events

    monkeypatch.setattr(events, "BATCH", 5)
    common, db, run_id = _sqlite_run(tmp_path, 12)
    ok = _cli("audit", "verify", run_id, *common)
    assert ok.exit_code == 0 and "hash chain intact" in ok.output
    with sqlite3.connect(db) as conn:
        last = conn.execute("SELECT max(seq) FROM flowctl_events").fetchone()[0]
        assert last > 5 * 4
        # the packed row (one per commit) of a tool_succeeded event before the last batch
        conn.execute("UPDATE flowctl_events SET data = replace(data, '\"n\"', '\"m\"') WHERE seq = ?",
                     (conn.execute("SELECT max(seq) FROM flowctl_events WHERE instr(data, '\"tool_succeeded\"') AND seq < ?",
                                   (last - 3,)).fetchone()[0],))
    edited = _cli("audit", "verify", run_id, *common)
    assert edited.exit_code == 1 and "was modified (hash differs)" in edited.output
    with sqlite3.connect(db) as conn:
        n = conn.execute("SELECT coalesce(n_events, 1) FROM flowctl_events WHERE seq = ?", (last,)).fetchone()[0]
        conn.execute("DELETE FROM flowctl_events WHERE seq = ?", (last,))
    cut = _cli("audit", "verify", run_id, *common)
    assert cut.exit_code == 1 and f"the run records {last} events but {last - n} are stored" in cut.output


def test_audit_verify_keeps_the_anchored_head_check_while_streaming(tmp_path, monkeypatch):
    import flowctl.store.events as events

    monkeypatch.setattr(events, "BATCH", 4)
    common, db, run_id = _sqlite_run(tmp_path, 6)
    with sqlite3.connect(db) as conn:
        # the row holding event 9 (a packed row is keyed by its last event)
        seq, h = conn.execute("SELECT seq, hash FROM flowctl_events WHERE seq >= 9 ORDER BY seq LIMIT 1").fetchone()
    assert _cli("audit", "verify", run_id, *common, "--expect-head", f"{seq}:{h}").exit_code == 0
    wrong = _cli("audit", "verify", run_id, *common, "--expect-head", f"{seq}:{'0' * 64}")
    assert wrong.exit_code == 1 and "no longer has the anchored hash" in wrong.output


def test_trace_past_its_table_limit_prints_every_step_as_a_plain_aligned_line(tmp_path, monkeypatch):
    import flowctl.cli.commands.trace as trace
    import flowctl.store.events as events

    monkeypatch.setattr(trace, "PLAIN_PAST", 10)
    monkeypatch.setattr(events, "BATCH", 7)
    common, _db, run_id = _sqlite_run(tmp_path, 30)
    out = _cli("trace", run_id, *common)
    assert out.exit_code == 0
    lines = out.output.splitlines()
    assert lines[1] == "a ×30 → done"
    header = lines[2]
    assert header.split() == ["#", "state", "type", "tool", "tries", "tool", "ms", "policy", "outcome", "next"]
    rows = lines[3:34]
    assert [r.split()[0] for r in rows] == [str(i) for i in range(1, 32)]
    assert rows[0].split()[1:] == ["a", "task", "inc@1.0.0", "1", rows[0].split()[5], "ok", "a"]
    assert rows[-1].split()[1:4] == ["done", "succeed", "1"] and "succeeded" in rows[-1]
    assert len({r.index(" a ") for r in rows[:-1]}) == 1  # columns aligned
    assert all(r.index("inc@1.0.0") == header.index("tool") for r in rows[:-1])


def test_trace_last_n_shows_the_last_steps_and_says_how_many_were_left_out(tmp_path):
    common, _db, run_id = _sqlite_run(tmp_path, 8)
    out = _cli("trace", run_id, *common, "--last", "3")
    assert out.exit_code == 0
    assert "(6 earlier steps left out: the last 3 of 9 steps follow)" in out.output
    rows = [line.split() for line in out.output.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["7", "8", "9"]
    assert "a ×8 → done" in out.output  # the path stays whole
    one = _cli("trace", run_id, *common, "--last", "8")
    assert "(1 earlier step left out: the last 8 of 9 steps follow)" in one.output
    assert "left out" not in _cli("trace", run_id, *common, "--last", "9").output


def test_the_read_commands_never_import_sqlalchemy(tmp_path):
    common, _db, run_id = _sqlite_run(tmp_path, 2)
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print('SQLALCHEMY' if 'sqlalchemy' in sys.modules else 'NO-SQLALCHEMY', file=sys.stderr))\n"
             "sys.argv = ['flowctl'] + sys.argv[1:]\n"
             "from flowctl.cli.main import main\nmain()\n")
    for args in (["trace", run_id], ["runs"], ["stats"], ["reviews"], ["audit", "verify", run_id], ["audit", "log", run_id]):
        done = subprocess.run([sys.executable, "-c", probe, *args, *common], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (args, done.stderr)
        assert done.stderr.strip().endswith("NO-SQLALCHEMY"), (args, done.stderr)
