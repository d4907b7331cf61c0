"""Small fixture projects and a temporary git history for the graph and diff tests.

``BASE`` is a project of two flows sharing a state (``order_return`` and ``quick_refund``).
:func:`make_history` commits it on ``main``, then on branch ``feature`` one commit per change
in :data:`STEPS` (each a function editing the files dict), and returns the commit ids.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

BASE = {
    "orchestration/states/validate_order.yaml": """\
id: validate_order
description: Is the return request complete?
type: choice
""",
    "orchestration/states/get_logistics.yaml": """\
id: get_logistics
type: task
tool: get_logistics@^2
input: {order_id: context.order_id}
timeout: 3s
retry:
  - errors: [ToolTimeout, ToolUnavailable]
    max_attempts: 3
    interval: 1s
on_error:
  - errors: [ToolTimeout]
    fallback: get_logistics_cache@^1
  - errors: [SchemaMismatch]
    goto: escalate
""",
    "orchestration/states/refund.yaml": """\
id: refund
type: task
tool: refund_payment@^3
input: {order_id: context.order_id, amount: context.amount}
""",
    "orchestration/states/escalate.yaml": """\
id: escalate
type: review
show: {order: context.order_id}
decisions: [approve, reject]
timeout: 2h
on_timeout: {goto: failed}
""",
    "orchestration/states/done.yaml": "id: done\ntype: succeed\n",
    "orchestration/states/failed.yaml": "id: failed\ntype: fail\nerror: ReturnFailed\ncause: the return could not be processed\n",
    "orchestration/transitions/order_return.yaml": """\
flow: order_return
version: 3
start: validate_order
transitions:
  - from: validate_order
    when: "context.amount > `0`"
    to: get_logistics
  - from: validate_order
    to: failed
  - from: get_logistics
    when: "response.status == 'success'"
    to: refund
    set: {eta: response.data.eta}
  - from: get_logistics
    to: escalate
  - from: refund
    to: done
  - from: escalate
    when: "review.decision == 'approve'"
    to: refund
  - from: escalate
    to: failed
on_error:
  - errors: [PolicyDenied]
    goto: escalate
  - errors: ["*"]
    compensate: true
    fail: ReturnFailed
""",
    "orchestration/transitions/quick_refund.yaml": """\
flow: quick_refund
start: refund
transitions:
  - from: refund
    to: done
""",
    "orchestration/contracts/get_logistics.v2.1.0.yaml": "id: get_logistics\nversion: 2.1.0\nentrypoint: shop_tools.logistics:get\n",
    "orchestration/contracts/get_logistics_cache.v1.0.0.yaml":
        "id: get_logistics_cache\nversion: 1.0.0\nentrypoint: shop_tools.logistics:cached\n",
    "orchestration/contracts/refund_payment.v3.2.0.yaml": """\
id: refund_payment
version: 3.2.0
entrypoint: shop_tools.payments:refund
verify: shop_tools.payments:verify_refund
compensate: shop_tools.payments:cancel_refund
timeout: 5s
side_effects:
  - {type: external_api_call, target: pay-gateway/refund}
""",
    "orchestration/policies/refunds.yaml": """\
policy: refunds
version: 1
applies_to: [refund_payment]
allow:
  - {field: input.amount, range: [0, 500]}
  - {field: input.currency, in: [EUR, USD]}
rate: {max: 5, window: 1m}
""",
    "orchestration/tools/shop_tools/__init__.py": "",
    "README.md": "fixture\n",
}

CONTRACT_32 = "orchestration/contracts/refund_payment.v3.2.0.yaml"
CONTRACT_33 = "orchestration/contracts/refund_payment.v3.3.0.yaml"
FLOW = "orchestration/transitions/order_return.yaml"


def _replace(files: dict, path: str, old: str, new: str) -> None:
    assert old in files[path], (path, old)
    files[path] = files[path].replace(old, new)


def add_state(files: dict) -> None:
    files["orchestration/states/notify_customer.yaml"] = "id: notify_customer\ntype: task\ntool: notify@^1\n"
    files["orchestration/contracts/notify.v1.0.0.yaml"] = "id: notify\nversion: 1.0.0\nentrypoint: shop_tools.mail:notify\n"
    _replace(files, FLOW, "  - from: refund\n    to: done\n",
             "  - from: refund\n    to: notify_customer\n  - from: notify_customer\n    to: done\n")


def remove_transition(files: dict) -> None:
    _replace(files, FLOW, "  - from: escalate\n    when: \"review.decision == 'approve'\"\n    to: refund\n", "")


def change_condition(files: dict) -> None:
    _replace(files, FLOW, "when: \"response.status == 'success'\"",
             "when: \"response.status == 'ok' && response.data.eta != null\"")


def bump_contract(files: dict) -> None:
    text = files.pop(CONTRACT_32)
    files[CONTRACT_33] = text.replace("version: 3.2.0", "version: 3.3.0").replace("timeout: 5s", "timeout: 8s")


def add_side_effect(files: dict) -> None:
    _replace(files, CONTRACT_33, "  - {type: external_api_call, target: pay-gateway/refund}\n",
             "  - {type: external_api_call, target: pay-gateway/refund}\n"
             "  - {type: database_write, target: payment_transactions, effect: status -> refunded}\n")


def loosen_policy(files: dict) -> None:
    _replace(files, "orchestration/policies/refunds.yaml", "range: [0, 500]", "range: [0, 5000]")
    _replace(files, "orchestration/policies/refunds.yaml", "in: [EUR, USD]", "in: [EUR, USD, GBP]")


def raise_retries(files: dict) -> None:
    _replace(files, "orchestration/states/get_logistics.yaml", "max_attempts: 3", "max_attempts: 5")


STEPS = [add_state, remove_transition, change_condition, bump_contract, add_side_effect, loosen_policy, raise_retries]


def write_tree(root: Path, files: dict) -> None:
    """Make ``root`` hold exactly ``files`` under orchestration/ (other files are kept)."""
    orch = root / "orchestration"
    if orch.exists():
        for path in sorted(orch.rglob("*"), reverse=True):
            if path.is_file():
                path.unlink()
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_history(repo: Path, prefix: str = "") -> dict:
    """Commit BASE on main, then each of STEPS on branch feature. Returns
    ``{"base": sha, "add_state": sha, …}``; the work tree is left at the last commit."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    files = dict(BASE)
    root = repo / prefix if prefix else repo
    write_tree(root, files)
    shas = {"base": commit_all(repo, "base")}
    git(repo, "checkout", "-q", "-b", "feature")
    for step in STEPS:
        step(files)
        write_tree(root, files)
        shas[step.__name__] = commit_all(repo, step.__name__)
    return shas


def head_files() -> dict:
    files = dict(BASE)
    for step in STEPS:
        step(files)
    return files


def mermaid_parser():
    """(node, folder with node_modules/mermaid and jsdom) or a skip reason."""
    node = shutil.which("node")
    folder = Path(os.environ.get("FLOWCTL_MERMAID_DIR", Path.home() / ".cache/flowctl-mermaid"))
    if node is None:
        return None, "node is not installed"
    for package in ("mermaid", "jsdom"):
        if not (folder / "node_modules" / package / "package.json").exists():
            return None, (f"npm package {package} not found in {folder} (set FLOWCTL_MERMAID_DIR or run: "
                          f"npm install --prefix {folder} mermaid jsdom)")
    return (node, folder), ""


def parse_mermaid(texts: list[str]) -> list[dict]:
    found, reason = mermaid_parser()
    if not found:
        pytest.skip(f"real Mermaid parser unavailable: {reason}")
    node, folder = found
    script = Path(__file__).resolve().parents[1] / "mermaid_check.mjs"  # batch parse, one node start
    proc = subprocess.run([node, str(script), str(folder)], input=json.dumps(texts), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
