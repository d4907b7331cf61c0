"""Carrier lookups (read-only for the shop; each lookup is counted in ``shipments.lookups``).

``get_logistics`` (contract v2) — input::

    {"order_id": "A-1001", "carrier": "dhl"}          # carrier: dhl | ups | dpd | gls

output::

    {"status": "success", "data": {"carrier": "dhl", "tracking_no": "DHL100100042",
                                   "status": "delivered", "eta": null, "lookups": 1}}
    {"status": "not_found", "data": null}

``get_logistics_v1`` (contract v1, kept for flows pinned to ``^1``) — input ``{"order_id"}``,
output ``{"found": bool, "shipment_status": str | null, "eta": str | null}``.

A carrier only reports a parcel once it has been asked more than ``shipments.visible_after``
times (a label printed but not yet scanned), so re-checking after ``not_found`` can succeed.
Injected faults (``shop_tools.db.take_fault``) make the carrier API unavailable.
"""
from __future__ import annotations

from . import db


def get_logistics(input: dict, call) -> dict:
    row = _lookup(input["order_id"], input["carrier"])
    if row is None:
        return {"status": "not_found", "data": None}
    return {"status": "success", "data": {"carrier": row["carrier"], "tracking_no": row["tracking_no"],
                                          "status": row["status"], "eta": row["eta"], "lookups": row["lookups"]}}


def get_logistics_v1(input: dict, call) -> dict:
    row = _lookup(input["order_id"], None)
    if row is None:
        return {"found": False, "shipment_status": None, "eta": None}
    return {"found": True, "shipment_status": row["status"], "eta": row["eta"]}


def _lookup(order_id: str, carrier: str | None):
    """The shipment row if the carrier reports it now (counting this lookup), else None."""
    conn = db.connect()
    try:
        db.take_fault(conn, "get_logistics", order_id)
        with db.immediate(conn):
            conn.execute("UPDATE shipments SET lookups = lookups + 1 WHERE order_id = ?", (order_id,))
            row = conn.execute("SELECT * FROM shipments WHERE order_id = ?", (order_id,)).fetchone()
    finally:
        conn.close()
    if row is None or row["lookups"] <= row["visible_after"]:
        return None
    if carrier is not None and row["carrier"] != carrier:
        return None
    return row
