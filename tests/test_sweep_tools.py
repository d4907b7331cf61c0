"""The read-only tools of the shipment_sweep example (orchestration/tools/shop_tools/sweep.py), on
a seeded temp database, and one real run of the flow (map of check_shipment, each a parallel)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "orchestration" / "tools"))

from shop_tools import db, sweep  # noqa: E402

CALL = SimpleNamespace(run_id="run-test", step=1, attempt=1, idempotency_key=None, deadline=None)


@pytest.fixture
def shop(tmp_path, monkeypatch):
    path = tmp_path / "shop.db"
    monkeypatch.setenv("FLOWCTL_SHOP_DB", str(path))
    db.seed(path)
    return path


def test_list_and_read_records(shop):
    listed = sweep.list_shipped_orders({"statuses": ["shipped", "delivered"]}, CALL)
    assert listed["count"] == 10 and listed["orders"][0] == {"order_id": "A-1001", "status": "delivered", "carrier": "dhl"}
    assert [o["order_id"] for o in sweep.list_shipped_orders({"statuses": ["shipped"]}, CALL)["orders"]] == ["A-1009"]
    assert sweep.get_shipment_record({"order_id": "A-1001", "order_status": "delivered"}, CALL)["matches_order"] is True
    assert sweep.get_shipment_record({"order_id": "A-1009", "order_status": "shipped"}, CALL)["status"] == "in_transit"
    missing = sweep.get_shipment_record({"order_id": "A-1002", "order_status": "delivered"}, CALL)
    assert (missing["found"], missing["matches_order"]) == (False, False)
    pay = sweep.get_payment_record({"order_id": "A-1010"}, CALL)
    assert (pay["payment_id"], pay["status"], pay["amount"], pay["currency"]) == ("P-1010", "captured", 30.0, "GBP")
    assert sweep.get_payment_record({"order_id": "A-9999"}, CALL)["found"] is False


def test_summary_counts_flagged_and_tolerated_failures():
    out = sweep.summarise_shipment_checks({"orders": ["A-1", "A-2", "A-3"], "checks": [
        {"order_id": "A-1", "consistent": True},
        {"order_id": "A-2", "consistent": False, "shipment_status": None, "payment_status": "captured"},
        {"error": {"type": "BranchFailed", "message": "db locked", "state": "check_shipment_sources"}}]}, CALL)
    assert out == {"checked": 3, "consistent": 1,
                   "flagged": [{"order_id": "A-2", "shipment_status": None, "payment_status": "captured"}],
                   "failed": [{"order_id": "A-3", "error": "BranchFailed: db locked"}]}


def test_the_sweep_runs_for_real(shop, monkeypatch):
    import flowctl
    from flowctl.store.sql import MemoryStore

    project = flowctl.load_project(REPO)
    engine = flowctl.Engine(project, MemoryStore())
    sample = json.loads((REPO / "orchestration" / "examples" / "shipment_sweep.json").read_text())
    result = engine.run("shipment_sweep", sample)
    assert result.status == "succeeded", result.error
    assert (result.output["checked"], result.output["consistent"], result.output["failed"]) == (10, 9, [])
    assert [f["order_id"] for f in result.output["flagged"]] == ["A-1002"]
    children = engine.store.list_runs(parent_id=result.run_id, limit=0)
    assert len(children) == 10 and all(c["flow"] == "check_shipment" for c in children)
