"""A project, a store and an API for the server tests (tests/server/)."""
from __future__ import annotations

import textwrap

from support.enginekit import contract, effect_contract, task
from support.helpers import write_project

TOOLS = """
LEDGER = []
KEYS = []  # the idempotency key of each refund call, as the tool saw it

def get_order(input, call):
    return {"order_id": input["order_id"], "total": 80}

def refund(input, call):
    if input.get("amount") == 13:  # a message UTF-8 cannot hold (a lone surrogate), before any effect
        raise RuntimeError("unlucky \\udc80 amount")
    LEDGER.append(("refund", input.get("amount")))
    KEYS.append(call.idempotency_key)
    return {"ok": True}

def verify_refund(input, output, call):
    return True

def undo_refund(input, output, call):
    LEDGER.append(("undo", input.get("amount")))

def wipe(input, call):
    LEDGER.append(("wipe",))
    return {}

def verify_wipe(input, output, call):
    return True

def undo_wipe(input, output, call):
    pass
"""

AMOUNT = "input_schema:\n  type: object\n  required: [amount]\n  properties:\n    amount: {type: number}\n"

FILES = {
    **contract("get_order", "get_order", extra="input_schema:\n  type: object\n  required: [order_id]\n"
                                              "  properties:\n    order_id: {type: string}\n"),
    **effect_contract("refund", "refund", extra=AMOUNT + "sensitive: [card]\n"),
    **effect_contract("wipe", "wipe"),
    "policies/refunds.yaml": textwrap.dedent("""\
        policy: refunds
        applies_to: [refund]
        allow:
          - {field: input.amount, range: [0, 100]}
        review_when: "input.amount > `50`"
        rate: {max: 2, window: 1h, per: run}
        """),
    **task("charge", "refund@^1", extra="input: {amount: input.amount, card: input.card}\n"),
    "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/charge.yaml": textwrap.dedent("""\
        flow: charge
        version: 1
        start: charge
        transitions:
          - {from: charge, to: ask}
          - {from: ask, to: done}
        """),
}


def make_server_project(tmp_path):
    files = dict(FILES)
    files["tools/tk.py"] = textwrap.dedent(TOOLS)
    return write_project(tmp_path / "p", files)


DECLINING = """
def refund(input, call):
    if input.get("decline"):
        raise ValueError(f"card {input['card']!r} cvv {input['cvv']!r} declined")
    return {"receipt": f"charged card {input['card']} (cvv {input['cvv']!r})"}

def verify_refund(input, output, call):
    return True

def undo_refund(input, output, call):
    if input.get("undo_fails"):
        raise RuntimeError(f"cannot refund card {input['card']!r} (cvv {input['cvv']!r})")
"""


def make_declining_project(tmp_path):
    """Flows whose tool quotes the sensitive card and cvv it was given: ``review_then_charge``
    (a review, then the charge: it fails, its error message quoting both, when ``decline``) and
    ``charge`` (succeeds, its output quoting both under a name no contract marks sensitive) and
    ``charge_then_review``; the charge's compensation fails, quoting both, when ``undo_fails``; a
    CVV that is not three digits fails the contract's input_schema (whose reason quotes it)."""
    from support.enginekit import allow_all

    charge = "input: {card: input.card, cvv: input.cvv, decline: input.decline, undo_fails: input.undo_fails}\n"
    files = {
        **effect_contract("refund", "refund", extra="sensitive: [card, cvv]\ninput_schema:\n  type: object\n"
                                                    "  properties:\n    cvv: {type: string, pattern: '^[0-9]{3}$'}\n"),
        **allow_all("refund"),
        **task("charge", "refund", extra=charge),
        "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
        "states/done.yaml": "id: done\ntype: succeed\n",
        "transitions/review_then_charge.yaml": "flow: review_then_charge\nversion: 1\nstart: ask\ntransitions:\n"
                                               "  - {from: ask, to: charge}\n  - {from: charge, to: done}\n",
        "transitions/charge_then_review.yaml": "flow: charge_then_review\nversion: 1\nstart: charge\ntransitions:\n"
                                               "  - {from: charge, to: ask}\n  - {from: ask, to: done}\n",
        "transitions/charge.yaml": "flow: charge\nversion: 1\nstart: charge\noutput: {receipt: response.receipt}\n"
                                   "transitions:\n  - {from: charge, to: done}\n",
        "tools/tk.py": textwrap.dedent(DECLINING),
    }
    return write_project(tmp_path / "declining", files)
