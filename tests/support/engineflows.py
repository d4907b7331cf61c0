"""Shared material of the engine tests (tests/engine/): the tool module ``TOOLS`` (tools writing
``tk.LEDGER``), ``flow``/``linear`` to write a flow file, and the projects several test files use
(``LAYERED`` error-handler states, ``SAGA`` side effects with compensation, ``HOSTILE`` tools)."""
from __future__ import annotations

from support.enginekit import allow_all, contract, effect_contract, task

TOOLS = """
import time
import flowctl
LEDGER = []

class GatewayError(ConnectionError):
    pass

def ok(input, call):
    LEDGER.append(("ok", call.attempt, call.idempotency_key))
    return {"status": "success", "value": input.get("value", 1)}

def flaky(input, call):
    LEDGER.append(("flaky", call.attempt))
    if call.attempt < input.get("succeed_on", 99):
        raise GatewayError("gateway reset")
    return {"status": "success"}

def declined(input, call):
    LEDGER.append(("declined", call.attempt))
    raise flowctl.ToolError("Payments.CardDeclined", "card declined")

def slow(input, call):
    LEDGER.append(("slow", call.attempt))
    time.sleep(5)
    return {}

def cached(input, call):
    LEDGER.append(("cached", call.attempt))
    return {"status": "cached"}

def pay(input, call):
    LEDGER.append(("pay", input["id"]))
    return {"paid": input["id"], "ok": input.get("verify", True)}

def verify_pay(input, output, call):
    return bool(output and output.get("ok"))

def undo_pay(input, output, call):
    if input.get("undo_fails"):
        raise RuntimeError("gateway refused the refund")
    LEDGER.append(("undo", input["id"]))

def boom(input, call):
    LEDGER.append(("boom", call.attempt))
    raise KeyError("missing")

def big(input, call):
    return {"blob": "x" * (2 << 20)}

def echo(input, call):
    LEDGER.append(("echo", input))
    return dict(input)
"""



def flow(start, transitions, *, extra=""):
    """``{"transitions/f.yaml": text}``: flow ``f`` version 1 starting at ``start``."""
    body = f"flow: f\nversion: 1\nstart: {start}\ntransitions:\n{transitions}" + extra
    return {"transitions/f.yaml": body}


def linear(*states):
    """Transition lines ``a -> b -> ... -> done``."""
    lines = "".join(f"  - {{from: {a}, to: {b}}}\n" for a, b in zip(states, states[1:] + ("done",)))
    return lines


#: states the error-layer tests recover or fail in
LAYERED = {
    **contract("declined", "declined"),
    **contract("cached", "cached"),
    "states/recover_state.yaml": "id: recover_state\ntype: pass\nset: {caught: error.type}\n",
    "states/failed.yaml": "id: failed\ntype: fail\nerror: {expr: error.code}\ncause: {expr: error.message}\n",
}


#: side-effecting ``pay`` (verify, compensate) allowed by a policy, and a failing ``boom``
SAGA = {
    **effect_contract("pay", "pay", extra="idempotency_key: \"join('-', ['pay', input.id])\"\n"),
    **contract("boom", "boom"),
    **allow_all("pay"),
    "states/failed.yaml": "id: failed\ntype: fail\nerror: Aborted\n",
}


def saga_states(n, last_extra=""):
    """Task states ``p1..pn`` each paying its own id (``last_extra`` added to the last one's input)."""
    files = {}
    for i in range(1, n + 1):
        files.update(task(f"p{i}", "pay@1.0.0", extra=f"input: {{id: \"'{i}'\"{last_extra if i == n else ''}}}\n"))
    return files


#: tools that misbehave: exit the process, raise a BaseException, mutate their input, return NaN
HOSTILE = """
import sys
LEDGER = []

class Weird(BaseException):
    pass

def exits(input, call):
    sys.exit(5)

def weird(input, call):
    raise Weird("not an Exception")

def mutate(input, call):
    input["id"] = "changed"
    input.setdefault("extra", []).append(1)
    return {"ok": True}

def nan(input, call):
    return {"value": float("nan")}
"""


#: ``tk.step``: a counter tool whose call with ``n == 2`` misbehaves as ``input.mode`` asks (raise, a
#: bad or nested or text output, too slow, changing its input; ``flaky``: refuse the first two attempts)
STEP_TOOLS = """
import time

def step(input, call):
    n = input.get("n") or 0
    mode = input.get("mode")
    if n == 2:
        if mode == "raise":
            raise ValueError("no second helping")
        if mode == "bad_output":
            return {"m": 1}
        if mode == "slow":
            time.sleep(2)
        if mode == "text":
            return '{"n": 3, "note": "as text"}'
        if mode == "nested":
            return {"n": n + 1, "deep": {"list": [1, 2]}}
        if mode == "mutate":
            input["n"] = 99
        if mode == "unicode":
            return {"n": n + 1, "name": "caf\\u00e9"}
    if mode == "flaky" and n == 2 and call.attempt < 3:
        raise ConnectionError(f"attempt {call.attempt} refused")
    return {"n": n + 1}
"""
