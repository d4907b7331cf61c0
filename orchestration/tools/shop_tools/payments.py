"""Refunds through the (simulated) payment gateway: side effects on ``payments`` and ``refunds``.

``refund`` — input (``amount`` in major units of ``currency``)::

    {"order_id": "A-1001", "payment_id": "P-1001", "amount": 49.9, "currency": "EUR",
     "reason": "damaged"}

output::

    {"refund_id": "R-…", "order_id": "A-1001", "payment_id": "P-1001", "status": "refunded",
     "amount": 49.9, "currency": "EUR", "card_number": "4242424242424242",
     "refunded_at": "…Z", "replayed": false}

The refund is keyed by ``call.idempotency_key`` (UNIQUE in ``refunds``): a second call with the
same key refunds nothing and returns the first refund (``replayed: true``), whatever its status.
Errors: ``Payments.PaymentNotFound``, ``Payments.CurrencyMismatch``,
``Payments.AmountExceedsCapture``, ``Payments.MissingIdempotencyKey``, and any fault injected
for the order (``Payments.CardDeclined`` for A-1008).

``verify_refund`` — true when that refund exists and is not cancelled.
``cancel_refund`` — voids the refund and gives the amount back to the payment (idempotent).
``payment_state`` — the contract's read-only ``snapshot``: what the declared side effects change
(the payment's status and refunded total, the refunds under this call's idempotency key), taken
before the refund and after verify, as ``{payment_id, status, refunded, refunds: [{refund_id,
status, amount}]}`` (amounts in major units); ``{payment_id, found: false}`` for an unknown payment.
"""
from __future__ import annotations

import uuid

from flowctl import ToolError

from . import db


def refund(input: dict, call) -> dict:
    key = getattr(call, "idempotency_key", None)
    if not key:
        raise ToolError("Payments.MissingIdempotencyKey", "a refund without an idempotency key could be paid twice")
    cents = db.to_cents(input["amount"])
    conn = db.connect()
    try:
        existing = _find(conn, key)
        if existing is not None:
            return _output(conn, existing, replayed=True)
        db.take_fault(conn, "refund_payment", input["order_id"])
        with db.immediate(conn):
            existing = _find(conn, key)  # another worker may have won the race
            if existing is not None:
                return _output(conn, existing, replayed=True)
            payment = conn.execute("SELECT * FROM payments WHERE payment_id = ? AND order_id = ?",
                                   (input["payment_id"], input["order_id"])).fetchone()
            if payment is None:
                raise ToolError("Payments.PaymentNotFound",
                                f"no payment {input['payment_id']!r} for order {input['order_id']!r}")
            if payment["currency"] != input["currency"]:
                raise ToolError("Payments.CurrencyMismatch",
                                f"payment is in {payment['currency']}, refund asked in {input['currency']}")
            left = payment["amount_cents"] - payment["refunded_cents"]
            if cents > left:
                raise ToolError("Payments.AmountExceedsCapture",
                                f"refund {db.from_cents(cents)} exceeds the {db.from_cents(left)} left on the payment")
            refund_id = "R-" + uuid.uuid4().hex[:12]
            conn.execute("INSERT INTO refunds VALUES (?, ?, ?, ?, ?, ?, ?, 'refunded', ?, NULL)",
                         (refund_id, key, input["order_id"], input["payment_id"], cents, input["currency"],
                          input.get("reason"), db.iso(db.now())))
            _move(conn, input["payment_id"], cents)
        return _output(conn, _find(conn, key), replayed=False)
    finally:
        conn.close()


def verify_refund(input: dict, output: dict | None, call) -> bool | dict:
    # output is None after a crash or a timeout (the answer never came): found by its idempotency
    # key, the refund's output is handed back for the run to go on with
    conn = db.connect()
    try:
        row = _find(conn, call.idempotency_key)
        return _output(conn, row, replayed=True) if row is not None and row["status"] == "refunded" else False
    finally:
        conn.close()


def cancel_refund(input: dict, output: dict | None, call) -> None:
    conn = db.connect()
    try:
        with db.immediate(conn):
            row = _find(conn, call.idempotency_key)
            if row is None or row["status"] != "refunded":
                return  # never happened, or already voided
            conn.execute("UPDATE refunds SET status = 'cancelled', cancelled_at = ? WHERE refund_id = ?",
                         (db.iso(db.now()), row["refund_id"]))
            _move(conn, row["payment_id"], -row["amount_cents"])
    finally:
        conn.close()


def payment_state(input: dict, call) -> dict:
    conn = db.connect()
    try:
        payment = conn.execute("SELECT status, refunded_cents FROM payments WHERE payment_id = ?",
                               (input["payment_id"],)).fetchone()
        rows = conn.execute("SELECT refund_id, status, amount_cents FROM refunds WHERE idempotency_key = ?",
                            (getattr(call, "idempotency_key", None),)).fetchall()
    finally:
        conn.close()
    if payment is None:
        return {"payment_id": input["payment_id"], "found": False}
    return {"payment_id": input["payment_id"], "status": payment["status"],
            "refunded": db.from_cents(payment["refunded_cents"]),
            "refunds": [{"refund_id": r["refund_id"], "status": r["status"], "amount": db.from_cents(r["amount_cents"])}
                        for r in rows]}


def _find(conn, key: str):
    return conn.execute("SELECT * FROM refunds WHERE idempotency_key = ?", (key,)).fetchone()


def _move(conn, payment_id: str, cents: int) -> None:
    """Add ``cents`` (negative to give back) to the payment's refunded total and restate it."""
    conn.execute(
        """UPDATE payments SET refunded_cents = refunded_cents + ?,
               status = CASE WHEN refunded_cents + ? = 0 THEN 'captured'
                             WHEN refunded_cents + ? >= amount_cents THEN 'refunded'
                             ELSE 'partially_refunded' END
           WHERE payment_id = ?""",
        (cents, cents, cents, payment_id),
    )


def _output(conn, row, replayed: bool) -> dict:
    card = conn.execute("SELECT card_number FROM payments WHERE payment_id = ?", (row["payment_id"],)).fetchone()
    return {
        "refund_id": row["refund_id"],
        "order_id": row["order_id"],
        "payment_id": row["payment_id"],
        "status": row["status"],
        "amount": db.from_cents(row["amount_cents"]),
        "currency": row["currency"],
        "card_number": card["card_number"],
        "refunded_at": row["created_at"],
        "replayed": replayed,
    }
