"""Tools of the ``signup`` flow, over a small SQLite database.

Path: ``$ACCOUNTS_DB``, default ``.flowctl/accounts.sqlite`` in the project folder.
Each side-effecting tool has a ``verify`` (did it happen?) and a ``compensate`` (undo it), and is
keyed by ``call.idempotency_key`` so a retried call does nothing twice. Replace these with calls
to your own systems; keep the three functions per side effect.
"""
from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path

from flowctl import ToolError

#: the project folder (this file is orchestration/tools/<package>/<module>.py): the data lives in
#: its .flowctl/, whatever the current folder of the command that runs the tools
PROJECT = Path(__file__).resolve().parents[3]


def _connect() -> sqlite3.Connection:
    path = Path(os.environ.get("ACCOUNTS_DB") or PROJECT / ".flowctl" / "accounts.sqlite")
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS accounts (account_id TEXT PRIMARY KEY, email TEXT UNIQUE,"
                 " plan TEXT, key TEXT UNIQUE, closed INTEGER DEFAULT 0)")
    conn.execute("CREATE TABLE IF NOT EXISTS outbox (message_id TEXT PRIMARY KEY, account_id TEXT,"
                 " key TEXT UNIQUE, recalled INTEGER DEFAULT 0)")
    return conn


def get_account(input: dict, call) -> dict:
    with _connect() as conn:
        row = conn.execute("SELECT account_id, plan FROM accounts WHERE email = ? AND closed = 0",
                           (input["email"],)).fetchone()
    if row is None:
        return {"exists": False, "account_id": None, "plan": None}
    return {"exists": True, "account_id": row[0], "plan": row[1]}


def create_account(input: dict, call) -> dict:
    key = call.idempotency_key
    with _connect() as conn:
        row = conn.execute("SELECT account_id, plan FROM accounts WHERE key = ?", (key,)).fetchone()
        if row is None:
            if conn.execute("SELECT 1 FROM accounts WHERE email = ? AND closed = 0", (input["email"],)).fetchone():
                raise ToolError("Accounts.EmailTaken", f"an account for {input['email']} exists")
            row = (f"acct-{uuid.uuid4().hex[:12]}", input["plan"])
            conn.execute("DELETE FROM accounts WHERE email = ? AND closed = 1", (input["email"],))
            conn.execute("INSERT INTO accounts (account_id, email, plan, key) VALUES (?, ?, ?, ?)",
                         (row[0], input["email"], row[1], key))
    return {"account_id": row[0], "plan": row[1]}


def account_exists(input: dict, output: dict | None, call) -> bool | dict:
    # output is None after a crash or a timeout (the call's answer never came): look the effect up by
    # its idempotency key, and hand its output back so the run can go on with it
    with _connect() as conn:
        row = conn.execute("SELECT account_id, plan FROM accounts WHERE key = ? AND closed = 0",
                           (call.idempotency_key,)).fetchone()
    return {"account_id": row[0], "plan": row[1]} if row is not None else False


def close_account(input: dict, output: dict | None, call) -> None:
    with _connect() as conn:
        conn.execute("UPDATE accounts SET closed = 1 WHERE key = ?", (call.idempotency_key,))


def send_welcome(input: dict, call) -> dict:
    key = call.idempotency_key
    with _connect() as conn:
        row = conn.execute("SELECT message_id FROM outbox WHERE key = ?", (key,)).fetchone()
        if row is None:
            row = (f"<{uuid.uuid4().hex}@example.com>",)
            conn.execute("INSERT INTO outbox (message_id, account_id, key) VALUES (?, ?, ?)",
                         (row[0], input["account_id"], key))
    return {"message_id": row[0]}


def welcome_queued(input: dict, output: dict | None, call) -> bool | dict:
    # output is None after a crash or a timeout: look the message up by its idempotency key
    with _connect() as conn:
        row = conn.execute("SELECT message_id FROM outbox WHERE key = ? AND recalled = 0",
                           (call.idempotency_key,)).fetchone()
    return {"message_id": row[0]} if row is not None else False


def recall_welcome(input: dict, output: dict | None, call) -> None:
    with _connect() as conn:
        conn.execute("UPDATE outbox SET recalled = 1 WHERE key = ?", (call.idempotency_key,))
