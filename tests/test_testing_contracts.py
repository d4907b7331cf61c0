"""Contract tests: invoke → verify → compensate → verify again, against the real tool in its
sandbox (issue 7)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import flowctl
from flowctl.testing.contract_tests import FAILED, PASSED, SKIPPED, find_sandbox, run_contract_tests
from support.testingkit import TOOLS, pay_contract, project

REPO = Path(__file__).resolve().parents[1]


def results(tmp_path, name="p", **overrides):
    root = project(tmp_path, name=name, **overrides)
    proj = flowctl.load_project(root)
    return proj, run_contract_tests(proj)


def test_a_tool_that_verifies_and_undoes_passes_every_step(tmp_path):
    proj, out = results(tmp_path)
    (r,) = out  # lookup is read-only without examples: not listed
    assert r.status == PASSED, r.report()
    assert r.sandbox == "tk:flowctl_sandbox"
    assert [s[0] for s in r.steps] == ["invoke", "verify after invoke is true", "verify without the output is true",
                                        "compensate", "verify after compensate is false", "compensate again (idempotent)"]
    from flowctl.engine.tools import resolve

    ledger = resolve("tk:LEDGER", str(proj.orchestration / "tools"))
    assert ledger[:3] == [("sandbox", "pay"), ("pay", "X-1"), ("undo", "X-1")]


def test_a_compensate_that_does_not_undo_is_caught(tmp_path):
    _, (r,) = results(tmp_path, **{"contracts/pay.v1.0.0.yaml": pay_contract(compensate="tk:undo_pay_noop")})
    assert r.status == FAILED
    failed = [s for s in r.steps if not s[1]]
    assert failed == [("verify after compensate is false", False,
                       "verify still says the effect happened: tk:undo_pay_noop does not undo tk:pay")]
    assert "orchestration/contracts/pay.v1.0.0.yaml:" in r.message  # where the example is


def test_a_compensate_that_is_not_idempotent_is_caught(tmp_path):
    _, (r,) = results(tmp_path, **{"contracts/pay.v1.0.0.yaml": pay_contract(compensate="tk:undo_pay_once")})
    assert r.status == FAILED
    assert r.steps[-1] == ("compensate again (idempotent)", False, "RuntimeError: nothing to undo")


def test_a_verify_that_says_no_after_the_call_is_caught(tmp_path):
    tools = TOOLS + "\ndef verify_never(input, output, call):\n    return False\n"
    _, (r,) = results(tmp_path, **{"contracts/pay.v1.0.0.yaml": pay_contract(verify="tk:verify_never"),
                                   "tools/tk.py": tools})
    assert r.status == FAILED and r.steps[-1][0] == "verify after invoke"


def test_output_and_input_of_the_example_are_checked(tmp_path):
    contract = pay_contract().replace("output: {payment: P-X-1}", "output: {payment: P-OTHER}")
    _, (r,) = results(tmp_path, **{"contracts/pay.v1.0.0.yaml": contract})
    assert r.status == FAILED
    assert r.steps[-1] == ("output contains the example's output", False,
                           'output.payment: expected "P-OTHER", got "P-X-1"')
    contract = pay_contract().replace("output_schema:\n", "input_schema: {type: object, required: [id, currency]}\noutput_schema:\n")
    _, (r,) = results(tmp_path, name="q", **{"contracts/pay.v1.0.0.yaml": contract})
    assert r.status == FAILED and r.steps[0][0] == "example input matches input_schema"


def test_without_a_sandbox_a_side_effecting_tool_is_skipped_not_run(tmp_path):
    tools = TOOLS.replace("def flowctl_sandbox", "def not_a_sandbox")
    proj, (r,) = results(tmp_path, **{"tools/tk.py": tools})
    assert r.status == SKIPPED and "declare no sandbox" in r.message
    assert find_sandbox(proj.contracts["pay"][0], str(proj.orchestration / "tools")) is None
    from flowctl.engine.tools import resolve

    assert resolve("tk:LEDGER", str(proj.orchestration / "tools")) == []  # never called


def test_a_side_effecting_contract_without_examples_is_listed_as_skipped(tmp_path):
    _, (r,) = results(tmp_path, **{"contracts/pay.v1.0.0.yaml": pay_contract(examples=False)})
    assert r.status == SKIPPED and "no examples" in r.message


def test_the_shipped_contracts_pass_in_a_temporary_shop_database(tmp_path, monkeypatch):
    working = tmp_path / "working.db"
    monkeypatch.setenv("FLOWCTL_SHOP_DB", str(working))
    proj = flowctl.load_project(REPO)
    out = run_contract_tests(proj)
    assert {r.status for r in out} == {PASSED}, [r.report() for r in out]
    tested = {r.contract.id for r in out}
    assert {"refund_payment", "send_email"} <= tested
    assert all(r.sandbox == "shop_tools.sandbox:flowctl_sandbox" for r in out)
    refund = next(r for r in out if r.contract.id == "refund_payment")
    assert [s[0] for s in refund.steps][-1] == "compensate again (idempotent)"
    import os

    assert os.environ["FLOWCTL_SHOP_DB"] == str(working)  # restored
    assert not working.exists()  # the working database was never touched


def test_the_shop_sandbox_is_a_fresh_copy_each_time(tmp_path):
    import sys

    sys.path.insert(0, str(REPO / "orchestration" / "tools"))
    try:
        from shop_tools.sandbox import flowctl_sandbox
    finally:
        sys.path.remove(str(REPO / "orchestration" / "tools"))
    with flowctl_sandbox(None) as first:
        with sqlite3.connect(first) as conn:
            conn.execute("UPDATE payments SET status = 'refunded'")
    with flowctl_sandbox(None) as second:
        with sqlite3.connect(second) as conn:
            assert {r[0] for r in conn.execute("SELECT status FROM payments")} == {"captured"}
    assert not Path(first).exists() and not Path(second).exists()


ALIAS = """
id: payalias
version: 1.0.0
entrypoint: {entry}
examples:
  - input: {{id: X-9, amount: 5}}
"""


def test_contract_tests_follow_the_function_a_read_only_alias_of_a_side_effecting_one_is_not_run(tmp_path):
    tools = TOOLS.replace("def flowctl_sandbox", "def not_a_sandbox")
    proj, out = results(tmp_path, **{"tools/tk.py": tools, "tools/tk2.py": "from tk import pay as send_alias\n",
                                     "contracts/payalias.v1.0.0.yaml": ALIAS.format(entry="tk2:send_alias")})
    by_id = {r.contract.id: r for r in out}
    assert by_id["pay"].status == SKIPPED
    alias = by_id["payalias"]
    assert alias.status == SKIPPED and "same function as pay@1.0.0" in alias.message, alias.message
    from flowctl.engine.tools import resolve

    assert resolve("tk:LEDGER", str(proj.orchestration / "tools")) == []  # the real tool never ran
    # with a sandbox, the alias must verify like the contract that declares the effects
    proj, out = results(tmp_path, name="q", **{"contracts/payalias.v1.0.0.yaml": ALIAS.format(entry="tk:pay")})
    alias = next(r for r in out if r.contract.id == "payalias")
    assert alias.status == FAILED and alias.steps[-1][0] == "verify"
    assert "same function as pay@1.0.0" in alias.steps[-1][2]


SERVICE = """
SENT = []


class Mailer:
    def send(self, input, call):
        SENT.append(input)
        return {"sent": True}

    def verify(self, input, output, call):
        return bool(SENT)

    def undo(self, input, output, call):
        SENT.clear()


svc = Mailer()
"""


def test_a_read_only_alias_of_a_side_effecting_bound_method_is_not_run_for_real(tmp_path):
    # `svcalias:svc.send` and `svcmod:svc.send` are one method of one object, though each access
    # makes a new bound-method object: the alias is tested as side-effecting (no sandbox: skipped)
    effects = ("id: send\nversion: 1.0.0\nentrypoint: svcmod:svc.send\nverify: svcmod:svc.verify\n"
               "compensate: svcmod:svc.undo\nside_effects:\n  - {type: email, target: smtp}\n")
    proj, out = results(tmp_path, **{"tools/svcmod.py": SERVICE, "tools/svcalias.py": "from svcmod import svc\n",
                                     "contracts/send.v1.0.0.yaml": effects,
                                     "contracts/payalias.v1.0.0.yaml": ALIAS.format(entry="svcalias:svc.send")})
    alias = next(r for r in out if r.contract.id == "payalias")
    assert alias.status == SKIPPED and "same function as send@1.0.0" in alias.message, alias.message
    from flowctl.engine.tools import resolve

    assert resolve("svcmod:SENT", str(proj.orchestration / "tools")) == []  # the real method never ran


def test_a_verify_that_needs_the_output_is_caught(tmp_path):
    """(new-user finding: a verify reading output[...] raised when asked after a crash or a timeout,
    with output None, and the effect then counted as not happened — never compensated)"""
    tools = TOOLS + "\ndef verify_by_output(input, output, call):\n    return output['key'] in PAID\n"
    _, (r,) = results(tmp_path, **{"contracts/pay.v1.0.0.yaml": pay_contract(verify="tk:verify_by_output"),
                                   "tools/tk.py": tools})
    assert r.status == FAILED
    (failed,) = [s for s in r.steps if not s[1]]
    assert failed[0] == "verify without the output (as after a crash or a timeout)"
    assert "TypeError" in failed[2] and "call.idempotency_key" in failed[2]
