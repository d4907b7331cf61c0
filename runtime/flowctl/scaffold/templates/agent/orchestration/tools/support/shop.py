"""Tools of the ``ticket_triage`` flow over a small SQLite shop, seeded on first use.

Path: ``$SHOP_DB``, default ``.flowctl/shop.sqlite`` in the project folder. Seeded orders:
A-1001 (49.90 EUR, delivered), A-1004 (899.00 EUR, delivered: over the refunds policy's limit).
``refund`` is keyed by ``call.idempotency_key``; ``refunded`` is its verify and ``cancel_refund``
its compensation. Replace these with calls to your own systems; keep the three functions.
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

SEED = [("A-1001", "delivered", 4990, "EUR", "P-1001"), ("A-1004", "delivered", 89900, "EUR", "P-1004")]


def _connect() -> sqlite3.Connection:
    path = Path(os.environ.get("SHOP_DB") or PROJECT / ".flowctl" / "shop.sqlite")
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS orders (order_id TEXT PRIMARY KEY, status TEXT, cents INTEGER,"
                 " currency TEXT, payment_id TEXT)")
    conn.execute("CREATE TABLE IF NOT EXISTS refunds (refund_id TEXT PRIMARY KEY, order_id TEXT, key TEXT UNIQUE,"
                 " cents INTEGER, currency TEXT, status TEXT)")
    conn.executemany("INSERT OR IGNORE INTO orders VALUES (?, ?, ?, ?, ?)", SEED)
    return conn


def get_order(input: dict, call) -> dict:
    with _connect() as conn:
        row = conn.execute("SELECT order_id, status, cents, currency, payment_id FROM orders WHERE order_id = ?",
                           (input["order_id"],)).fetchone()
        if row is None:
            raise ToolError("Orders.NotFound", f"no order {input['order_id']!r}")
        refunded = conn.execute("SELECT 1 FROM refunds WHERE order_id = ? AND status = 'refunded'",
                                (row[0],)).fetchone()
    return {"order_id": row[0], "status": row[1], "amount": row[2] / 100, "currency": row[3],
            "payment_id": row[4], "payment_status": "refunded" if refunded else "captured"}


def refund(input: dict, call) -> dict:
    key = call.idempotency_key
    cents = round(input["amount"] * 100)
    with _connect() as conn:
        row = conn.execute("SELECT refund_id, status FROM refunds WHERE key = ?", (key,)).fetchone()
        if row is None:
            order = conn.execute("SELECT cents, currency, payment_id FROM orders WHERE order_id = ?",
                                 (input["order_id"],)).fetchone()
            if order is None or order[2] != input["payment_id"]:
                raise ToolError("Payments.UnknownPayment", f"no payment {input['payment_id']} on {input['order_id']}")
            if cents > order[0] or input["currency"] != order[1]:
                raise ToolError("Payments.OverRefund", "more than was paid, or another currency")
            row = (f"R-{uuid.uuid4().hex[:8]}", "refunded")
            conn.execute("INSERT INTO refunds VALUES (?, ?, ?, ?, ?, 'refunded')",
                         (row[0], input["order_id"], key, cents, input["currency"]))
    return {"refund_id": row[0], "order_id": input["order_id"], "status": row[1], "amount": cents / 100,
            "currency": input["currency"]}


def refunded(input: dict, output: dict | None, call) -> bool | dict:
    # output is None after a crash or a timeout (the answer never came): look the refund up by its
    # idempotency key, and hand its output back so the run can go on with it
    with _connect() as conn:
        row = conn.execute("SELECT refund_id, order_id, cents, currency FROM refunds WHERE key = ? AND status = 'refunded'",
                           (call.idempotency_key,)).fetchone()
    if row is None:
        return False
    return {"refund_id": row[0], "order_id": row[1], "status": "refunded", "amount": row[2] / 100, "currency": row[3]}


def cancel_refund(input: dict, output: dict | None, call) -> None:
    with _connect() as conn:
        conn.execute("UPDATE refunds SET status = 'cancelled' WHERE key = ?", (call.idempotency_key,))
