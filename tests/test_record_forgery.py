"""The record cannot be forged (issue 13, item 3): what resumes trust is sealed or re-hashed.

Each test edits the store the way someone with write access to the database file would, then
checks that ``audit verify`` finds it and that nothing continues the run from it.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import textwrap

import pytest

from support.enginekit import Harness, allow_all, build, contract, effect_contract, sqlite_store, task
from flowctl.store.audit import encode_data, row_identity, run_seal, seal_commit
from flowctl.errors import RecordTampered
from support.helpers import FLOWCTL_EXE
from support.pg import pg_url  # noqa: F401 - fixture

TOOLS = """
LEDGER = []

def pay(input, call):
    LEDGER.append(("pay", input.get("id")))
    return {"ok": True, "id": input.get("id")}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    LEDGER.append(("undo", input.get("id")))
"""

FLOW = {
    **effect_contract("pay", "pay"), **allow_all("pay"),
    **task("charge", "pay@1.0.0", extra="input: {id: \"'1'\"}\n"),
    "states/approve.yaml": "id: approve\ntype: review\ndecisions: [approve, reject]\n",
    "states/rejected.yaml": "id: rejected\ntype: fail\nerror: Rejected\n",
    "transitions/f.yaml": textwrap.dedent("""\
        flow: f
        start: charge
        transitions:
          - {from: charge, to: approve}
          - {from: approve, to: done, when: "review.decision == 'approve'"}
          - {from: approve, to: rejected}
        """),
}


def _paused(tmp_path):
    root = build(tmp_path, FLOW, TOOLS)
    h = Harness(root, store=sqlite_store(tmp_path))
    paused = h.run()
    assert paused.status == "paused"
    return h, paused


def _db(tmp_path):
    return sqlite3.connect(tmp_path / "flowctl.db")


def _cli(args, root, tmp_path):
    return subprocess.run([FLOWCTL_EXE, *args, "--db", f"sqlite:///{tmp_path}/flowctl.db"], cwd=root,
                          capture_output=True, text=True, timeout=120)


def _forge_cursor(tmp_path, run_id, edit):
    db = _db(tmp_path)
    cursor = json.loads(db.execute("SELECT cursor FROM flowctl_runs WHERE id = ?", (run_id,)).fetchone()[0])
    edit(cursor)
    db.execute("UPDATE flowctl_runs SET cursor = ? WHERE id = ?", (json.dumps(cursor), run_id))
    db.commit()


def test_checkpoint_forgery_a_token_of_the_attackers_own_is_refused_by_resume_and_found_by_verify(tmp_path):
    h, paused = _paused(tmp_path)
    mine = "attacker-token"
    _forge_cursor(tmp_path, paused.run_id, lambda c: c["pending"].update(
        token_hash=hashlib.sha256(mine.encode()).hexdigest()))
    fresh = Harness(h.root, store=sqlite_store(tmp_path))
    with pytest.raises(RecordTampered, match="not what its last commit sealed"):
        fresh.engine.resume(paused.run_id, token=mine, decision="approve", by="mallory")
    assert fresh.store.get_run(paused.run_id)["status"] == "paused"  # nothing was written
    cli = _cli(["resume", paused.run_id, "--token", mine, "--decision", "approve"], h.root, tmp_path)
    assert cli.returncode != 0 and "[RECORD_TAMPERED]" in cli.stderr and "Traceback" not in cli.stderr
    verify = _cli(["audit", "verify", paused.run_id], h.root, tmp_path)
    assert verify.returncode == 1 and "checkpoint" in verify.stderr


def forged_decision(tmp_path):
    """``(harness, paused run)`` whose cursor was edited to say 'approved', the row set due."""
    h, paused = _paused(tmp_path)

    def decide(c):
        c["review"] = {"decision": "approve", "by": "mallory", "data": None}
        c["pending"] = None
        c["state"] = "done"
    _forge_cursor(tmp_path, paused.run_id, decide)
    db = _db(tmp_path)
    db.execute("UPDATE flowctl_runs SET status = 'waiting', available_at = 0 WHERE id = ?", (paused.run_id,))
    db.commit()
    return h, paused


def test_checkpoint_forgery_a_decision_written_into_the_cursor_is_refused(tmp_path):
    h, paused = forged_decision(tmp_path)
    fresh = Harness(h.root, store=sqlite_store(tmp_path))
    results = fresh.engine.recover()
    assert [(r.run_id, r.status, (r.error or {}).get("code")) for r in results] == \
        [(paused.run_id, "waiting", "RECORD_TAMPERED")]
    assert fresh.store.get_run(paused.run_id)["output"] is None


@pytest.mark.parametrize("column, value", [
    ("status", "'running'"), ("error", "'{\"code\": \"X\"}'"),
    # what the run is about: a bigger amount, other params, another definition, a child's output
    ("input", "'{\"amount\": 9999}'"), ("params", "'{\"limit\": 100000}'"),
    ("digest", "'0000000000000000000000000000000000000000000000000000000000000000'"),
    ("output", "'{\"amount\": 9}'")])
def test_run_row_forgery_status_error_input_params_digest_and_output_are_sealed(tmp_path, column, value):
    h, paused = _paused(tmp_path)
    db = _db(tmp_path)
    db.execute(f"UPDATE flowctl_runs SET {column} = {value}, owner = 'gone:1' WHERE id = ?", (paused.run_id,))
    db.commit()
    fresh = Harness(h.root, store=sqlite_store(tmp_path))
    with pytest.raises(RecordTampered):
        fresh.engine.resume(paused.run_id)
    assert _cli(["audit", "verify", paused.run_id], h.root, tmp_path).returncode == 1


def test_snapshot_forgery_an_edited_definition_snapshot_does_not_continue_the_run(tmp_path):
    h, paused = _paused(tmp_path)
    digest = h.store.get_run(paused.run_id)["digest"]
    db = _db(tmp_path)
    files = json.loads(db.execute("SELECT files FROM flowctl_definitions WHERE digest = ?", (digest,)).fetchone()[0])
    files["orchestration/transitions/f.yaml"] = files["orchestration/transitions/f.yaml"].replace(
        "{from: approve, to: rejected}", "{from: approve, to: charge}")  # a second charge after any decision
    db.execute("UPDATE flowctl_definitions SET files = ? WHERE digest = ?", (json.dumps(files), digest))
    db.commit()
    # the live files changed since the run started, so the run needs its stored snapshot
    (h.root / "orchestration" / "states" / "rejected.yaml").write_text("id: rejected\ntype: fail\nerror: No\n")
    token = paused.review["token"]
    fresh = Harness(h.root, store=sqlite_store(tmp_path))
    with pytest.raises(RecordTampered, match="does not hash to its digest"):
        fresh.engine.resume(paused.run_id, token=token, decision="reject")
    assert fresh.store.get_run(paused.run_id)["status"] == "paused"
    verify = _cli(["audit", "verify", paused.run_id], h.root, tmp_path)
    assert verify.returncode == 1 and "definition snapshot" in verify.stderr


def test_step_record_forgery_is_found_by_audit_verify(tmp_path):
    h, paused = _paused(tmp_path)
    assert _cli(["audit", "verify", paused.run_id], h.root, tmp_path).returncode == 0
    db = _db(tmp_path)
    db.execute("UPDATE flowctl_steps SET output = ? WHERE run_id = ?", (json.dumps({"ok": True, "id": "2"}), paused.run_id))
    db.commit()
    verify = _cli(["audit", "verify", paused.run_id], h.root, tmp_path)
    assert verify.returncode == 1 and "step record" in verify.stderr


def test_a_packed_rows_time_set_back_to_hide_a_payment_is_found_by_audit_verify(tmp_path):
    """The row's ``ts`` column is what ``flowctl events --since`` and ``policy report`` select
    rows by; set back, it hides the payment from them, so verify checks it against the hashed events."""
    h, paused = _paused(tmp_path)
    db = _db(tmp_path)
    seq = next(s for s, text in db.execute("SELECT seq, data FROM flowctl_events WHERE run_id = ? AND n_events "
                                           "IS NOT NULL ORDER BY seq", (paused.run_id,)) if '"tool":"pay' in text)
    db.execute("UPDATE flowctl_events SET ts = 1000 WHERE run_id = ? AND seq = ?", (paused.run_id, seq))
    db.commit()
    verify = _cli(["audit", "verify", paused.run_id], h.root, tmp_path)
    assert verify.returncode == 1, verify.stdout
    assert f"run {paused.run_id}: event {seq}: the stored row's ts column (1000.0" in verify.stderr


def test_rehashed_rewrite_passes_plain_verify_but_not_an_anchored_head(tmp_path):
    """What audit verify cannot prove alone: someone who rewrites an event and re-hashes the whole
    chain, the run row and its seal. A head kept outside the store catches it."""
    h, paused = _paused(tmp_path)
    row = h.store.get_run(paused.run_id)
    head = _cli(["audit", "head", paused.run_id], h.root, tmp_path)
    assert head.returncode == 0
    anchored = head.stdout.strip()
    assert anchored.split(":")[0] == str(row["last_seq"])
    db = _db(tmp_path)
    commits: dict = {}  # the events of each stored row (one packed row per commit), rewritten and re-hashed
    for ev in h.store.events(paused.run_id):
        commits.setdefault(tuple(ev["packed"]), []).append(ev)
    prev = ""
    for events in commits.values():
        for ev in events:
            ev.pop("packed_json", None)
            if ev["type"] == "tool_succeeded":
                ev["data_json"] = encode_data(dict(ev["data"], output={"ok": True, "id": "999"}))
        digest = seal_commit(events, prev)
        db.execute("UPDATE flowctl_events SET data = ?, prev_hash = ?, hash = ? WHERE run_id = ? AND seq = ?",
                   (events[-1]["packed_json"], prev, digest, paused.run_id, events[-1]["seq"]))
        prev = digest
    db.execute("UPDATE flowctl_steps SET output = ? WHERE run_id = ?", (json.dumps({"ok": True, "id": "999"}), paused.run_id))
    db.execute("UPDATE flowctl_runs SET last_hash = ?, seal = ? WHERE id = ?",
               (prev, run_seal(row["id"], row["last_seq"], prev, row["status"], row["error"], encode_data(row["cursor"]),
                         row_identity(row)),
                row["id"]))
    db.commit()
    assert _cli(["audit", "verify", paused.run_id], h.root, tmp_path).returncode == 0  # re-hashed: consistent
    verify = _cli(["audit", "verify", paused.run_id, "--expect-head", anchored], h.root, tmp_path)
    assert verify.returncode == 1 and "rewritten" in verify.stderr


def test_a_store_of_schema_3_is_upgraded_and_its_paused_run_still_resumes(tmp_path):
    h, paused = _paused(tmp_path)
    h.store.close()
    db = _db(tmp_path)
    db.execute("ALTER TABLE flowctl_runs DROP COLUMN seal")
    db.execute("UPDATE flowctl_meta SET value = '3' WHERE key = 'schema_version'")
    db.commit()
    fresh = Harness(h.root, store=sqlite_store(tmp_path))
    assert fresh.store.get_run(paused.run_id)["seal"]  # sealed as it stood by the upgrade
    done = fresh.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    assert done.status == "succeeded"
    assert _cli(["audit", "verify", paused.run_id], h.root, tmp_path).returncode == 0


def test_checkpoint_forgery_a_worker_does_not_drive_a_forged_queued_run(tmp_path):
    from flowctl.workers.worker import Worker, enqueue

    root = build(tmp_path, FLOW, TOOLS)
    h = Harness(root, store=sqlite_store(tmp_path))
    run_id = enqueue(h.engine, "f")
    _forge_cursor(tmp_path, run_id, lambda c: c.update(state="approve"))  # skip the charge's gate and record
    logged = []
    stats = Worker(h.project, sqlite_store(tmp_path), max_runs=1, poll=0.05, lease=5.0, listen=False,
                   log=lambda event, fields: logged.append((event, fields))).run()
    assert stats["error"] == 1 and stats.get("succeeded", 0) == 0 and stats.get("paused", 0) == 0
    assert any("RecordTampered" in (f.get("detail") or "") for e, f in logged if e == "error")
    assert h.store.get_run(run_id)["last_seq"] == 1  # nothing was appended to its log


def test_checkpoint_forgery_is_refused_on_postgresql_too(tmp_path, pg_url):
    """The seal rides in the hot path's one statement per step (store_hot.py) on PostgreSQL."""
    import psycopg

    from flowctl.store.sql import open_store

    root = build(tmp_path, FLOW, TOOLS)
    h = Harness(root, store=open_store(pg_url))
    paused = h.run()
    assert paused.status == "paused"
    assert _cli_pg(["audit", "verify", paused.run_id], root, pg_url).returncode == 0
    with psycopg.connect("postgresql://" + pg_url.split("://", 1)[1], autocommit=True) as conn:
        conn.execute("UPDATE flowctl_runs SET cursor = replace(cursor, %s, %s) WHERE id = %s",
                     ('"state":"approve"', '"state":"done"', paused.run_id))
    with pytest.raises(RecordTampered):
        Harness(root, store=open_store(pg_url)).engine.resume(paused.run_id, token=paused.review["token"],
                                                             decision="approve")
    assert _cli_pg(["audit", "verify", paused.run_id], root, pg_url).returncode == 1


def _cli_pg(args, root, url):
    return subprocess.run([FLOWCTL_EXE, *args, "--db", url], cwd=root, capture_output=True, text=True, timeout=120)


def test_step_records_whose_values_the_log_redacted_still_verify(tmp_path):
    """A sensitive field of another contract in the flow is redacted in the events but not in the
    step record: that is not a forgery."""
    tools = TOOLS + "\ndef look(input, call):\n    return {'x': 1}\n"
    files = {**effect_contract("pay", "pay"), **allow_all("pay"), **contract("look", "look", extra="sensitive: [amount]\n"),
             **task("charge", "pay@1.0.0", extra="input: {id: \"'1'\", amount: input.amount}\n"), **task("peek", "look@1.0.0"),
             "transitions/f.yaml": "flow: f\nstart: charge\ntransitions:\n  - {from: charge, to: peek}\n  - {from: peek, to: done}\n"}
    h = Harness(build(tmp_path, files, tools), store=sqlite_store(tmp_path))
    result = h.run(input={"amount": 5})
    assert result.status == "succeeded"
    assert _cli(["audit", "verify", result.run_id], h.root, tmp_path).returncode == 0


def test_child_output_forgery_a_parent_never_takes_a_forged_childs_outcome(tmp_path):
    # the parent reads a finished child's row for its response: that row must be what the child sealed
    from flowctl.engine import fanout

    files = dict(FLOW, **{"states/sub.yaml": "id: sub\ntype: subflow\nflow: f\n",
                          "transitions/parent.yaml": "flow: parent\nstart: sub\ntransitions:\n  - {from: sub, to: done}\n"})
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    child = h.run("f")
    done = h.engine.resume(child.run_id, token=child.review["token"], decision="approve")
    assert done.status == "succeeded"
    db = _db(tmp_path)
    db.execute("UPDATE flowctl_runs SET output = '{\"amount\": 9}' WHERE id = ?", (child.run_id,))
    db.commit()
    fresh = Harness(h.root, store=sqlite_store(tmp_path))
    row = fresh.store.get_run(child.run_id)
    with pytest.raises(RecordTampered):
        fanout.trusted_result(fresh.engine, row)


def test_a_version_row_set_back_does_not_get_forged_runs_resealed(tmp_path):
    # one UPDATE of flowctl_meta must not make the upgrade re-seal an edited checkpoint as it stands
    h, paused = _paused(tmp_path)
    h.store.close()
    _forge_cursor(tmp_path, paused.run_id, lambda c: c.update(step=c["step"] + 1))
    db = _db(tmp_path)
    db.execute("UPDATE flowctl_meta SET value = '3' WHERE key = 'schema_version'")
    db.commit()
    seal_before = db.execute("SELECT seal FROM flowctl_runs WHERE id = ?", (paused.run_id,)).fetchone()[0]
    with pytest.raises(RecordTampered, match="the row was set back"):
        sqlite_store(tmp_path)
    r = _cli(["resume", paused.run_id, "--token", paused.review["token"], "--decision", "approve"], h.root, tmp_path)
    assert r.returncode == 2 and "RECORD_TAMPERED" in r.stderr and "Traceback" not in r.stderr, r.stderr
    db = _db(tmp_path)
    assert db.execute("SELECT seal FROM flowctl_runs WHERE id = ?", (paused.run_id,)).fetchone()[0] == seal_before
    assert db.execute("SELECT value FROM flowctl_meta WHERE key = 'schema_version'").fetchone()[0] == "3"  # left as is


def test_an_unsealed_finished_child_whose_log_disagrees_is_not_taken_by_its_parent(tmp_path):
    # a row without a seal passes only as one that ended before seals existed: its own log must end so
    from flowctl.engine import fanout

    files = dict(FLOW, **{"states/sub.yaml": "id: sub\ntype: subflow\nflow: f\n",
                          "transitions/parent.yaml": "flow: parent\nstart: sub\ntransitions:\n  - {from: sub, to: done}\n"})
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    parent = h.run("parent")
    [child] = h.store.list_runs(parent_id=parent.run_id, limit=0)
    assert child["status"] == "paused"
    db = _db(tmp_path)
    db.execute("UPDATE flowctl_runs SET status = 'succeeded', seal = NULL, output = '{\"amount\": 7}' WHERE id = ?",
               (child["id"],))
    db.commit()
    fresh = Harness(h.root, store=sqlite_store(tmp_path))
    with pytest.raises(RecordTampered, match="unsealed finished child whose log disagrees"):
        fanout.trusted_result(fresh.engine, fresh.store.get_run(child["id"]))
    with pytest.raises(RecordTampered):
        fresh.engine.resume(parent.run_id)
    assert [x for x in fresh.ledger() if x[0] == "pay"] == [("pay", "1")]  # only the child's own charge, once


@pytest.mark.parametrize("edit", [{"step": "x"}, {"visits": None}, {"state": "nonexistent"}, {"saga": "nothing"}])
def test_a_resealed_checkpoint_of_the_wrong_shape_is_refused_with_nothing_written(tmp_path, edit):
    # someone who re-seals the row (the formulas are public) still cannot feed the engine a
    # checkpoint it never writes: a located refusal, not a crash or a failed run written in its place
    h, paused = _paused(tmp_path)
    row = h.store.get_run(paused.run_id)
    cursor = dict(row["cursor"], **edit)
    db = _db(tmp_path)
    db.execute("UPDATE flowctl_runs SET cursor = ?, seal = ? WHERE id = ?",
               (json.dumps(cursor), run_seal(row["id"], row["last_seq"], row["last_hash"], row["status"], row["error"],
                                             encode_data(cursor), row_identity(row)), row["id"]))
    db.commit()
    before = db.execute("SELECT status, last_seq, cursor FROM flowctl_runs WHERE id = ?", (row["id"],)).fetchone()
    r = _cli(["resume", paused.run_id, "--token", paused.review["token"], "--decision", "approve"], h.root, tmp_path)
    assert r.returncode == 2 and "RECORD_TAMPERED" in r.stderr and "internal error" not in r.stderr, r.stderr
    assert _db(tmp_path).execute("SELECT status, last_seq, cursor FROM flowctl_runs WHERE id = ?",
                                 (row["id"],)).fetchone() == before
