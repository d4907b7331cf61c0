"""A child run cancelled from outside is a failed branch of its parent's fan-out, never a success.

Each parent fans out to children that charge (a side effect with a compensation) and then pause for
review; the test cancels a child while its parent waits on it (the interleaving a user makes with
``flowctl cancel CHILD``), decides the others, and continues the parent as ``resume`` would.
"""
from __future__ import annotations

import textwrap

from support.enginekit import Harness, allow_all, build, effect_contract, sqlite_store

TOOLS = """
LEDGER = []

def pay(input, call):
    LEDGER.append(("pay", input.get("name")))
    return {"paid": input.get("name")}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    LEDGER.append(("undo", input.get("name")))
"""

CHILD = {
    **effect_contract("pay", "pay"), **allow_all("pay"),
    "states/p.yaml": "id: p\ntype: task\ntool: pay@^1\ninput: {name: input.name}\n",
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve]\n",
    "transitions/child.yaml": "flow: child\nstart: p\ntransitions:\n  - {from: p, to: ask, set: {out: response}}\n"
                              "  - {from: ask, to: done}\noutput: context.out\n",
}


def _harness(tmp_path, fan_yaml):
    files = {**CHILD, "states/fan.yaml": textwrap.dedent(fan_yaml),
             "transitions/f.yaml": "flow: f\nstart: fan\ntransitions:\n  - {from: fan, to: done, set: {out: response}}\n"
                                   "output: context.out\n"}
    return Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))


def _waiting_parent(h, names):
    result = h.run(input={"names": names})
    assert result.status == "waiting", result.error
    return result.run_id, {c["run_id"]: c["review"]["token"] for c in result.children}


def _children(h, parent_id):
    rows = h.store.list_runs(parent_id=parent_id, limit=0)
    return sorted(rows, key=lambda r: (r["cursor"].get("parent") or {}).get("index", 0))


SUBFLOW = "id: fan\ntype: subflow\nflow: child\ninput: {name: 'input.names[0]'}\n"
MAP = "id: fan\ntype: map\nitems: input.names\nflow: child\nitem_input: {name: item}\nmax_concurrency: 2\n"


def test_a_parent_whose_subflow_child_was_cancelled_fails_branch_failed(tmp_path):
    h = _harness(tmp_path, SUBFLOW)
    parent_id, _ = _waiting_parent(h, ["a"])
    (child,) = _children(h, parent_id)
    assert h.engine.cancel(child["id"], by="ops").status == "cancelled"
    result = h.engine.resume(parent_id)
    assert result.status == "failed" and result.error["code"] == "BRANCH_FAILED", result
    assert "cancelled by ops" in result.error["message"] and "were cancelled" in result.error["message"]
    assert result.output is None
    assert h.ledger() == [("pay", "a"), ("undo", "a")]  # the child's own cancel undid its charge, once


def test_a_map_with_a_cancelled_item_fails_and_undoes_the_items_that_succeeded(tmp_path):
    h = _harness(tmp_path, MAP)
    parent_id, tokens = _waiting_parent(h, ["a", "b"])
    first, second = _children(h, parent_id)
    assert h.engine.cancel(first["id"], by="ops").status == "cancelled"
    # the other item is approved: its end continues the parent, which must not succeed on [error, output]
    h.engine.resume(second["id"], token=tokens[second["id"]], decision="approve")
    parent = h.store.get_run(parent_id)
    assert parent["status"] == "failed" and parent["error"]["code"] == "BRANCH_FAILED", parent["error"]
    assert parent["output"] is None
    # item a undone by its cancel, item b (its branch succeeded) by the parent's saga when it failed
    assert sorted(h.ledger()) == [("pay", "a"), ("pay", "b"), ("undo", "a"), ("undo", "b")]


def test_a_tolerated_cancelled_item_is_an_error_entry_of_the_response(tmp_path):
    h = _harness(tmp_path, MAP + "tolerated_failures: {count: 1}\n")
    parent_id, tokens = _waiting_parent(h, ["a", "b"])
    first, second = _children(h, parent_id)
    h.engine.cancel(first["id"], by="ops")
    h.engine.resume(second["id"], token=tokens[second["id"]], decision="approve")
    parent = h.store.get_run(parent_id)
    assert parent["status"] == "succeeded", parent["error"]
    assert parent["output"][0]["error"]["code"] == "CANCELLED" and parent["output"][1] == {"paid": "b"}


def test_children_stopped_because_a_sibling_failed_are_not_counted_twice(tmp_path):
    """One failed item beyond the tolerance fails the parent; the sibling it stopped is not a second failure."""
    from flowctl.engine.fanout import failed_branches

    plan = {"failed": True, "children": [{"status": "failed"}, {"status": "cancelled"}, {"status": "succeeded"}]}
    assert failed_branches(plan) == [{"status": "failed"}]
    plan["failed"] = False  # no sibling stopped anything: a cancelled child was cancelled from outside
    assert failed_branches(plan) == [{"status": "failed"}, {"status": "cancelled"}]
