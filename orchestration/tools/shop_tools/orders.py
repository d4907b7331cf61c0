"""``get_order`` — read an order and its payment from the shop database (read-only).

Input::

    {"order_id": "A-1001"}

Output (amounts in major units of ``currency``; times ISO-8601 UTC)::

    {"order_id": "A-1001", "status": "delivered", "customer_email": "customer1@mail.example",
     "category": "apparel", "amount": 49.9, "currency": "EUR", "carrier": "dhl",
     "created_at": "…Z", "delivered_at": "…Z" | null,
     "payment_id": "P-1001", "payment_status": "captured", "refunded_amount": 0.0}

Raises ``ToolError("Orders.NotFound")`` for an unknown order id.
"""
from __future__ import annotations

from flowctl import ToolError

from . import db


def get_order(input: dict, call) -> dict:
    conn = db.connect()
    try:
        row = conn.execute(
            """SELECT o.*, p.payment_id, p.status AS payment_status, p.refunded_cents
               FROM orders o JOIN payments p ON p.order_id = o.order_id
               WHERE o.order_id = ?""",
            (input["order_id"],),
        ).fetchone()
    finally:
        conn.close()
    if row is None:
        raise ToolError("Orders.NotFound", f"no order {input['order_id']!r}")
    return {
        "order_id": row["order_id"],
        "status": row["status"],
        "customer_email": row["customer_email"],
        "category": row["category"],
        "amount": db.from_cents(row["amount_cents"]),
        "currency": row["currency"],
        "carrier": row["carrier"],
        "created_at": row["created_at"],
        "delivered_at": row["delivered_at"],
        "payment_id": row["payment_id"],
        "payment_status": row["payment_status"],
        "refunded_amount": db.from_cents(row["refunded_cents"]),
    }
