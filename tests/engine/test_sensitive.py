"""Secrets never reach the store in plaintext (flowctl.engine.sensitive, flowctl.store.keyring).

A contract's ``sensitive`` fields are redacted by value wherever the value goes: each path below
carries the card number somewhere a by-name redaction misses, and the test greps the raw database
files (SQLite: main, -wal, -shm; PostgreSQL: every table read as text, and the relation files on
disk) for it after the run.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from support.enginekit import Harness, build
from flowctl.store.audit import REDACTED, verify_run
from flowctl.errors import SecretKeyError
from flowctl.store.sql import open_store
from support.pg import pg_url  # noqa: F401 - fixture

CARD = "4111111111111111"
CARD_CONTRACT = "sensitive: [card_number]\n"

TOOLS = """
LEDGER = []

def card(input, call):
    return {"ok": True, "echo": input.get("note", "")}

def plain(input, call):
    return '{"shipping": "standard", "eta_days": 3}'

def fail_card(input, call):
    raise ValueError(f"card {input['card_number']} is on the watch list")

def strict(input, call):
    return {}

def charge(input, call):
    LEDGER.append(("charge", call.idempotency_key))
    return {"charged": input["amount"], "last4": input["card_number"][-4:]}

def charge_other(input, call):  # another function: the gate follows the function, not the contract id
    return charge(input, call)

def verify_charge(input, output, call):
    return True

def undo_charge(input, output, call):
    LEDGER.append("undo")

def page(input, call):
    LEDGER.append(("page", input["token"]))
    return {"sent": True}

def remember(input, call):
    LEDGER.append(("remember", input["note"]))
    return {}
"""


def _contract(tool_id, fn, extra="", effect=False):
    body = f"id: {tool_id}\nversion: 1.0.0\nentrypoint: tk:{fn}\n"
    if effect:
        body += ("verify: tk:verify_charge\ncompensate: tk:undo_charge\n"
                 "side_effects:\n  - {type: payment, target: card}\n")
    return {f"contracts/{tool_id}.v1.0.0.yaml": body + extra}


def _task(sid, tool, extra=""):
    return {f"states/{sid}.yaml": f"id: {sid}\ntype: task\ntool: {tool}@^1\ninput: {{card_number: input.card_number, "
                                  f"note: input.note, amount: '`5`'}}\n{extra}"}


def _flow(name, start, moves):
    return {f"transitions/{name}.yaml": f"flow: {name}\nstart: {start}\ntransitions:\n" +
            "".join(f"  - {m}\n" for m in moves)}


FILES = {
    **_contract("card", "card", CARD_CONTRACT),
    **_contract("plain", "plain"),
    **_contract("fail_card", "fail_card", CARD_CONTRACT),
    **_contract("strict", "strict", CARD_CONTRACT + "input_schema:\n  type: object\n  properties:\n"
                                                    "    card_number: {type: string, maxLength: 4}\n"),
    **_contract("charge", "charge", CARD_CONTRACT + "idempotency_key: input.card_number\n", effect=True),
    **_contract("charge_denied", "charge_other", CARD_CONTRACT, effect=True),
    "policies/allow_charge.yaml": "policy: allow_charge\napplies_to: [charge]\nallow: []\n",
    "policies/deny_charge.yaml": ("policy: deny_charge\napplies_to: [charge_denied]\nallow:\n"
                                  "  - {field: input.card_number, in: ['0000000000000000']}\n"),
    **_task("look", "card"),
    **_task("ship", "plain"),
    **_task("boom", "fail_card", "retry:\n  - {errors: [ValueError], max_attempts: 2, interval: 1s}\n"),
    **_task("strict_look", "strict"),
    **_task("deny", "charge_denied"),
    **_task("pay", "charge"),
    "states/route.yaml": "id: route\ntype: choice\n",
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\nshow: {card: input.card_number}\n",
    "states/sub.yaml": "id: sub\ntype: subflow\nflow: payload\ninput: {card_number: input.card_number, note: input.note}\n",
    # one flow per path a card number could take into the store
    **_flow("payload", "look", ["{from: look, to: done}"]),                     # event payloads, under another name
    **_flow("tool_error", "look", ["{from: look, to: boom}", "{from: boom, to: done}"]),  # a tool's exception text
    **_flow("schema", "look", ["{from: look, to: strict_look}", "{from: strict_look, to: done}"]),  # SchemaMismatch
    **_flow("policy", "look", ["{from: look, to: deny}", "{from: deny, to: done}"]),  # PolicyDenied reason
    **_flow("idempotency", "look", ["{from: look, to: pay}", "{from: pay, to: done}"]),  # idempotency key
    **_flow("condition", "look", ["{from: look, to: route}", "{from: route, to: done, when: input.card_number}"]),
    **_flow("show", "look", ["{from: look, to: ask}", "{from: ask, to: done}"]),  # review show, another name
    **_flow("parent", "sub", ["{from: sub, to: done}"]),  # only the child flow uses the contract
    # only the parent flow uses the contract; its child gets the card in its input
    "states/sub_plain.yaml": "id: sub_plain\ntype: subflow\nflow: plain_child\ninput: {card_number: input.card_number, note: input.note}\n",
    **_flow("inherit", "look", ["{from: look, to: sub_plain}", "{from: sub_plain, to: done}"]),
    **_flow("plain_child", "ship", ["{from: ship, to: done}"]),
    **_flow("mixed", "ship", ["{from: ship, to: look}", "{from: look, to: done}"]),  # raw kept for `plain`
    # a child whose output carries the card under another name, and a parent that uses it
    **_contract("remember", "remember"),
    "states/sub_out.yaml": "id: sub_out\ntype: subflow\nflow: child_out\ninput: {card_number: input.card_number, note: input.note}\n",
    "states/keep.yaml": "id: keep\ntype: task\ntool: remember@^1\ninput: {note: context.got}\n",
    **_flow("child_out", "look", ["{from: look, to: done, set: {echo: response.echo}}"]),
    **_flow("parent_out", "sub_out", ["{from: sub_out, to: keep, set: {got: response.echo}}", "{from: keep, to: done}"]),
}
FILES.update({
    **_contract("page", "page"),
    "states/ask_paged.yaml": ("id: ask_paged\ntype: review\ndecisions: [approve, reject]\n"
                              "show: {card: input.card_number}\nnotify: page@^1\n"),
    **_flow("paged", "look", ["{from: look, to: ask_paged}", "{from: ask_paged, to: done}"]),
})


def test_a_review_token_sent_by_notify_in_a_run_with_secrets_is_never_stored(tmp_path, no_env_key):
    # the notify tool gets the token; every record of its call keeps the token redacted by name
    db = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{db}")
    h = Harness(build(tmp_path, FILES, TOOLS), store=store)
    paused = h.run("paged", dict(INPUT))
    assert paused.status == "paused"
    token = paused.review["token"]
    assert any(entry == ("page", token) for entry in h.ledger())
    assert token.encode() not in _sqlite_bytes(db)
    h.engine.resume(paused.run_id, token=token, decision="approve")
    assert token.encode() not in _sqlite_bytes(db) and CARD.encode() not in _sqlite_bytes(db)
    store.close()


PATHS = ["payload", "tool_error", "schema", "policy", "idempotency", "condition", "show", "parent", "inherit"]
INPUT = {"card_number": CARD, "note": f"pay with card {CARD} today"}


def _sqlite_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists())


def _drive(h, flow):
    """Run ``flow`` to its end (a review is approved) and return the run id."""
    result = h.run(flow, dict(INPUT))
    if result.status == "paused":
        result = h.engine.resume(result.run_id, token=result.review["token"], decision="approve")
    assert result.status in ("succeeded", "failed"), result
    return result.run_id


@pytest.fixture
def no_env_key(monkeypatch):
    monkeypatch.delenv("FLOWCTL_SECRET_KEY", raising=False)


@pytest.mark.parametrize("path", PATHS)
def test_no_sensitive_value_reaches_the_sqlite_files(tmp_path, path, no_env_key):
    db = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{db}")
    h = Harness(build(tmp_path, FILES, TOOLS), store=store)
    run_id = _drive(h, path)
    raw = _sqlite_bytes(db)
    assert b"***redacted***" in raw  # the control: the grep does see what the run stored
    assert CARD.encode() not in raw, f"{path}: the card number is in the database files"
    # what the user relies on is still there: the run's record, the chain, the outcome
    events = store.events(run_id)
    assert verify_run(store.get_run(run_id), events) == []
    text = json.dumps([e["data"] for e in events])
    assert REDACTED in text
    store.close()
    assert CARD.encode() not in _sqlite_bytes(db)


def test_redaction_by_value_replaces_the_value_and_keeps_the_rest_of_each_record(tmp_path, no_env_key):
    # where each path puts the card number: there, and only the value, is redacted
    def events(path):
        h = Harness(build(tmp_path, FILES, TOOLS, name=path))
        _drive(h, path)
        return h.events

    def first(evs, type_, state=None):
        return next(e["data"] for e in evs if e["type"] == type_ and (state is None or e["state"] == state))

    masked = f"pay with card {REDACTED} today"
    assert first(events("payload"), "tool_succeeded")["output"] == {"ok": True, "echo": masked}
    evs = events("tool_error")
    assert first(evs, "tool_failed", "boom")["message"] == f"card {REDACTED} is on the watch list"
    assert first(evs, "retry_scheduled")["message"] == f"card {REDACTED} is on the watch list"
    assert REDACTED in first(events("schema"), "error_caught")["error"]["message"]
    reason = first(events("policy"), "policy_decided")["reason"]
    assert reason == f'input.card_number is "{REDACTED}", not one of ["0000000000000000"]'
    assert first(events("condition"), "transition_taken", "route")["conditions"] == [
        {"when": "input.card_number", "result": REDACTED}]
    assert first(events("show"), "review_requested")["show"] == {"card": REDACTED}
    assert first(events("parent"), "run_started")["input"] == {"card_number": REDACTED, "note": masked}


def test_a_live_run_row_is_sealed_and_the_plaintext_is_dropped_when_it_ends(tmp_path, no_env_key):
    db = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{db}")
    h = Harness(build(tmp_path, FILES, TOOLS), store=store)
    paused = h.run("show", dict(INPUT))
    assert paused.status == "paused"
    raw = _raw_run(db, paused.run_id)
    assert all(raw[c].startswith("fcenc1:") for c in ("input", "params", "cursor"))
    assert CARD.encode() not in _sqlite_bytes(db)
    row = store.get_run(paused.run_id)  # the run still has its values while it is live
    assert row["input"] == INPUT and row["cursor"]["pending"]["show"] == {"card": CARD}
    h.engine.resume(paused.run_id, token=paused.review["token"], decision="approve")
    raw = _raw_run(db, paused.run_id)
    assert not any((raw[c] or "").startswith("fcenc1:") for c in ("input", "params", "cursor"))
    ended = store.get_run(paused.run_id)
    assert ended["input"] == {"card_number": REDACTED, "note": f"pay with card {REDACTED} today"}
    assert "secrets" not in ended["cursor"]


def _raw_run(db, run_id) -> dict:
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return dict(conn.execute("SELECT * FROM flowctl_runs WHERE id = ?", (run_id,)).fetchone())


def test_raw_output_is_kept_for_tools_without_sensitive_fields(tmp_path, no_env_key):
    h = Harness(build(tmp_path, FILES, TOOLS), store=open_store(f"sqlite:///{tmp_path}/flowctl.db"))
    run_id = h.run("mixed", dict(INPUT)).run_id
    raws = {e["data"]["tool"]: e["data"].get("raw", "absent") for e in h.store.events(run_id)
            if e["type"] == "tool_succeeded"}
    assert raws == {"plain@1.0.0": '{"shipping": "standard", "eta_days": 3}', "card@1.0.0": "absent"}


def test_idempotency_keys_are_stored_as_keyed_digests_and_tools_get_the_real_key(tmp_path, no_env_key):
    store = open_store(f"sqlite:///{tmp_path}/flowctl.db")
    h = Harness(build(tmp_path, FILES, TOOLS), store=store)
    run_id = h.run("idempotency", dict(INPUT)).run_id
    assert ("charge", CARD) in h.ledger()
    (invoked,) = [e for e in store.events(run_id) if e["type"] == "tool_invoked" and e["data"]["tool"] == "charge@1.0.0"]
    keys = {s["idempotency_key"] for s in store.steps(run_id)}
    assert keys == {invoked["data"]["idempotency_key"]} and next(iter(keys)).startswith("hmac:")


def test_the_sqlite_key_file_is_made_once_beside_the_store_readable_by_its_owner_only(tmp_path, no_env_key):
    db = tmp_path / "flowctl.db"
    h = Harness(build(tmp_path, FILES, TOOLS), store=open_store(f"sqlite:///{db}"))
    h.run("payload", dict(INPUT))
    key = Path(f"{db}.key")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    first = key.read_text()
    h.run("payload", dict(INPUT))
    assert key.read_text() == first
    key.chmod(0o644)
    other = Harness(build(tmp_path, FILES, TOOLS, name="q"), store=open_store(f"sqlite:///{db}"))
    with pytest.raises(SecretKeyError, match="can be read by others"):
        other.run("payload", dict(INPUT))


def test_flows_without_sensitive_fields_are_not_sealed_and_need_no_key(tmp_path, no_env_key):
    db = tmp_path / "flowctl.db"
    files = {k: v for k, v in FILES.items() if "card" not in k and "charge" not in k and "strict" not in k}
    files.update(_flow("plain_only", "ship", ["{from: ship, to: done}"]))
    files = {k: v for k, v in files.items() if not k.startswith("states/") or k in ("states/ship.yaml",)}
    files = {k: v for k, v in files.items() if not k.startswith("transitions/") or k == "transitions/plain_only.yaml"}
    h = Harness(build(tmp_path, files, TOOLS), store=open_store(f"sqlite:///{db}"))
    run_id = h.run("plain_only", dict(INPUT)).run_id
    assert not Path(f"{db}.key").exists()
    assert json.loads(_raw_run(db, run_id)["input"]) == INPUT  # as before: readable JSON


def test_a_row_written_before_sealing_existed_still_loads_and_resumes(tmp_path, no_env_key):
    import sqlite3

    db = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{db}")
    h = Harness(build(tmp_path, FILES, TOOLS), store=store)
    paused = h.run("show", dict(INPUT))
    row = store.get_run(paused.run_id)
    cursor = dict(row["cursor"])
    cursor.pop("secrets")  # as an older flowctl wrote it: plaintext JSON, no secrets list
    store.close()
    with sqlite3.connect(db) as conn:  # a store of schema 3: no seal column either
        conn.execute("UPDATE flowctl_runs SET input = ?, params = ?, cursor = ? WHERE id = ?",
                     (json.dumps(row["input"]), json.dumps(row["params"]), json.dumps(cursor), paused.run_id))
        conn.execute("ALTER TABLE flowctl_runs DROP COLUMN seal")
        conn.execute("UPDATE flowctl_meta SET value = '3' WHERE key = 'schema_version'")
    store = open_store(f"sqlite:///{db}")  # upgraded in place: the live run is sealed as it stands
    h = Harness(h.root, store=store)
    token = h.engine.reissue_token(paused.run_id)
    done = h.engine.resume(paused.run_id, token=token, decision="approve")
    assert done.status == "succeeded"
    assert CARD not in json.dumps(store.get_run(paused.run_id)["input"])


def test_key_rotation_new_key_first_rekey_then_the_old_key_can_go(tmp_path, monkeypatch):
    from flowctl.store.keyring import new_key

    old, new = new_key(), new_key()
    monkeypatch.setenv("FLOWCTL_SECRET_KEY", old)
    db = tmp_path / "flowctl.db"
    h = Harness(build(tmp_path, FILES, TOOLS), store=open_store(f"sqlite:///{db}"))
    paused = h.run("show", dict(INPUT))
    monkeypatch.setenv("FLOWCTL_SECRET_KEY", f"{new},{old}")
    store = open_store(f"sqlite:///{db}")
    assert store.get_run(paused.run_id)["input"] == INPUT  # the old key still opens it
    assert store.rekey() == {"resealed": 3, "current": 0}
    monkeypatch.setenv("FLOWCTL_SECRET_KEY", new)
    store = open_store(f"sqlite:///{db}")
    assert store.get_run(paused.run_id)["input"] == INPUT
    monkeypatch.setenv("FLOWCTL_SECRET_KEY", old)
    with pytest.raises(SecretKeyError, match="no key"):
        open_store(f"sqlite:///{db}").get_run(paused.run_id)


def test_a_sealed_value_moved_to_another_run_does_not_open(tmp_path, no_env_key):
    import sqlite3

    db = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{db}")
    h = Harness(build(tmp_path, FILES, TOOLS), store=store)
    a, b = h.run("show", dict(INPUT)), h.run("show", {"card_number": "5500000000000004", "note": "n"})
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE flowctl_runs SET input = (SELECT input FROM flowctl_runs WHERE id = ?) WHERE id = ?",
                     (a.run_id, b.run_id))
    with pytest.raises(SecretKeyError, match="altered or moved"):
        store.get_run(b.run_id)


def _worker_until_done(project, store, run_id, timeout=60):
    import threading
    import time

    from flowctl.workers.worker import Worker

    worker = Worker(project, store, concurrency=1, lease=5.0, poll=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while store.get_run(run_id)["status"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, "the run did not end"
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(30)


@pytest.mark.parametrize("mode", ["threads", "workers"])
def test_a_child_hands_its_output_to_its_parent_and_both_are_redacted_when_the_parent_ends(tmp_path, mode, no_env_key):
    from flowctl.workers.worker import enqueue

    db = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{db}")
    h = Harness(build(tmp_path, FILES, TOOLS), store=store)
    if mode == "threads":
        run_id = h.run("parent_out", dict(INPUT)).run_id
    else:
        run_id = enqueue(h.engine, "parent_out", dict(INPUT))
        _worker_until_done(h.project, store, run_id)
    assert store.get_run(run_id)["status"] == "succeeded"
    assert ("remember", INPUT["note"]) in h.ledger()  # the parent got the child's real output
    (child,) = store.list_runs(parent_id=run_id, limit=0)
    assert child["output"] == {"echo": f"pay with card {REDACTED} today"}
    assert "secrets" not in child["cursor"]
    assert CARD.encode() not in _sqlite_bytes(db)
    for rid in (run_id, child["id"]):
        assert verify_run(store.get_run(rid), store.events(rid)) == []


def test_secrets_rotate_command_reseals_under_the_first_key(tmp_path, monkeypatch):
    import subprocess

    from flowctl.store.keyring import new_key
    from support.helpers import FLOWCTL_EXE

    old, new = new_key(), new_key()
    monkeypatch.setenv("FLOWCTL_SECRET_KEY", old)
    root = build(tmp_path, FILES, TOOLS)
    db = tmp_path / "flowctl.db"
    paused = Harness(root, store=open_store(f"sqlite:///{db}")).run("show", dict(INPUT))
    env = dict(os.environ, FLOWCTL_SECRET_KEY=f"{new},{old}")
    r = subprocess.run([FLOWCTL_EXE, "secrets", "rotate", "--db", f"sqlite:///{db}"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("3 sealed field(s) re-sealed")
    raw = _raw_run(db, paused.run_id)
    from flowctl.store.keyring import key_id
    import base64

    kid = key_id(base64.urlsafe_b64decode(new))
    assert all(raw[c].startswith(f"fcenc1:{kid}:") for c in ("input", "params", "cursor"))


# ------------------------------------------------------------------------------ PostgreSQL
def _pg_raw(url) -> tuple:
    """``(every flowctl table read as text, the table, TOAST and index files on disk)``."""
    import psycopg

    dsn = "postgresql://" + url.split("://", 1)[1]
    out, files = [], []
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'flowctl_%'")]
        for t in tables:
            for row in conn.execute(f"SELECT t::text FROM {t} t"):
                out.append(row[0].encode())
        conn.execute("CHECKPOINT")  # the pages on disk hold what the buffers held
        rels = conn.execute("SELECT pg_relation_filepath(c.oid) FROM pg_class c WHERE c.relname LIKE 'flowctl_%' "
                            "OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE relname LIKE 'flowctl_%')").fetchall()
        for (path,) in rels:
            if path:
                try:
                    files.append(bytes(conn.execute("SELECT pg_read_binary_file(%s)", (path,)).fetchone()[0]))
                except psycopg.Error:
                    pytest.skip("cannot read relation files (not a superuser on this server)")
    return b"\n".join(out), b"".join(files)


@pytest.mark.parametrize("path", PATHS)
def test_no_sensitive_value_reaches_the_postgresql_tables(tmp_path, pg_url, path):  # noqa: F811
    store = open_store(pg_url)
    try:
        h = Harness(build(tmp_path, FILES, TOOLS), store=store)
        run_id = _drive(h, path)
        rows, files = _pg_raw(pg_url)
        assert b"***redacted***" in rows and b"***redacted***" in files  # the control: both were read
        assert CARD.encode() not in rows, f"{path}: the card number is in the PostgreSQL tables"
        assert CARD.encode() not in files, f"{path}: the card number is in the PostgreSQL relation files"
        assert verify_run(store.get_run(run_id), store.events(run_id)) == []
    finally:
        store.close()


def test_postgresql_without_a_key_refuses_a_sensitive_run_before_it_starts(tmp_path, pg_url, monkeypatch):  # noqa: F811
    monkeypatch.delenv("FLOWCTL_SECRET_KEY")
    store = open_store(pg_url)
    try:
        h = Harness(build(tmp_path, FILES, TOOLS), store=store)
        with pytest.raises(SecretKeyError, match="FLOWCTL_SECRET_KEY is not set") as info:
            h.run("payload", dict(INPUT))
        assert info.value.code == "SECRET_KEY"
        assert store.list_runs(limit=0) == []
    finally:
        store.close()


def test_the_cli_reports_a_missing_postgresql_key_with_its_code_and_no_traceback(tmp_path, pg_url, monkeypatch):  # noqa: F811
    import subprocess

    from support.helpers import FLOWCTL_EXE

    root = build(tmp_path, FILES, TOOLS)
    env = dict(os.environ)
    env.pop("FLOWCTL_SECRET_KEY", None)
    r = subprocess.run([FLOWCTL_EXE, "run", "payload", "--input", json.dumps(INPUT), "--db", pg_url],
                       cwd=root, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "[SECRET_KEY]" in r.stderr and "Traceback" not in r.stderr


def test_a_worker_without_the_postgresql_key_refuses_to_start(tmp_path, pg_url, monkeypatch):  # noqa: F811
    import subprocess

    from support.helpers import FLOWCTL_EXE

    root = build(tmp_path, FILES, TOOLS)
    env = dict(os.environ)
    env.pop("FLOWCTL_SECRET_KEY", None)
    r = subprocess.run([FLOWCTL_EXE, "worker", "--db", pg_url, "--max-runs", "1"], cwd=root, capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "[SECRET_KEY]" in r.stderr and "Traceback" not in r.stderr


def test_a_finished_sensitive_run_replays_on_its_redacted_record_without_false_differences(tmp_path, no_env_key):
    import flowctl
    from flowctl.testing.replay import load_recording, replay

    store = open_store(f"sqlite:///{tmp_path}/flowctl.db")
    root = build(tmp_path, FILES, TOOLS)
    run_id = Harness(root, store=store).run("payload", dict(INPUT)).run_id
    result = replay(load_recording(store, run_id), flowctl.load_project(root))
    assert not result.diverged, result.text()
    assert not [n for n in result.notes if "another input than recorded" in n], result.notes


def test_a_lost_key_file_is_named_and_never_silently_replaced(tmp_path, no_env_key):
    db = tmp_path / "flowctl.db"
    paused = Harness(build(tmp_path, FILES, TOOLS), store=open_store(f"sqlite:///{db}")).run("show", dict(INPUT))
    Path(f"{db}.key").unlink()
    with pytest.raises(SecretKeyError, match="no key file") as info:
        open_store(f"sqlite:///{db}").get_run(paused.run_id)
    assert "restore" in info.value.hint
    assert not Path(f"{db}.key").exists()


@pytest.mark.parametrize("hang", ["after:second", "before:second"])
def test_a_sealed_run_killed_inside_a_side_effect_resumes_once_and_leaves_no_plaintext(tmp_path, hang, no_env_key):
    import signal
    import sqlite3
    import subprocess
    import textwrap
    import time

    import test_crash
    from support.helpers import FLOWCTL_EXE, write_project

    files = dict(test_crash.FILES)
    files["contracts/charge.v1.0.0.yaml"] = textwrap.dedent(files["contracts/charge.v1.0.0.yaml"]).strip() + "\nsensitive: [card]\n"
    for leg in ("first", "second"):
        files[f"states/{leg}.yaml"] = files[f"states/{leg}.yaml"].replace("{leg:", "{card: input.card, leg:")
    root = write_project(tmp_path / "proj", files)
    env = test_crash._env(tmp_path, hang)
    db = tmp_path / "flowctl.db"
    url = f"sqlite:///{db}"
    proc = subprocess.Popen([FLOWCTL_EXE, "run", "pay", "--db", url, "-q", "--input", json.dumps({"card": CARD})],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "hung").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the tool never reached the crash point"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert CARD.encode() not in _sqlite_bytes(db)  # killed mid-step: the inflight call is sealed too
    (run,) = json.loads(test_crash._flowctl(["runs", "--db", url, "--format", "json"], root, env).stdout)
    resumed = test_crash._flowctl(["resume", run["id"], "--db", url], root, env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    bank = sqlite3.connect(tmp_path / "bank.db")
    applied = [k for (k,) in bank.execute("SELECT key FROM applications ORDER BY rowid")]
    assert applied == [f"charge-{run['id']}-first", f"charge-{run['id']}-second"]  # each exactly once
    assert test_crash._flowctl(["audit", "verify", run["id"], "--db", url], root, env).returncode == 0
    assert CARD.encode() not in _sqlite_bytes(db)


def test_redaction_by_value_covers_numbers_escaped_forms_and_keys_and_short_values_whole_or_quoted():
    from flowctl.engine.sensitive import Secrets

    s = Secrets(["pin", "card.number", "token"])
    s.learn({"pin": "42", "card": {"number": 4111111111111111}, "token": 'to"k\\en'})
    got = s.scrub({
        "a": "pin 42 is short",                     # under 4 characters: a whole value, or quoted in text
        "b": "42", "q": "at /pin: '42' is too short", "r": 'got "42"',  # a schema's or policy's reason
        "c": 4111111111111111, "d": "4111111111111111", "e": "no. 4111111111111111 ok",
        "f": 'say "to\\"k\\\\en"',                  # the JSON-escaped form, as in a raw output text
        "g": {"4111111111111111": True},            # a key
        "h": {"number": "x"}, "card": {"number": "y"},  # a dotted path matches from the top only
        "i": [True, False, None, 1],
    })
    assert got == {"a": "pin 42 is short", "b": REDACTED, "q": f"at /pin: {REDACTED} is too short",
                   "r": f"got {REDACTED}", "c": REDACTED, "d": REDACTED, "e": f"no. {REDACTED} ok",
                   "f": f'say "{REDACTED}"', "g": {REDACTED: True}, "h": {"number": "x"},
                   "card": {"number": REDACTED}, "i": [True, False, None, 1]}
    same = {"x": ["nothing", {"here": 1}]}
    assert s.scrub(same) is same  # nothing to redact: nothing copied


def test_a_child_that_ends_after_its_parent_ended_is_redacted_at_once(tmp_path, no_env_key):
    import sqlite3

    db = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{db}")
    files = dict(FILES, **_flow("asks", "sub_ask", ["{from: sub_ask, to: done}"]),
                 **{"states/sub_ask.yaml": "id: sub_ask\ntype: subflow\nflow: show\n"
                                           "input: {card_number: input.card_number, note: input.note}\n"})
    h = Harness(build(tmp_path, files, TOOLS), store=store)
    parked = h.run("asks", dict(INPUT))
    (child,) = store.list_runs(parent_id=parked.run_id, limit=0)
    assert child["status"] == "paused"
    with sqlite3.connect(db) as conn:  # the parent ended meanwhile (as a worker's parent may, children left running)
        conn.execute("UPDATE flowctl_runs SET status = 'failed' WHERE id = ?", (parked.run_id,))
    token = h.engine.reissue_token(child["id"])
    h.engine.resume(child["id"], token=token, decision="approve")
    assert store.get_run(child["id"])["status"] == "succeeded"
    assert not _raw_run(db, child["id"])["cursor"].startswith("fcenc1:")
    assert CARD.encode() not in _sqlite_bytes(db)


def test_key_rotation_on_postgresql(tmp_path, pg_url, monkeypatch):  # noqa: F811
    from flowctl.store.keyring import new_key

    new = new_key()
    old = os.environ["FLOWCTL_SECRET_KEY"]
    store = open_store(pg_url)
    try:
        paused = Harness(build(tmp_path, FILES, TOOLS), store=store).run("show", dict(INPUT))
    finally:
        store.close()
    monkeypatch.setenv("FLOWCTL_SECRET_KEY", f"{new},{old}")
    store = open_store(pg_url)
    try:
        assert store.rekey() == {"resealed": 3, "current": 0}
        assert store.rekey() == {"resealed": 0, "current": 3}
    finally:
        store.close()
    monkeypatch.setenv("FLOWCTL_SECRET_KEY", new)
    store = open_store(pg_url)
    try:
        assert store.get_run(paused.run_id)["input"] == INPUT
    finally:
        store.close()
