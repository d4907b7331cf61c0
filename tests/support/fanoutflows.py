"""Shared material of the fan-out tests (tests/engine/test_fanout.py, states/test_state_map.py,
states/test_state_subflow.py): ``TOOLS`` (``work`` records and doubles, ``pay`` is undone by
``undo_pay``), the ``CHILD`` flow (pay, then work), and ``parent`` writing flow ``f`` around one
fan-out state."""
from __future__ import annotations

import textwrap

from support.enginekit import allow_all, contract, effect_contract

TOOLS = """
import threading, time
LEDGER = []
LOCK = threading.Lock()
ACTIVE = [0, 0]   # now, peak

def work(input, call):
    with LOCK:
        ACTIVE[0] += 1
        ACTIVE[1] = max(ACTIVE[1], ACTIVE[0])
    try:
        time.sleep(input.get("sleep") or 0)
        if input.get("fail"):
            raise RuntimeError("branch " + str(input.get("name")) + " broke")
        with LOCK:
            LEDGER.append(("work", input.get("name")))
        return {"name": input.get("name"), "double": (input.get("n") or 0) * 2}
    finally:
        with LOCK:
            ACTIVE[0] -= 1

def pay(input, call):
    with LOCK:
        LEDGER.append(("pay", input.get("name")))
    return {"ok": True}

def verify_pay(input, output, call):
    return True

def undo_pay(input, output, call):
    with LOCK:
        LEDGER.append(("undo", input.get("name")))
"""


CHILD = {
    **contract("work", "work"),
    **effect_contract("pay", "pay"), **allow_all("pay"),
    "states/w.yaml": "id: w\ntype: task\ntool: work@^1\ninput: {name: input.name, n: input.n, sleep: input.sleep, fail: input.fail}\n",
    "states/p.yaml": "id: p\ntype: task\ntool: pay@^1\ninput: {name: input.name}\n",
    "transitions/child.yaml": "flow: child\nstart: p\ntransitions:\n  - {from: p, to: w}\n  - {from: w, to: done, set: {out: response}}\noutput: context.out\n",
    "states/failed.yaml": "id: failed\ntype: fail\nerror: {expr: error.type}\ncause: {expr: error.message}\n",
}



def parent(state_yaml: str, extra_flow: str = ""):
    """``states/fan.yaml`` and flow ``f``: fan -> done, its output the fan-out's response."""
    return {
        "states/fan.yaml": textwrap.dedent(state_yaml),
        "transitions/f.yaml": "flow: f\nstart: fan\ntransitions:\n  - {from: fan, to: done, set: {out: response}}\n"
                              "output: context.out\n" + extra_flow,
    }



def ledger_of(h, kind):
    """The ledger entries of one kind (``work``, ``pay``, ``undo``): their names, in order."""
    return [x[1] for x in h.ledger() if x[0] == kind]

