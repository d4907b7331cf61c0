"""Read-only tools of the ``shipment_sweep`` example: list the orders that left the warehouse, read
each one's shipment record and payment, and summarise the checks. None of them writes.

``list_shipped_orders``::

    {"statuses": ["shipped", "delivered"], "limit": 100}
    -> {"orders": [{"order_id": "A-1001", "status": "delivered", "carrier": "dhl"}, ...], "count": 10}

``get_shipment_record`` (the shop's own shipment row; unlike ``get_logistics`` it does not ask the
carrier, so it neither counts lookups nor hides late scans)::

    {"order_id": "A-1001", "order_status": "delivered"}
    -> {"order_id": "A-1001", "found": true, "carrier": "dhl", "tracking_no": "DHL100100042",
        "status": "delivered", "matches_order": true}

``matches_order`` holds when a record exists and its status fits the order's: ``delivered`` for a
delivered order, ``in_transit`` or ``delivered`` for a shipped one.

``get_payment_record``::

    {"order_id": "A-1001"}
    -> {"order_id": "A-1001", "found": true, "payment_id": "P-1001", "status": "captured",
        "amount": 49.9, "refunded_amount": 0.0, "currency": "EUR"}

``summarise_shipment_checks`` (``checks`` is a map state's ``response``: one entry per order, in
order; a check that failed and was tolerated is ``{"error": {...}}``)::

    {"orders": ["A-1001", "A-1002"], "checks": [{"order_id": "A-1001", "consistent": true, ...},
                                                 {"error": {"type": "...", "message": "..."}}]}
    -> {"checked": 2, "consistent": 1, "flagged": [], "failed": [{"order_id": "A-1002", "error": "..."}]}
"""
from __future__ import annotations

from . import db

SHIPMENT_FITS = {"delivered": {"delivered"}, "shipped": {"in_transit", "delivered"}}


def list_shipped_orders(input: dict, call) -> dict:
    statuses = list(input.get("statuses") or ["shipped", "delivered"])
    limit = int(input.get("limit") or 100)
    conn = db.connect()
    try:
        rows = conn.execute(
            f"""SELECT order_id, status, carrier FROM orders WHERE status IN ({','.join('?' * len(statuses))})
                ORDER BY order_id LIMIT ?""", (*statuses, limit)).fetchall()
    finally:
        conn.close()
    orders = [{"order_id": r["order_id"], "status": r["status"], "carrier": r["carrier"]} for r in rows]
    return {"orders": orders, "count": len(orders)}


def get_shipment_record(input: dict, call) -> dict:
    conn = db.connect()
    try:
        row = conn.execute("SELECT carrier, tracking_no, status FROM shipments WHERE order_id = ?",
                           (input["order_id"],)).fetchone()
    finally:
        conn.close()
    if row is None:
        return {"order_id": input["order_id"], "found": False, "carrier": None, "tracking_no": None,
                "status": None, "matches_order": False}
    fits = SHIPMENT_FITS.get(input.get("order_status") or "", set())
    return {"order_id": input["order_id"], "found": True, "carrier": row["carrier"],
            "tracking_no": row["tracking_no"], "status": row["status"], "matches_order": row["status"] in fits}


def get_payment_record(input: dict, call) -> dict:
    conn = db.connect()
    try:
        row = conn.execute("""SELECT payment_id, status, amount_cents, refunded_cents, currency FROM payments
                              WHERE order_id = ? ORDER BY payment_id LIMIT 1""", (input["order_id"],)).fetchone()
    finally:
        conn.close()
    if row is None:
        return {"order_id": input["order_id"], "found": False, "payment_id": None, "status": None,
                "amount": 0.0, "refunded_amount": 0.0, "currency": None}
    return {"order_id": input["order_id"], "found": True, "payment_id": row["payment_id"], "status": row["status"],
            "amount": db.from_cents(row["amount_cents"]), "refunded_amount": db.from_cents(row["refunded_cents"]),
            "currency": row["currency"]}


def summarise_shipment_checks(input: dict, call) -> dict:
    orders = input.get("orders") or []
    checks = input.get("checks") or []
    consistent, flagged, failed = 0, [], []
    for n, check in enumerate(checks):
        order_id = orders[n] if n < len(orders) else (check or {}).get("order_id")
        if not isinstance(check, dict) or "error" in check:
            err = (check or {}).get("error") if isinstance(check, dict) else None
            failed.append({"order_id": order_id,
                           "error": f"{(err or {}).get('type') or 'Error'}: {(err or {}).get('message') or ''}".rstrip(": ")})
        elif check.get("consistent"):
            consistent += 1
        else:
            flagged.append({"order_id": check.get("order_id") or order_id,
                            "shipment_status": check.get("shipment_status"),
                            "payment_status": check.get("payment_status")})
    return {"checked": len(checks), "consistent": consistent, "flagged": flagged, "failed": failed}
