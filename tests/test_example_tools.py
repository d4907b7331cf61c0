"""The example tools in orchestration/tools/shop_tools, called directly on a seeded temp database."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

import flowctl

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "orchestration" / "tools"
sys.path.insert(0, str(TOOLS))

from shop_tools import db, logistics, mail, orders, payments, reports, returns  # noqa: E402


@pytest.fixture
def shop(tmp_path, monkeypatch):
    """A freshly seeded shop database; FLOWCTL_SHOP_DB points at it. Returns its path."""
    path = tmp_path / "shop.db"
    monkeypatch.setenv("FLOWCTL_SHOP_DB", str(path))
    db.seed(path)
    return path


def call(key=None, attempt=1, deadline=None):
    return SimpleNamespace(run_id="run-test", step=1, attempt=attempt, idempotency_key=key, deadline=deadline)


def rows(path, sql, *args):
    with sqlite3.connect(path) as conn:
        return conn.execute(sql, args).fetchall()


REFUND = {"order_id": "A-1001", "payment_id": "P-1001", "amount": 49.9, "currency": "EUR", "reason": "damaged"}


def message(to, domain="corp.example"):
    attachment = {"filename": "r.csv", "content_type": "text/csv", "content": "a,b\n1,2\n", "size_mb": 0.000008}
    return {"message_ref": "run-test:sales-report", "to": to, "to_domain": domain, "recipient_count": len(to),
            "subject": "Sales", "body": "figures", "attachments": [attachment], "attachments_mb": 0.000008}


# ------------------------------------------------------------------------------ orders, returns
def test_get_order_reads_the_order_and_its_payment(shop):
    out = orders.get_order({"order_id": "A-1001"}, call())
    assert out["status"] == "delivered" and out["payment_status"] == "captured"
    assert (out["amount"], out["currency"], out["carrier"]) == (49.9, "EUR", "dhl")
    with pytest.raises(flowctl.ToolError) as info:
        orders.get_order({"order_id": "A-9999"}, call())
    assert info.value.error_type == "Orders.NotFound"


def test_return_window(shop):
    def check(order_id):
        o = orders.get_order({"order_id": order_id}, call())
        args = {k: o[k] for k in ("order_id", "category", "delivered_at", "amount", "currency")}
        return returns.check_return_policy(args, call(deadline=time.time() + 2))

    assert check("A-1001")["eligible"] is True
    expired = check("A-1003")
    assert (expired["eligible"], expired["reason"], expired["refund_amount"]) == (False, "window_expired", 0.0)


def test_slow_policy_service_times_out_and_the_cache_answers(shop):
    o = orders.get_order({"order_id": "A-1006"}, call())
    args = {k: o[k] for k in ("order_id", "category", "delivered_at", "amount", "currency")}
    started = time.monotonic()
    with pytest.raises(flowctl.ToolTimeout):
        returns.check_return_policy(args, call(deadline=time.time() + 0.2))
    assert time.monotonic() - started < 2  # waited for the deadline, not the 5 s service
    cached = returns.cached_return_policy(args, call())
    assert cached["source"] == "cache" and cached["eligible"] is True
    assert cached["refund_amount"] == 216.0  # 240.00 less the 10 % restocking fee


# ------------------------------------------------------------------------------ logistics
def test_parcel_appears_on_the_third_lookup(shop):
    answers = [logistics.get_logistics({"order_id": "A-1005", "carrier": "gls"}, call())["status"] for _ in range(3)]
    assert answers == ["not_found", "not_found", "success"]


def test_unknown_parcel_is_never_found(shop):
    for _ in range(4):
        assert logistics.get_logistics({"order_id": "A-1002", "carrier": "ups"}, call()) == {"status": "not_found", "data": None}
    assert logistics.get_logistics_v1({"order_id": "A-1002"}, call())["found"] is False


def test_carrier_outage_fails_once(shop):
    with pytest.raises(flowctl.ToolUnavailable):
        logistics.get_logistics({"order_id": "A-1007", "carrier": "ups"}, call())
    out = logistics.get_logistics({"order_id": "A-1007", "carrier": "ups"}, call(attempt=2))
    assert out["status"] == "success" and out["data"]["status"] == "delivered"


# ------------------------------------------------------------------------------ payments
def test_refund_twice_with_one_key_refunds_once(shop):
    first = payments.refund(REFUND, call("refund-A-1001"))
    again = payments.refund(REFUND, call("refund-A-1001", attempt=2))
    assert first["replayed"] is False and again["replayed"] is True
    assert again["refund_id"] == first["refund_id"]
    assert rows(shop, "SELECT count(*) FROM refunds WHERE order_id = 'A-1001'") == [(1,)]
    assert rows(shop, "SELECT refunded_cents, status FROM payments WHERE payment_id = 'P-1001'") == [(4990, "refunded")]


def test_verify_then_compensate_refund(shop):
    out = payments.refund(REFUND, call("refund-A-1001"))
    assert payments.verify_refund(REFUND, out, call("refund-A-1001"))["refund_id"] == out["refund_id"]
    # after a crash or a timeout verify gets no output (new-user finding: it raised, read as "not happened")
    assert payments.verify_refund(REFUND, None, call("refund-A-1001"))["refund_id"] == out["refund_id"]
    payments.cancel_refund(REFUND, None, call("refund-A-1001"))
    assert payments.verify_refund(REFUND, out, call("refund-A-1001")) is False
    payments.cancel_refund(REFUND, out, call("refund-A-1001"))  # a second undo changes nothing
    assert rows(shop, "SELECT refunded_cents, status FROM payments WHERE payment_id = 'P-1001'") == [(0, "captured")]
    assert orders.get_order({"order_id": "A-1001"}, call())["payment_status"] == "captured"


def test_refund_errors(shop):
    declined = {"order_id": "A-1008", "payment_id": "P-1008", "amount": 75.0, "currency": "EUR"}
    with pytest.raises(flowctl.ToolError) as info:
        payments.refund(declined, call("refund-A-1008"))
    assert info.value.error_type == "Payments.CardDeclined"
    with pytest.raises(flowctl.ToolError) as info:
        payments.refund(dict(REFUND, amount=60.0), call("refund-A-1001"))
    assert info.value.error_type == "Payments.AmountExceedsCapture"
    with pytest.raises(flowctl.ToolError) as info:
        payments.refund(REFUND, call(None))
    assert info.value.error_type == "Payments.MissingIdempotencyKey"
    assert rows(shop, "SELECT count(*) FROM refunds") == [(0,)]


# ------------------------------------------------------------------------------ reports, mail
def test_report_counts_orders_and_refunds(shop):
    payments.refund(REFUND, call("refund-A-1001"))
    out = reports.build_sales_report({"period_days": 30, "to": ["a@corp.example", "b@Corp.Example"]}, call())
    eur = next(r for r in out["rows"] if r["currency"] == "EUR")
    assert eur["refunds"] == 1 and eur["refunded"] == 49.9
    assert out["email"]["to_domain"] == "corp.example"
    assert out["email"]["attachments"][0]["content"].startswith("currency,orders")
    mixed = reports.build_sales_report({"period_days": 30, "to": ["a@corp.example", "b@partner.example"]}, call())
    assert mixed["email"]["to_domain"] == "(mixed)"


def test_send_email_then_recall(shop):
    msg = message(["finance@corp.example", "ceo@corp.example"])
    out = mail.send_email(msg, call("mail:run-test:sales-report"))
    again = mail.send_email(msg, call("mail:run-test:sales-report", attempt=2))
    assert again["replayed"] is True and again["message_id"] == out["message_id"]
    assert rows(shop, "SELECT count(*), status FROM outbox") == [(1, "sent")]
    sent = call("mail:run-test:sales-report")
    assert mail.verify_email(msg, out, sent)["message_id"] == out["message_id"]
    assert mail.verify_email(msg, None, sent)["message_id"] == out["message_id"]  # no output: after a crash or timeout
    mail.recall_email(msg, None, sent)
    assert mail.verify_email(msg, out, sent) is False
    assert rows(shop, "SELECT status FROM outbox") == [("recalled",)]


def test_send_email_refuses_what_the_policy_did_not_see(shop):
    with pytest.raises(flowctl.ToolError) as info:
        mail.send_email(message(["a@corp.example", "b@partner.example"]), call("k1"))
    assert info.value.error_type == "Mail.RecipientOutsideDomain"
    with pytest.raises(flowctl.ToolError) as info:
        mail.send_email(dict(message(["a@corp.example"]), recipient_count=12), call("k2"))
    assert info.value.error_type == "Mail.InvalidMessage"
    assert rows(shop, "SELECT count(*) FROM outbox") == [(0,)]


# ------------------------------------------------------------------------------ database, examples
def test_seed_command_and_first_use_seeding(tmp_path, monkeypatch):
    target = tmp_path / "cli" / "shop.db"
    env = dict(os.environ, PYTHONPATH=str(TOOLS))
    done = subprocess.run([sys.executable, "-m", "shop_tools.db", "seed", str(target)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert rows(target, "SELECT count(*) FROM orders") == [(len(db.ORDERS),)]
    fresh = tmp_path / "fresh" / "shop.db"
    monkeypatch.setenv("FLOWCTL_SHOP_DB", str(fresh))
    assert orders.get_order({"order_id": "A-1002"}, call())["status"] == "delivered"
    assert fresh.exists()


@pytest.mark.parametrize("example", sorted(p.name for p in (REPO / "orchestration" / "examples").glob("*.json")))
def test_example_inputs_fit_their_flow(example):
    project = flowctl.load_project(REPO)
    flow_id = next(f for f in sorted(project.flows, key=len, reverse=True) if example.startswith(f))
    data = json.loads((REPO / "orchestration" / "examples" / example).read_text())
    jsonschema.validate(data, project.flows[flow_id].input_schema)
