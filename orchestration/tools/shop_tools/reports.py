"""``build_sales_report`` — sales figures from the shop database and the e-mail that carries them
(read-only).

Input::

    {"period_days": 7, "to": ["finance@corp.example"], "attach_csv": true}

Output (amounts in major units, one row per currency; ``size_mb`` in MiB)::

    {"report_id": "sales-2024-05-01-2024-05-08", "title": "Sales report …",
     "period": {"from": "…Z", "to": "…Z"},
     "rows": [{"currency": "EUR", "orders": 7, "revenue": 1490.4, "refunds": 1, "refunded": 49.9}],
     "totals": {"orders": 10, "refunds": 1},
     "email": {"to": [...], "to_domain": "corp.example", "subject": "…", "body": "…",
               "attachments": [{"filename": "….csv", "content_type": "text/csv",
                                "content": "currency,orders,…", "size_mb": 0.0002}]}}

``email.to_domain`` is the one domain every recipient is in (lower case), or ``"(mixed)"``
when they differ, so a policy can allow-list it and ``send_email`` can hold the message to it.
"""
from __future__ import annotations

from datetime import timedelta

from . import db


def build_sales_report(input: dict, call) -> dict:
    end = db.now()
    start = end - timedelta(days=input["period_days"])
    since = db.iso(start)
    conn = db.connect()
    try:
        orders = conn.execute(
            """SELECT currency, count(*) AS n, sum(amount_cents) AS cents FROM orders
               WHERE created_at >= ? AND status != 'cancelled' GROUP BY currency""", (since,)).fetchall()
        refunds = conn.execute(
            """SELECT currency, count(*) AS n, sum(amount_cents) AS cents FROM refunds
               WHERE created_at >= ? AND status = 'refunded' GROUP BY currency""", (since,)).fetchall()
    finally:
        conn.close()
    by_currency: dict = {}
    for r in orders:
        by_currency.setdefault(r["currency"], {"orders": 0, "revenue": 0, "refunds": 0, "refunded": 0})
        by_currency[r["currency"]].update(orders=r["n"], revenue=r["cents"])
    for r in refunds:
        by_currency.setdefault(r["currency"], {"orders": 0, "revenue": 0, "refunds": 0, "refunded": 0})
        by_currency[r["currency"]].update(refunds=r["n"], refunded=r["cents"])
    rows = [{"currency": cur, "orders": v["orders"], "revenue": db.from_cents(v["revenue"]),
             "refunds": v["refunds"], "refunded": db.from_cents(v["refunded"])}
            for cur, v in sorted(by_currency.items())]
    day_from, day_to = db.iso(start)[:10], db.iso(end)[:10]
    title = f"Sales report {day_from} to {day_to}"
    lines = [f"{title} ({input['period_days']} days)", ""]
    lines += [f"{r['currency']}: {r['orders']} orders, {r['revenue']:.2f} revenue, "
              f"{r['refunds']} refunds ({r['refunded']:.2f})" for r in rows] or ["No orders in this period."]
    attachments = []
    if input.get("attach_csv", True):
        csv = "currency,orders,revenue,refunds,refunded\n" + "".join(
            f"{r['currency']},{r['orders']},{r['revenue']:.2f},{r['refunds']},{r['refunded']:.2f}\n" for r in rows)
        attachments.append({"filename": f"sales-{day_from}-{day_to}.csv", "content_type": "text/csv",
                            "content": csv, "size_mb": round(len(csv.encode()) / 1_048_576, 6)})
    recipients = [a.strip() for a in input["to"]]
    domains = {a.rsplit("@", 1)[-1].lower() for a in recipients}
    return {
        "report_id": f"sales-{day_from}-{day_to}",
        "title": title,
        "period": {"from": db.iso(start), "to": db.iso(end)},
        "rows": rows,
        "totals": {"orders": sum(r["orders"] for r in rows), "refunds": sum(r["refunds"] for r in rows)},
        "email": {"to": recipients, "to_domain": domains.pop() if len(domains) == 1 else "(mixed)",
                  "subject": title, "body": "\n".join(lines) + "\n", "attachments": attachments},
    }
