"""Retention (issue 21, item 6): ``flowctl prune`` + its archive + ``audit verify`` of what is left
(:mod:`flowctl.store.prune`, :mod:`flowctl.store.archive`), on SQLite and PostgreSQL."""
from __future__ import annotations

import gzip
import json
import sqlite3
import time

import pytest
from click.testing import CliRunner

from flowctl.cli.main import main
from flowctl.errors import UsageError
from flowctl.store.prune import DEFAULT_KEEP, keep_patterns, prune, pruned_ranges
from flowctl.store.core import SCHEMA_VERSION
from flowctl.store.sql import open_store
from support.enginekit import Harness, allow_all, build, contract, effect_contract, sqlite_store, task
from support.pg import pg_url  # noqa: F401 - fixture

TOOLS = """
def echo(input, call):
    return {"ok": True}

def pay(input, call):
    return {"paid": input.get("n", 1)}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    pass
"""
FILES = {**contract("echo", "echo"), **effect_contract("pay", "pay"), **allow_all("pay"),
         **task("a", "echo@1.0.0"), **task("b", "pay@1.0.0"), **task("c", "echo@1.0.0"),
         "states/w.yaml": "id: w\ntype: wait\nduration: 1h\n",
         "transitions/f.yaml": "flow: f\nstart: a\ntransitions:\n  - {from: a, to: b}\n  - {from: b, to: c}\n"
                               "  - {from: c, to: done}\n",
         "transitions/g.yaml": "flow: g\nstart: a\ntransitions:\n  - {from: a, to: w}\n  - {from: w, to: done}\n"}
CUTOFF = time.time() - 90 * 86400  # the harness' clock is 2026-01-01: its runs are older


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/flowctl.db"
    return request.getfixturevalue("pg_url")


def _runs(tmp_path, url):
    """A project, its store, one finished run of f and one waiting run of g (both dated 2026-01-01)."""
    root = build(tmp_path, FILES, TOOLS)
    store = open_store(url)
    h = Harness(root, store=store, max_inline_wait=1.0)
    done, waiting = h.run("f"), h.run("g")
    assert (done.status, waiting.status) == ("succeeded", "waiting")
    return root, store, done.run_id, waiting.run_id


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_prune_round_trip_archive_and_verify(tmp_path, url):
    root, store, rid, wid = _runs(tmp_path, url)
    before = store.events(rid)
    waiting_before = store.events(wid)
    store.close()
    out = _cli("prune", "--older-than", "90d", "--archive", tmp_path / "arch", "--root", root, "--db", url)
    assert out.exit_code == 0, out.output
    assert f"pruned {len(before)} events" in out.output and "of 1 finished runs" in out.output
    store = open_store(url)
    assert store.events(rid) == []
    assert store.events(wid) == waiting_before  # a run that has not ended is never touched
    (rng,) = pruned_ranges(store, rid)
    assert (rng["first_seq"], rng["last_seq"], rng["prev_hash"], rng["hash"]) == (1, before[-1]["seq"], "",
                                                                                  before[-1]["hash"])
    store.close()
    verified = _cli("audit", "verify", rid, "--root", root, "--db", url)
    assert verified.exit_code == 0, verified.output
    assert (f"not checked: events 1-{before[-1]['seq']} (pruned into {rng['archive']}; not found — check them "
            "with --archive DIR)") in verified.output
    whole = _cli("audit", "verify", rid, "--archive", tmp_path / "arch", "--root", root, "--db", url)
    assert whole.exit_code == 0, whole.output
    assert f"{len(before)} events (with 1 archived range), hash chain intact; run row, 1 step record (one per side-effecting call)" in whole.output
    alone = _cli("audit", "verify", "--archive", tmp_path / "arch")
    assert alone.exit_code == 0 and f"run {rid}: {len(before)} archived events" in alone.output
    again = _cli("prune", "--older-than", "90d", "--archive", tmp_path / "arch", "--root", root, "--db", url)
    assert again.exit_code == 0 and "nothing to prune" in again.output
    traced = _cli("trace", rid, "--root", root, "--db", url)  # what is gone is said before what is left
    assert traced.exit_code == 0, traced.output
    assert f"pruned: {len(before)} events (seq 1–{before[-1]['seq']}) were moved to {rng['archive']}" in traced.output
    as_json = json.loads(_cli("trace", rid, "--format", "json", "--root", root, "--db", url).output)
    assert [(r["first_seq"], r["n_events"]) for r in as_json["pruned"]] == [(1, len(before))]


def test_keep_types_prunes_only_whole_rows_of_process_events(tmp_path, url):
    root, store, rid, _wid = _runs(tmp_path, url)
    before = store.events(rid)
    result = prune(store, CUTOFF, tmp_path / "arch", keep=keep_patterns("default"), now=time.time())
    left = store.events(rid)
    kept = {e["type"] for e in left}
    assert {"run_started", "policy_decided", "run_succeeded"} <= kept
    assert 0 < result.events < len(before) and len(left) == len(before) - result.events
    by_row = {}
    for ev in left:
        by_row.setdefault(tuple(ev["packed"]), []).append(ev["type"])
    for types in by_row.values():  # every row left holds a kept event (a row is pruned or kept whole)
        assert any(t.startswith(("run_", "review_", "compensation_")) or t == "policy_decided" for t in types)
    assert len(pruned_ranges(store, rid)) == 2  # around the kept commit of the policy decision
    store.close()
    verified = _cli("audit", "verify", rid, "--root", root, "--db", url)
    assert verified.exit_code == 0, verified.output
    assert verified.output.count("pruned into") == 2
    whole = _cli("audit", "verify", rid, "--archive", tmp_path / "arch", "--root", root, "--db", url)
    assert whole.exit_code == 0 and f"{len(before)} events (with 2 archived ranges)" in whole.output


def _rewrite(path, edit):
    """Rewrite an archive with ``edit(lines)``, its manifest recomputed (a careful forger)."""
    import hashlib

    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()[:-1]
    lines = edit(lines)
    sha = hashlib.sha256("".join(line + "\n" for line in lines).encode("utf-8")).hexdigest()
    manifest = json.dumps({"manifest": {"lines": len(lines), "sha256": sha}})
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines) + manifest + "\n")


def test_an_edited_archive_fails_verify_naming_run_and_events(tmp_path):
    root, store, rid, _wid = _runs(tmp_path, f"sqlite:///{tmp_path}/flowctl.db")
    result = prune(store, CUTOFF, tmp_path / "arch", now=time.time())
    store.close()

    def paid_more(lines):
        return [line.replace('\\"paid\\":1', '\\"paid\\":1000') for line in lines]

    _rewrite(result.path, paid_more)
    with gzip.open(result.path, "rt") as f:
        assert '\\"paid\\":1000' in f.read()
    alone = _cli("audit", "verify", "--archive", result.path)
    assert alone.exit_code == 1
    assert f"run {rid}: the commit of events" in alone.output and "was modified (hash differs)" in alone.output
    db = f"sqlite:///{tmp_path}/flowctl.db"
    whole = _cli("audit", "verify", rid, "--archive", tmp_path / "arch", "--root", root, "--db", db)
    assert whole.exit_code == 1
    assert f"run {rid}: archive {result.path.name} is not the file" in whole.output and "sha256 differs" in whole.output


def test_a_cut_archive_and_a_forged_head_in_the_store_fail_verify(tmp_path):
    root, store, rid, _wid = _runs(tmp_path, f"sqlite:///{tmp_path}/flowctl.db")
    result = prune(store, CUTOFF, tmp_path / "arch", now=time.time())
    store.close()
    with gzip.open(result.path, "rt") as f:
        lines = f.read().splitlines()
    with gzip.open(tmp_path / "cut.jsonl.gz", "wt") as f:
        f.write("\n".join(lines[:-3]) + "\n")
    cut = _cli("audit", "verify", "--archive", tmp_path / "cut.jsonl.gz")
    assert cut.exit_code == 1 and "no manifest" in cut.output and f"run {rid}: events" in cut.output
    db = sqlite3.connect(tmp_path / "flowctl.db")
    db.execute("UPDATE flowctl_pruned SET hash = ? WHERE run_id = ?", ("0" * 64, rid))
    db.commit()
    db.close()
    forged = _cli("audit", "verify", rid, "--root", root, "--db", f"sqlite:///{tmp_path}/flowctl.db")
    assert forged.exit_code == 1 and "last hash does not match the head of its pruned events" in forged.output


def test_an_interrupted_prune_leaves_the_store_whole(tmp_path):
    store = None
    root, store, rid, _wid = _runs(tmp_path, f"sqlite:///{tmp_path}/flowctl.db")
    before = store.events(rid)

    def crash(_result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prune(store, CUTOFF, tmp_path / "arch", now=time.time(), before_delete=crash)
    assert store.events(rid) == before and pruned_ranges(store, rid) == []
    assert [p.name for p in (tmp_path / "arch").iterdir() if p.name.endswith(".partial")] == []
    store.close()
    ok = _cli("audit", "verify", rid, "--root", root, "--db", f"sqlite:///{tmp_path}/flowctl.db")
    assert ok.exit_code == 0 and "pruned" not in ok.output


def test_a_run_changed_after_the_plan_is_skipped_whole(tmp_path):
    _root, store, rid, _wid = _runs(tmp_path, f"sqlite:///{tmp_path}/flowctl.db")
    before = store.events(rid)

    def redriven(_result):  # another process moves the run on between the archive and the delete
        with store._begin() as conn:
            conn.execute(store.t.runs.update().where(store.t.runs.c.id == rid).values(status="running"))

    result = prune(store, CUTOFF, tmp_path / "arch", now=time.time(), before_delete=redriven)
    assert result.skipped == [rid] and store.events(rid) == before and result.events == 0


def test_a_finished_child_of_a_parent_still_open_is_not_pruned(tmp_path):
    files = dict(FILES, **{"states/sub.yaml": "id: sub\ntype: subflow\nflow: f\n",
                           "transitions/p.yaml": "flow: p\nstart: sub\ntransitions:\n  - {from: sub, to: w}\n"
                                                 "  - {from: w, to: done}\n"})
    root = build(tmp_path, files, TOOLS)
    store = sqlite_store(tmp_path)
    parent = Harness(root, store=store, max_inline_wait=1.0).run("p")
    assert parent.status == "waiting"
    (child,) = store.list_runs(parent_id=parent.run_id)
    assert child["status"] == "succeeded"
    result = prune(store, CUTOFF, tmp_path / "arch", now=time.time())
    assert result.runs == [] and store.events(child["id"])


def test_a_failed_run_keeps_what_redrive_reads(tmp_path):
    files = dict(FILES, **contract("boom", "boom"), **task("x", "boom@1.0.0"),
                 **{"transitions/h.yaml": "flow: h\nstart: b\ntransitions:\n  - {from: b, to: x}\n"
                                          "  - {from: x, to: done}\n"})
    root = build(tmp_path, files, TOOLS + "\ndef boom(input, call):\n    raise RuntimeError('down')\n")
    store = sqlite_store(tmp_path)
    failed = Harness(root, store=store).run("h")
    assert failed.status == "failed"
    prune(store, CUTOFF, tmp_path / "arch", now=time.time())
    assert "compensation_started" in [e["type"] for e in store.events(failed.run_id)]
    store.close()
    ok = _cli("audit", "verify", failed.run_id, "--root", root, "--db", f"sqlite:///{tmp_path}/flowctl.db")
    assert ok.exit_code == 0 and "pruned into" in ok.output, ok.output


def test_dry_run_writes_nothing(tmp_path):
    root, store, rid, _wid = _runs(tmp_path, f"sqlite:///{tmp_path}/flowctl.db")
    n = len(store.events(rid))
    store.close()
    out = _cli("prune", "--older-than", "90d", "--dry-run", "--archive", tmp_path / "arch", "--root", root,
               "--db", f"sqlite:///{tmp_path}/flowctl.db")
    assert out.exit_code == 0 and f"would prune {n} events" in out.output
    assert not (tmp_path / "arch").exists()
    assert len(sqlite_store(tmp_path).events(rid)) == n


@pytest.mark.parametrize("args, message", [
    (["--older-than", "90"], "--older-than: '90' is not a duration"),
    (["--older-than", "90d", "--keep-types", "run_*,bad type"], "--keep-types: 'bad type' is not an event type"),
    (["--older-than", "90d", "--db", "memory"], "flowctl prune needs a SQL store"),
])
def test_bad_prune_options_are_usage_errors(tmp_path, args, message):
    root = build(tmp_path, FILES, TOOLS)
    out = _cli("prune", *args, "--root", root)
    assert out.exit_code == 2 and message in out.output and "Traceback" not in out.output


def test_an_archive_folder_that_cannot_be_written_prunes_nothing(tmp_path):
    root, store, rid, _wid = _runs(tmp_path, f"sqlite:///{tmp_path}/flowctl.db")
    n = len(store.events(rid))
    store.close()
    (tmp_path / "a_file").write_text("x")
    out = _cli("prune", "--older-than", "90d", "--archive", tmp_path / "a_file" / "arch", "--root", root,
               "--db", f"sqlite:///{tmp_path}/flowctl.db")
    assert out.exit_code == 2 and "--archive: cannot write the archive" in out.output and "nothing was pruned" in out.output
    assert len(sqlite_store(tmp_path).events(rid)) == n


def test_audit_verify_all_takes_no_archive_and_a_missing_archive_is_a_usage_error(tmp_path):
    out = _cli("audit", "verify", "--all", "--archive", tmp_path)  # (without RUN: the ledger, test_store_ledger)
    assert out.exit_code == 2 and "takes no RUN and no --archive" in out.output
    missing = _cli("audit", "verify", "--archive", tmp_path / "nope")
    assert missing.exit_code == 2 and "no such file or folder" in missing.output


def test_keep_patterns():
    assert keep_patterns("default,tool_failed") == DEFAULT_KEEP + ("tool_failed",)
    assert keep_patterns(None) is None
    with pytest.raises(UsageError):
        keep_patterns("run_*,")


def test_schema_7_store_gains_the_pruned_table(tmp_path):
    store = sqlite_store(tmp_path)
    store.close()
    db = sqlite3.connect(tmp_path / "flowctl.db")
    db.execute("DROP TABLE flowctl_pruned")
    db.execute("UPDATE flowctl_meta SET value = '7' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    store = sqlite_store(tmp_path)
    assert pruned_ranges(store, "r1") == []
    store.close()
    assert sqlite3.connect(tmp_path / "flowctl.db").execute(
        "SELECT value FROM flowctl_meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)


# ---------------------------------------------------------------- what a prune does to the proof
def _head(root, url, rid):
    out = _cli("audit", "head", rid, "--root", root, "--db", url)
    assert out.exit_code == 0, out.output
    return out.output.strip()


def _forge_range(store, rid, first, last, **values):
    """Delete events ``first``..``last`` of ``rid`` and record them as pruned with the hashes of
    the neighbouring rows (what a forger copies); no archive is written."""
    events = {e["seq"]: e for e in store.events(rid)}
    row = dict(run_id=rid, first_seq=first, last_seq=last, prev_hash=events[first - 1]["hash"] if first > 1 else "",
               hash=events[last]["hash"], n_rows=1, n_events=last - first + 1,
               archive="prune-20260101T000000Z-abcdef.jsonl.gz", archive_sha256="a" * 64, pruned_at=time.time())
    row.update(values)
    e = store.t.events
    with store._begin() as conn:
        conn.execute(e.delete().where(e.c.run_id == rid, e.c.seq >= first, e.c.seq <= last))
        conn.execute(store.t.pruned.insert().values(**row))


def _row_bounds(store, rid):
    """(first, last) seq of each stored row of ``rid`` (a range must hold whole rows)."""
    spans = []
    for ev in store.events(rid):
        span = tuple(ev.get("packed") or (ev["seq"], ev["seq"]))
        if span not in spans:
            spans.append(span)
    return spans


def test_a_forged_range_is_not_checked_and_fails_an_anchored_verify(tmp_path, url):
    root, store, rid, wid = _runs(tmp_path, url)
    head = _head(root, url, rid)
    spans = _row_bounds(store, rid)
    first, last = spans[1][0], spans[2][1]  # two whole rows in the middle
    _forge_range(store, rid, first, last)
    store.close()
    plain = _cli("audit", "verify", rid, "--root", root, "--db", url)
    assert plain.exit_code == 0, plain.output  # unkeyed: without its archive the middle cannot be proved
    assert (f"not checked: events {first}-{last} (pruned into prune-20260101T000000Z-abcdef.jsonl.gz; "
            "not found — check them with --archive DIR)") in plain.output
    anchored = _cli("audit", "verify", rid, "--expect-head", head, "--root", root, "--db", url)
    assert anchored.exit_code == 1
    assert f"the anchored head {head.split(':')[0]} is proved through events {first}-{last}" in anchored.output
    assert "the archive is needed (--archive DIR)" in anchored.output


def test_a_range_on_a_run_that_has_not_ended_fails(tmp_path, url):
    root, store, _rid, wid = _runs(tmp_path, url)
    spans = _row_bounds(store, wid)
    assert len(spans) >= 2
    _forge_range(store, wid, spans[0][0], spans[0][1])
    store.close()
    out = _cli("audit", "verify", wid, "--root", root, "--db", url)
    assert out.exit_code == 1
    assert f"events {spans[0][0]}-{spans[0][1]} are recorded as pruned, but the run has not ended" in out.output


@pytest.mark.parametrize("values, message", [
    ({"archive_sha256": ""}, "records no valid archive sha256"),
    ({"archive_sha256": "xyz"}, "records no valid archive sha256"),
    ({"archive": "../../etc/passwd"}, "names an archive flowctl prune does not write"),
    ({"archive": "prune-x.jsonl.gz"}, "names an archive flowctl prune does not write"),
])
def test_a_range_with_a_bad_archive_record_fails(tmp_path, values, message):
    url = f"sqlite:///{tmp_path}/flowctl.db"
    root, store, rid, _wid = _runs(tmp_path, url)
    spans = _row_bounds(store, rid)
    _forge_range(store, rid, spans[1][0], spans[1][1], **values)
    store.close()
    out = _cli("audit", "verify", rid, "--root", root, "--db", url)
    assert out.exit_code == 1 and message in out.output, out.output


def test_overlapping_ranges_fail(tmp_path, url):
    root, store, rid, _wid = _runs(tmp_path, url)
    spans = _row_bounds(store, rid)
    _forge_range(store, rid, spans[1][0], spans[2][1])
    with store._begin() as conn:  # a second record over part of the first
        conn.execute(store.t.pruned.insert().values(
            run_id=rid, first_seq=spans[2][0], last_seq=spans[2][1], prev_hash="", hash="b" * 64, n_rows=1,
            n_events=1, archive="prune-20260101T000000Z-abcdef.jsonl.gz", archive_sha256="a" * 64, pruned_at=0.0))
    store.close()
    out = _cli("audit", "verify", rid, "--root", root, "--db", url)
    assert out.exit_code == 1 and f"overlaps the pruned range that ends at {spans[2][1]}" in out.output


def test_verify_checks_the_default_archive_folder(tmp_path, url):
    root, store, rid, _wid = _runs(tmp_path, url)
    n, head = len(store.events(rid)), _head(root, url, rid)
    store.close()
    out = _cli("prune", "--older-than", "90d", "--root", root, "--db", url)  # into .flowctl/archive/
    assert out.exit_code == 0, out.output
    verified = _cli("audit", "verify", rid, "--expect-head", head, "--root", root, "--db", url)
    assert verified.exit_code == 0, verified.output
    assert f"{n} events (with 1 archived range), hash chain intact; run row, 1 step record (one per side-effecting call)" in verified.output
    (path,) = (root / ".flowctl" / "archive").iterdir()
    with gzip.open(path, "rb") as f:  # the same content, compressed again: other bytes
        content = f.read()
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(content)
    replaced = _cli("audit", "verify", rid, "--root", root, "--db", url)
    assert replaced.exit_code == 1 and f"archive {path.name} is not the file" in replaced.output


def test_a_regzipped_copy_under_a_new_name_fails(tmp_path):
    url = f"sqlite:///{tmp_path}/flowctl.db"
    root, store, rid, _wid = _runs(tmp_path, url)
    result = prune(store, CUTOFF, tmp_path / "arch", now=time.time())
    store.close()
    with gzip.open(result.path, "rb") as f:
        content = f.read()
    (tmp_path / "copy").mkdir()
    with gzip.open(tmp_path / "copy" / "prune-20990101T000000Z-000000.jsonl.gz", "wb", compresslevel=1) as f:
        f.write(content)
    alone = _cli("audit", "verify", "--archive", tmp_path / "copy")
    assert alone.exit_code == 0  # the copy's rows still chain: only the store says it is not the file
    out = _cli("audit", "verify", rid, "--archive", tmp_path / "copy", "--root", root, "--db", url)
    assert out.exit_code == 1
    assert f"events 1-{result.runs[0].last_seq} (pruned into {result.path.name}) are not in" in out.output
    same = tmp_path / "same"
    same.mkdir()
    (same / "renamed.jsonl.gz").write_bytes(result.path.read_bytes())  # the very bytes: the content is what counts
    ok = _cli("audit", "verify", rid, "--archive", same, "--root", root, "--db", url)
    assert ok.exit_code == 0 and "(with 1 archived range)" in ok.output, ok.output


def test_an_archive_line_past_the_bound_is_refused_naming_file_and_line(tmp_path, monkeypatch):
    import flowctl.store.archive as archive

    monkeypatch.setattr(archive, "MAX_LINE", 1 << 20)
    bomb = tmp_path / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb") as f:
        f.write(json.dumps({"archive": archive.FORMAT}).encode() + b"\n")
        f.write(b'{"row":"' + b"0" * (4 << 20) + b'"}\n')
    out = _cli("audit", "verify", "--archive", bomb)
    assert out.exit_code == 1 and "bomb.jsonl.gz: line 2 is longer than 1048576 bytes" in out.output
    monkeypatch.setattr(archive, "MAX_LINE", 64 << 20)
    monkeypatch.setattr(archive, "MAX_TOTAL", 1 << 20)
    total = _cli("audit", "verify", "--archive", bomb)
    assert total.exit_code == 1 and "bomb.jsonl.gz: it decompresses to more than 1048576 bytes (at line 2)" in total.output


def test_the_console_checks_a_pruned_run_as_audit_verify_does(tmp_path):
    from types import SimpleNamespace

    from flowctl.definition.loader import load_project
    from flowctl.server.console.run import read

    url = f"sqlite:///{tmp_path}/flowctl.db"
    root, store, rid, _wid = _runs(tmp_path, url)
    n = len(store.events(rid))
    prune(store, CUTOFF, root / ".flowctl" / "archive", keep=keep_patterns("default"), now=time.time())
    service = SimpleNamespace(store=store, project=load_project(root))
    marks = read(service, store.get_run(rid))
    assert marks["audit"] == {"ok": True, "problems": [], "events": n, "notes": []}
    assert marks["total"] == n  # the archived events are back in the timeline
    for path in (root / ".flowctl" / "archive").iterdir():
        path.rename(tmp_path / path.name)
    marks = read(service, store.get_run(rid))
    assert marks["audit"]["ok"] and marks["audit"]["events"] < n
    assert any(note.startswith("not checked: events") for note in marks["audit"]["notes"])


def test_a_pruned_failed_run_redriven_later_still_verifies_whole(tmp_path):
    from flowctl.engine.redrive import redrive

    files = dict(FILES, **contract("boom", "boom"), **task("x", "boom@1.0.0"),
                 **{"transitions/h.yaml": "flow: h\nstart: a\ntransitions:\n  - {from: a, to: x}\n"
                                          "  - {from: x, to: done}\n"
                                          "on_error:\n  - {errors: [\"*\"], compensate: false}\n"})
    root = build(tmp_path, files, TOOLS + "\ndef boom(input, call):\n    raise RuntimeError('down')\n")
    store = sqlite_store(tmp_path)
    h = Harness(root, store=store)
    failed = h.run("h")
    assert failed.status == "failed"
    result = prune(store, CUTOFF, root / ".flowctl" / "archive", keep=keep_patterns("default"), now=time.time())
    assert result.events and pruned_ranges(store, failed.run_id)
    again = redrive(h.engine, failed.run_id, by="key:ann", reason="retry")
    assert again.status == "failed"
    n = store.get_run(failed.run_id)["last_seq"]
    store.close()
    out = _cli("audit", "verify", failed.run_id, "--root", root, "--db", f"sqlite:///{tmp_path}/flowctl.db")
    assert out.exit_code == 0 and f"{n} events (with 1 archived range" in out.output, out.output
