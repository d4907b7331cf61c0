"""A small project for the flow-test tests (issue 7): a lookup, a review, a payment with an undo.

Flow ``f``::

    lookup ──status ok──▶ pay ──▶ done
      │ └─status unsure─▶ review_it ──approve──▶ pay
      │                     ├─(default)──▶ rejected
      │                     └─on_timeout──▶ rejected
      ├─(default)──▶ rejected
      └─on_error Lookup.NotFound ──▶ rejected
    flow on_error: [OSError] → failed;  ["*"] (compensate) → failed

``lookup`` retries ToolUnavailable three times, one hour apart. The tools (``tk``) keep their
effects in ``tk.PAID`` and every call in ``tk.LEDGER``; ``tk.flowctl_sandbox`` empties both.
"""
from __future__ import annotations

import textwrap

from support.helpers import write_project

TOOLS = '''
from contextlib import contextmanager
import flowctl

LEDGER = []
PAID = {}
LOOKUPS = {}   # id -> list of answers, used in order (a real tool with a scripted backend)


def lookup(input, call):
    LEDGER.append(("lookup", input["id"], call.attempt))
    answers = LOOKUPS.get(input["id"]) or [{"status": "ok", "amount": 10}]
    answer = answers.pop(0) if len(answers) > 1 else answers[0]
    if isinstance(answer, Exception):
        raise answer
    return answer


def pay(input, call):
    LEDGER.append(("pay", input["id"]))
    PAID[call.idempotency_key] = input["amount"]
    return {"payment": "P-" + input["id"], "amount": input["amount"], "key": call.idempotency_key}


def verify_pay(input, output, call):  # by the call's key: output is None after a crash or a timeout
    return call.idempotency_key in PAID


def undo_pay(input, output, call):
    LEDGER.append(("undo", input["id"]))
    PAID.pop(call.idempotency_key, None)


def undo_pay_noop(input, output, call):
    LEDGER.append(("undo-noop", input["id"]))


def undo_pay_once(input, output, call):
    if call.idempotency_key not in PAID:
        raise RuntimeError("nothing to undo")
    PAID.pop(call.idempotency_key)


@contextmanager
def flowctl_sandbox(contract):
    LEDGER.append(("sandbox", contract.id))
    PAID.clear()
    try:
        yield
    finally:
        PAID.clear()
'''

FLOW = """
flow: f
version: 1
start: lookup
input_schema:
  type: object
  required: [id]
  properties: {id: {type: string}}
transitions:
  - from: lookup
    when: "response.status == 'ok'"
    to: pay
    set: {amount: response.amount}
  - from: lookup
    when: "response.status == 'unsure'"
    to: review_it
    set: {amount: response.amount}
  - from: lookup
    to: rejected
  - from: pay
    to: done
    set: {payment: response.payment, stamp: "uuid()", at: "now()"}
  - from: review_it
    when: "review.decision == 'approve'"
    to: pay
  - from: review_it
    to: rejected
on_error:
  - errors: [OSError]
    goto: failed
  - errors: ["*"]
    compensate: true
    goto: failed
"""

STATES = {
    "states/lookup.yaml": """
        id: lookup
        type: task
        tool: lookup@^1
        input: {id: input.id}
        retry:
          - errors: [ToolUnavailable]
            max_attempts: 3
            interval: 1h
            backoff: 1.0
        on_error:
          - errors: [Lookup.NotFound]
            goto: rejected
        """,
    "states/pay.yaml": """
        id: pay
        type: task
        tool: pay@^1
        input: {id: input.id, amount: context.amount}
        """,
    "states/review_it.yaml": """
        id: review_it
        type: review
        show: {id: input.id}
        decisions: [approve, reject]
        timeout: 1h
        on_timeout: {goto: rejected}
        """,
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/rejected.yaml": "id: rejected\ntype: fail\nerror: Rejected\n",
    "states/failed.yaml": "id: failed\ntype: fail\nerror: {expr: \"error.type || 'Failed'\"}\n",
}

LOOKUP_CONTRACT = """
id: lookup
version: 1.0.0
entrypoint: tk:lookup
input_schema: {type: object, required: [id], properties: {id: {type: string}}}
output_schema:
  type: object
  required: [status]
  properties:
    status: {enum: [ok, unsure, missing]}
    amount: {type: number}
"""


def pay_contract(compensate="tk:undo_pay", examples=True, verify="tk:verify_pay"):
    text = f"""
    id: pay
    version: 1.0.0
    entrypoint: tk:pay
    verify: {verify}
    compensate: {compensate}
    idempotency_key: "join('-', ['pay', input.id])"
    side_effects:
      - {{type: database_write, target: payments}}
    output_schema:
      type: object
      required: [payment, amount, key]
    """
    text = textwrap.dedent(text)
    if examples:
        text += "examples:\n  - description: pay 10 for X-1\n    input: {id: X-1, amount: 10}\n    output: {payment: P-X-1}\n"
    return text


def files(**overrides) -> dict:
    out = {
        "transitions/f.yaml": FLOW,
        **STATES,
        "contracts/lookup.v1.0.0.yaml": LOOKUP_CONTRACT,
        "contracts/pay.v1.0.0.yaml": pay_contract(),
        "policies/allow.yaml": "policy: allow\napplies_to: [pay]\nallow: []\n",
        "tools/tk.py": TOOLS,
    }
    out.update(overrides)
    return out


def project(tmp_path, name="p", cases=None, **overrides):
    """Write the project (and ``cases``: ``{file name: yaml}`` under tests/f/) and return its root."""
    data = files(**overrides)
    for file_name, text in (cases or {}).items():
        data[f"tests/f/{file_name}"] = text
    return write_project(tmp_path / name, data)


#: Mocks of a run that pays: lookup says ok (amount 10), pay returns a payment.
OK_MOCKS = """
mocks:
  lookup:
    output: {status: ok, amount: 10}
  pay:
    output: {payment: P-1, amount: 10, key: pay-1}
"""
