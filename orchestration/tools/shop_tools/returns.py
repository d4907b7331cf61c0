"""Return-policy checks (read-only): the live policy service and its cached fallback.

Input (``amount`` in major units of ``currency``; ``delivered_at`` ISO-8601 UTC)::

    {"order_id": "A-1001", "category": "apparel", "delivered_at": "…Z",
     "amount": 49.9, "currency": "EUR"}

Output::

    {"order_id": "A-1001", "eligible": true,
     "reason": "within_window" | "window_expired" | "category_not_returnable",
     "category": "apparel", "window_days": 30, "days_since_delivery": 5,
     "restocking_fee_pct": 0.0, "refund_amount": 49.9, "currency": "EUR",
     "source": "live" | "cache"}

``refund_amount`` is ``amount`` less the restocking fee (0 when not eligible).

The live service is simulated by ``return_policies.service_latency_ms``: the call takes that
long. When the latency would pass ``call.deadline`` the tool waits until the deadline and raises
``flowctl.ToolTimeout``, so a flow's ``on_error`` can fall back to :func:`cached_return_policy`,
which reads the same rules from the local copy (a nightly snapshot in a real shop) at once.
"""
from __future__ import annotations

import time

from flowctl import ToolTimeout

from . import db


def check_return_policy(input: dict, call) -> dict:
    """The live policy service (may be slow; honours ``call.deadline``)."""
    rule = _rule(input["category"])
    latency = (rule["service_latency_ms"] if rule else 0) / 1000
    deadline = getattr(call, "deadline", None)
    if deadline is not None and time.time() + latency > deadline:
        time.sleep(max(0.0, deadline - time.time()))
        raise ToolTimeout(f"return-policy service did not answer within the deadline ({latency:.1f}s needed)")
    time.sleep(latency)
    return _decide(input, rule, "live")


def cached_return_policy(input: dict, call) -> dict:
    """The cached rules: same answer shape, ``source: "cache"``, no waiting."""
    return _decide(input, _rule(input["category"]), "cache")


def _rule(category: str):
    conn = db.connect()
    try:
        return conn.execute("SELECT * FROM return_policies WHERE category = ?", (category,)).fetchone()
    finally:
        conn.close()


def _decide(input: dict, rule, source: str) -> dict:
    days = (db.now() - db.parse_iso(input["delivered_at"])).days
    if rule is None:
        eligible, reason, window, fee = False, "category_not_returnable", 0, 0.0
    else:
        window, fee = rule["window_days"], rule["restocking_fee_pct"]
        eligible = days <= window
        reason = "within_window" if eligible else "window_expired"
    refund_cents = db.to_cents(input["amount"]) * (100 - fee) / 100 if eligible else 0
    return {
        "order_id": input["order_id"],
        "eligible": eligible,
        "reason": reason,
        "category": input["category"],
        "window_days": window,
        "days_since_delivery": days,
        "restocking_fee_pct": fee,
        "refund_amount": db.from_cents(int(round(refund_cents))),
        "currency": input["currency"],
        "source": source,
    }
