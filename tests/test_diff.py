"""flowctl diff: the semantic diff of two versions, from git revisions or folders, in every format.

The history (tests/support/flow_fixtures.py) has one commit per change: add a state, remove a
transition, change a condition, bump a contract version, add a side effect, loosen a policy,
raise a retry count. Each format is checked for exactly those changes.
"""
from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from support.flow_fixtures import BASE, git, head_files, make_history, parse_mermaid, write_tree
from flowctl.diff import render as diff_render
from flowctl.cli.main import main
from flowctl.diff.core import diff_projects
from flowctl.diff.fields import field_changes, policy_risks
from flowctl.diff.graph import mermaid_charts
from flowctl.definition.loader import load_files

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    return repo, make_history(repo)


def run_diff(repo, *args):
    result = CliRunner().invoke(main, ["diff", *args, "--root", str(repo)])
    assert result.exit_code == 0, result.output
    return result.output


def changes_of(repo, a, b):
    data = json.loads(run_diff(repo, a, b, "--format", "json"))
    return [(c["kind"], c["op"], c["id"], [f["path"] for f in c["fields"]], [r["code"] for r in c["risks"]])
            for c in data["changes"]]


# ----------------------------------------------------------------------------- one commit at a time
STEP_CHANGES = {
    "add_state": [
        ("transition", "added", "notify_customer -> done", [], []),
        ("transition", "removed", "refund -> done", [], []),
        ("transition", "added", "refund -> notify_customer", [], []),
        ("state", "added", "notify_customer", [], []),
        ("contract", "added", "notify", [], []),
    ],
    "remove_transition": [("transition", "removed", "escalate -> refund", ["when"], [])],
    "change_condition": [("transition", "changed", "get_logistics -> refund", ["when"], [])],
    "bump_contract": [("contract", "changed", "refund_payment", ["version", "timeout"], [])],
    "add_side_effect": [("contract", "changed", "refund_payment@3.3.0",
                         ["side_effects[database_write:payment_transactions]"],
                         ["side_effect_added", "contract_edited_in_place"])],
    "loosen_policy": [("policy", "changed", "refunds", ["allow[input.amount].range", "allow[input.currency].in"],
                       ["policy_loosened", "policy_loosened"])],
    "raise_retries": [("state", "changed", "get_logistics", ["retry.max_attempts"], [])],
}


@pytest.mark.parametrize("step", list(STEP_CHANGES))
def test_each_commit_shows_exactly_its_change(history, step):
    repo, shas = history
    assert changes_of(repo, shas[step] + "~1", shas[step]) == STEP_CHANGES[step]


def test_field_values_before_and_after(history):
    repo, shas = history
    data = json.loads(run_diff(repo, "main", "feature", "--format", "json"))
    fields = {(c["id"], f["path"]): (f["op"], f["before"], f["after"]) for c in data["changes"] for f in c["fields"]}
    assert fields[("get_logistics -> refund", "when")] == (
        "changed", "response.status == 'success'", "response.status == 'ok' && response.data.eta != null")
    assert fields[("escalate -> refund", "when")] == ("removed", "review.decision == 'approve'", None)
    assert fields[("get_logistics", "retry.max_attempts")] == ("changed", 3, 5)
    assert fields[("refund_payment", "version")] == ("changed", "3.2.0", "3.3.0")
    assert fields[("refund_payment", "side_effects[database_write:payment_transactions]")] == (
        "added", None, {"type": "database_write", "target": "payment_transactions", "effect": "status -> refunded"})
    assert fields[("refunds", "allow[input.amount].range")] == ("changed", [0, 500], [0, 5000])


# ----------------------------------------------------------------------------- every format, main..feature
def short(repo, rev):
    return git(repo, "rev-parse", "--short=7", rev)


def test_text_format(history):
    repo, _ = history
    expected = f"""\
flowctl diff main ({short(repo, 'main')}) → feature ({short(repo, 'feature')}): 4 added, 2 removed, 4 changed; 3 risks; 2 flows affected

- transition order_return: escalate → refund
    - when "review.decision == 'approve'"
~ transition order_return: get_logistics → refund
    when "response.status == 'success'" → "response.status == 'ok' && response.data.eta != null"
+ transition order_return: notify_customer → done
- transition order_return: refund → done
+ transition order_return: refund → notify_customer
~ state get_logistics
    retry.max_attempts 3 → 5
+ state notify_customer (task)
+ contract notify (1.0.0)
~ contract refund_payment 3.2.0 → 3.3.0 (minor)
    version "3.2.0" → "3.3.0"
    timeout "5s" → "8s"
    + side_effects[database_write:payment_transactions] {{"type": "database_write", "target": "payment_transactions", "effect": "status -> refunded"}}
    ! risk: refund_payment@3.3.0: new side effect database_write → payment_transactions (status -> refunded)
~ policy refunds
    allow[input.amount].range [0, 500] → [0, 5000]
    allow[input.currency].in ["EUR", "USD"] → ["EUR", "USD", "GBP"]
    ! risk: policy refunds: input.amount range widened [0, 500] → [0, 5000]
    ! risk: policy refunds: input.currency now also allows ["GBP"]

Flows affected:
  order_return  via state get_logistics, state notify_customer, contract notify, contract refund_payment, policy refunds
  quick_refund  via contract refund_payment, policy refunds
"""
    assert run_diff(repo, "main", "feature") == expected


def test_json_format(history):
    repo, _ = history
    data = json.loads(run_diff(repo, "main", "feature", "--format", "json"))
    assert data["schema"] == "flowctl.diff.core/v1"
    assert data["summary"] == {"added": 4, "removed": 2, "changed": 4, "risks": 3, "flows_affected": 2}
    assert [(c["kind"], c["op"], c["id"]) for c in data["changes"]] == [
        ("transition", "removed", "escalate -> refund"),
        ("transition", "changed", "get_logistics -> refund"),
        ("transition", "added", "notify_customer -> done"),
        ("transition", "removed", "refund -> done"),
        ("transition", "added", "refund -> notify_customer"),
        ("state", "changed", "get_logistics"),
        ("state", "added", "notify_customer"),
        ("contract", "added", "notify"),
        ("contract", "changed", "refund_payment"),
        ("policy", "changed", "refunds"),
    ]
    for c in data["changes"]:
        assert set(c) >= {"kind", "op", "id", "title", "flow", "owner", "summary", "fields", "risks", "flows"}
    contract = data["changes"][8]
    assert contract["summary"] == "3.2.0 → 3.3.0 (minor)"
    assert contract["risks"] == [{"code": "side_effect_added", "message": "refund_payment@3.3.0: new side effect "
                                  "database_write → payment_transactions (status -> refunded)"}]
    assert contract["flows"] == ["order_return", "quick_refund"]
    assert data["changes"][0]["source"] == "escalate" and data["changes"][0]["flow"] == "order_return"
    assert data["affected_flows"] == [
        {"flow": "order_return", "via": ["state get_logistics", "state notify_customer", "contract notify",
                                         "contract refund_payment", "policy refunds"]},
        {"flow": "quick_refund", "via": ["contract refund_payment", "policy refunds"]}]
    assert data["warnings"] == []


def test_markdown_format(history):
    repo, _ = history
    md = run_diff(repo, "main", "feature", "--format", "markdown")
    lines = md.splitlines()
    assert lines[0] == diff_render.MARKER == "<!-- flowctl-diff -->"
    assert lines[3] == "**4 added, 2 removed, 4 changed; 3 risks; 2 flows affected**"
    risks = [line for line in lines if line.startswith("> - ⚠️")]
    assert risks == [
        "> - ⚠️ refund\\_payment@3.3.0: new side effect database\\_write → payment\\_transactions (status -\\> refunded)",
        "> - ⚠️ policy refunds: input.amount range widened \\[0, 500\\] → \\[0, 5000\\]",
        "> - ⚠️ policy refunds: input.currency now also allows \\[\"GBP\"\\]"]
    table = [line for line in lines if line.startswith("| ")]
    assert table[0] == "| | Kind | Name | Details |"
    assert len(table) == 11
    assert table[1] == "| 🔴 − | transition | `order_return: escalate → refund` | `- when \"review.decision == 'approve'\"` |"
    assert table[2] == ("| 🟡 ~ | transition | `order_return: get_logistics → refund` | `when \"response.status == 'success'\" → "
                        "\"response.status == 'ok' && response.data.eta != null\"` |")
    assert table[3] == "| 🟢 + | transition | `order_return: notify_customer → done` | added |"
    assert table[6] == "| 🟡 ~ | state | `get_logistics` | `retry.max_attempts 3 → 5`<br>used by `order_return` |"
    assert table[7] == "| 🟢 + | state | `notify_customer` | task<br>used by `order_return` |"
    assert table[9].startswith("| 🟡 ~ | contract | `refund_payment 3.2.0 → 3.3.0 (minor)` | `version \"3.2.0\" → \"3.3.0\"`<br>")
    assert "⚠️ **risk:** refund\\_payment@3.3.0: new side effect" in table[9]
    assert table[10].startswith("| 🟡 ~ | policy | `refunds` | `allow[input.amount].range [0, 500] → [0, 5000]`<br>")
    assert "**Flows affected:** `order_return` (via state get_logistics, state notify_customer, contract notify, " \
           "contract refund_payment, policy refunds); `quick_refund` (via contract refund_payment, policy refunds)" in lines
    charts = mermaid_blocks(md)
    assert "<details><summary>" in md and md.index("<details>") < md.index("```mermaid") < md.index("</details>")
    assert [c.splitlines()[1] for c in charts] == [
        "  %% flow order_return: changed states and one hop of context (flowctl diff)",
        "  %% flow quick_refund: changed states and one hop of context (flowctl diff)"]
    order_return = charts[0].splitlines()
    for line in ['  s_notify_customer("+ notify_customer<br/>notify@^1")',
                 '  s_get_logistics("~ get_logistics<br/>get_logistics@^2<br/>retry ×5<br/>fallback: get_logistics_cache@^1")',
                 '  s_refund("~ refund<br/>refund_payment@^3")',
                 '  s_escalate -.->|"− review.decision == \'approve\'"| s_refund',
                 '  s_refund -.->|"−"| s_done',
                 '  s_refund -->|"+"| s_notify_customer',
                 '  s_get_logistics -->|"~ response.status == \'ok\' && resp…"| s_refund',
                 "  class s_notify_customer added", "  class s_get_logistics changed", "  class s_refund affected",
                 "  classDef added fill:#dafbe1,stroke:#1a7f37,stroke-width:2px,color:#116329"]:
        assert line in order_return, line
    unchanged = next(line for line in order_return if line.startswith("  class ") and line.endswith(" unchanged"))
    assert "s_validate_order" in unchanged and "s_escalate" in unchanged
    edges = [line for line in order_return if re.match(r"  \S+ (-->|-\.->)", line)]
    assert len(edges) == 11
    links = {int(m.group(1)): m.group(2) for m in (re.match(r"  linkStyle (\d+) (.*)", x) for x in order_return) if m}
    for index, edge in enumerate(edges):
        marked = re.search(r'\|"([+−~])', edge)
        assert (index in links) == bool(marked), edge  # every marked edge is coloured, and only those
        if marked:
            colour = {"+": "#1a7f37", "−": "#cf222e", "~": "#bf8700"}[marked.group(1)]
            assert colour in links[index]


def mermaid_blocks(md: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)```", md, flags=re.S)


def test_markdown_mermaid_passes_the_real_parser(history):
    repo, _ = history
    charts = mermaid_blocks(run_diff(repo, "main", "feature", "--format", "markdown"))
    results = parse_mermaid(charts)
    assert [r["ok"] for r in results] == [True] * len(charts), results


def test_markdown_above_mermaid_limits_keeps_the_table_alone(history, monkeypatch):
    repo, _ = history
    monkeypatch.setattr(diff_render, "MERMAID_MAX_EDGES", 5)
    md = run_diff(repo, "main", "feature", "--format", "markdown")
    assert "```mermaid" not in md and "<details>" not in md
    assert "above GitHub's mermaid limits (5 edges, 50,000 characters), so only the table is shown" in md
    assert md.count("\n| ") == 11


def test_markdown_cuts_a_huge_table_to_fit_a_comment(history, monkeypatch):
    repo, _ = history
    monkeypatch.setattr(diff_render, "COMMENT_MAX_CHARS", 2500)
    md = run_diff(repo, "main", "feature", "--format", "markdown")
    assert re.search(r"\| … \| \| \| \d+ more changes not shown", md)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")
def test_svg_format(history, tmp_path):
    repo, _ = history
    out = tmp_path / "diff.svg"
    result = CliRunner().invoke(main, ["diff", "main", "feature", "--root", str(repo), "--format", "svg", "-o", str(out)])
    assert result.exit_code == 0, result.output
    root = ET.parse(out).getroot()
    groups = {el.get("id"): el for el in root.iter(f"{SVG}g")}

    def shape(gid):
        el = groups[gid].find(f".//{SVG}polygon")
        return el if el is not None else groups[gid].find(f".//{SVG}path")

    assert groups["f_order_return-cluster"].get("class") == "cluster"
    assert groups["f_quick_refund-cluster"].get("class") == "cluster"
    expected = {
        "f_order_return-s_notify_customer": ("node added", "#1a7f37", "#dafbe1"),
        "f_order_return-s_get_logistics": ("node changed", "#bf8700", "#fff8c5"),
        "f_order_return-s_refund": ("node affected", "#bf8700", "#ffffff"),
        "f_order_return-s_validate_order": ("node unchanged", "#8c959f", "#f6f8fa"),
        "f_quick_refund-s_refund": ("node affected", "#bf8700", "#ffffff"),
    }
    for gid, (cls, stroke, fill) in expected.items():
        assert groups[gid].get("class") == cls, gid
        assert (shape(gid).get("stroke"), shape(gid).get("fill")) == (stroke, fill), gid
    removed = groups["f_order_return-e_transition_s_escalate_s_refund"]
    assert removed.get("class") == "edge removed"
    path = removed.find(f".//{SVG}path")
    assert path.get("stroke") == "#cf222e" and path.get("stroke-dasharray")
    assert groups["f_order_return-e_transition_s_refund_s_notify_customer"].get("class") == "edge added"
    assert groups["f_order_return-e_transition_s_get_logistics_s_refund"].get("class") == "edge changed"
    assert groups["f_order_return-e_transition_s_validate_order_s_get_logistics"].get("class") == "edge unchanged"
    titles = [a.get(f"{XLINK}title") for a in root.iter(f"{SVG}a")]
    assert any("retry.max_attempts 3 → 5" in t for t in titles if t)
    assert any('when "response.status == \'success\'" → "response.status == \'ok\' && response.data.eta != null"' in t
               for t in titles if t)
    assert any("contract refund_payment 3.2.0 → 3.3.0 (minor)" in t for t in titles if t)


# ----------------------------------------------------------------------------- defaults, folders, errors
def test_default_base_is_the_merge_base_and_head_the_working_tree(history, monkeypatch):
    repo, shas = history
    done = repo / "orchestration/states/done.yaml"
    original = done.read_text()
    done.write_text("id: done\ntype: succeed\ndescription: all good\n")
    status = git(repo, "status", "--porcelain")
    try:
        monkeypatch.chdir(repo / "orchestration")
        result = CliRunner().invoke(main, ["diff", "--format", "json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        assert data["base"] == f"merge-base with main ({shas['base'][:7]})" and data["head"] == "working tree"
        ids = [(c["kind"], c["op"], c["id"]) for c in data["changes"]]
        assert ("state", "changed", "done") in ids and ("policy", "changed", "refunds") in ids
        assert len(ids) == 11
        assert git(repo, "status", "--porcelain") == status
    finally:
        done.write_text(original)


def test_two_folders(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    write_tree(old, BASE)
    write_tree(new, head_files())
    data = json.loads(run_diff(new, str(old), str(new), "--format", "json"))
    assert data["base"] == str(old) and data["head"] == str(new)
    assert data["summary"] == {"added": 4, "removed": 2, "changed": 4, "risks": 3, "flows_affected": 2}


def test_formatting_alone_is_no_change(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    write_tree(old, BASE)
    files = dict(BASE)
    del files["orchestration/states/get_logistics.yaml"]
    files["orchestration/states/get_logistics.json"] = json.dumps({  # YAML -> JSON, keys reordered, 3s -> 3000ms
        "on_error": [{"errors": ["ToolTimeout"], "fallback": "get_logistics_cache@^1"},
                     {"goto": "escalate", "errors": ["SchemaMismatch"]}],
        "retry": [{"interval": "1000ms", "max_attempts": 3, "errors": ["ToolTimeout", "ToolUnavailable"]}],
        "timeout": "3000ms", "input": {"order_id": "context.order_id"}, "tool": "get_logistics@^2",
        "type": "task", "id": "get_logistics"}, indent=1)
    files["orchestration/policies/refunds.yaml"] = "# comment\n" + files["orchestration/policies/refunds.yaml"]
    write_tree(new, files)
    out = run_diff(new, str(old), str(new))
    assert out == f"flowctl diff {old} → {new}: no changes\n"
    md = run_diff(new, str(old), str(new), "--format", "markdown")
    assert "**no changes**" in md and "No change to flows" in md


def test_files_that_do_not_load_are_not_reported_as_removed(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    write_tree(old, BASE)
    files = dict(BASE)
    files["orchestration/states/refund.yaml"] = "id: refund\ntype: task\ntool: [\n"
    write_tree(new, files)
    data = json.loads(run_diff(new, str(old), str(new), "--format", "json"))
    assert data["changes"] == []
    assert data["warnings"] == [f"{new}: 1 file(s) have errors (run flowctl validate); what does not load is left out of the diff",
                                "state refund does not load on one side; not compared"]
    # the summary line and the PR comment say so too: "no changes" would vouch for the broken file
    assert run_diff(new, str(old), str(new)).startswith(f"flowctl diff {old} → {new}: no changes among the files that load")
    md = run_diff(new, str(old), str(new), "--format", "markdown")
    assert "**no changes among the files that load**" in md and "> [!WARNING]" in md


def test_errors_are_exit_2_with_a_hint_and_no_traceback(history, tmp_path, monkeypatch):
    repo, _ = history
    runner = CliRunner()
    result = runner.invoke(main, ["diff", "no-such-rev", "--root", str(repo)])
    assert result.exit_code == 2
    assert "error: [USAGE] 'no-such-rev' is neither a git revision nor a folder" in result.output
    assert "hint:" in result.output and "Traceback" not in result.output
    plain = tmp_path / "plain"
    write_tree(plain, BASE)
    monkeypatch.chdir(plain)
    result = runner.invoke(main, ["diff"])
    assert result.exit_code == 2 and "is not inside a git repository" in result.output
    assert "hint: pass two folders" in result.output
    result = runner.invoke(main, ["diff", "missing_dir"])
    assert result.exit_code == 2 and "'missing_dir' is not a folder holding orchestration/" in result.output


# ----------------------------------------------------------------------------- rules
def project(files):
    return load_files({k: v.encode() for k, v in files.items()}, ".")


def test_reordered_transitions_and_handlers_are_order_changes():
    files = dict(BASE)
    flow = files["orchestration/transitions/order_return.yaml"]
    files["orchestration/transitions/order_return.yaml"] = flow.replace(
        "  - from: escalate\n    when: \"review.decision == 'approve'\"\n    to: refund\n  - from: escalate\n    to: failed\n",
        "  - from: escalate\n    to: failed\n  - from: escalate\n    when: \"review.decision == 'approve'\"\n    to: refund\n")
    state = files["orchestration/states/get_logistics.yaml"]
    files["orchestration/states/get_logistics.yaml"] = state.replace(
        "  - errors: [ToolTimeout]\n    fallback: get_logistics_cache@^1\n  - errors: [SchemaMismatch]\n    goto: escalate\n",
        "  - errors: [SchemaMismatch]\n    goto: failed\n  - errors: [ToolTimeout]\n    fallback: get_logistics_cache@^1\n")
    d = diff_projects(project(BASE), project(files))
    got = [(c.kind, c.id, [f.text() for f in c.fields]) for c in d.changes]
    assert got == [
        ("transition", "escalate -> failed", ["order 2 → 1"]),
        ("transition", "escalate -> refund", ["order 1 → 2"]),
        ("handler", "on_error[SchemaMismatch]", ['goto "escalate" → "failed"', "order 2 → 1"]),
        ("handler", "on_error[ToolTimeout]", ["order 1 → 2"]),
    ]
    assert d.changes[2].title == "handler state get_logistics: on_error[SchemaMismatch]"
    assert d.affected == {"order_return": ["state get_logistics"]}


@pytest.mark.parametrize("before, after, expected", [
    ({"range": [0, 500]}, {"range": [0, 5000]}, ["input.x range widened [0, 500] → [0, 5000]"]),
    ({"range": [0, 500]}, {"range": [10, 500]}, []),
    ({"range": [0, 500]}, {"range": [None, 500]}, ["input.x range widened [0, 500] → [null, 500]"]),
    ({"in": ["a"]}, {"in": ["a", "b"]}, ['input.x now also allows ["b"]']),
    ({"in": ["a", "b"]}, {"in": ["a"]}, []),
    ({"equals": "a"}, {"equals": "b"}, ['input.x now allows "b" instead of "a"']),
    ({"regex": "^a$"}, {"regex": "^a.*$"}, ['input.x regex changed (may allow more): "^a$" → "^a.*$"']),
    ({"in": ["a"]}, {"regex": "a"}, ["check on input.x changed from in to regex (may allow more)"]),
])
def test_policy_check_loosening(before, after, expected):
    b = {"policy": "p", "applies_to": ["t"], "allow": [{"field": "input.x", **before}]}
    a = {"policy": "p", "applies_to": ["t"], "allow": [{"field": "input.x", **after}]}
    assert [r.message for r in policy_risks(b, a, "p")] == [f"policy p: {m}" for m in expected]


def test_policy_limits_loosening():
    b = {"applies_to": ["t"], "allow": [{"field": "f", "in": [1]}], "rate": {"max": 5, "window": "1m"},
         "dedupe": {"window": "30s"}, "review_when": "input.n > `10`"}
    a = {"applies_to": ["t", "u"], "allow": [], "rate": {"max": 10, "window": "30s", "per": "run"},
         "dedupe": {"window": "10s"}}
    assert [r.message for r in policy_risks(b, a, "p")] == [
        "policy p: now applies to u (allowed when the checks hold)", "policy p: check on f removed",
        "policy p: rate max raised 5 → 10", "policy p: rate window shortened 1m → 30s",
        "policy p: rate counted per run instead of per flow (may allow more)",
        "policy p: dedupe window shortened 30s → 10s", 'policy p: review_when "input.n > `10`" removed']
    assert [r.code for r in policy_risks(None, a, "p")] == ["policy_added"]
    assert policy_risks(b, None, "p") == []
    tighter = {**b, "rate": {"max": 2, "window": "5m"}, "dedupe": {"window": "1m"}}
    assert policy_risks(b, tighter, "p") == []


def test_contract_undo_removed_and_new_versions_alongside():
    files = dict(BASE)
    files["orchestration/contracts/refund_payment.v4.0.0.yaml"] = files["orchestration/contracts/refund_payment.v3.2.0.yaml"] \
        .replace("version: 3.2.0", "version: 4.0.0").replace("compensate: shop_tools.payments:cancel_refund",
                                                             "compensate: none\nreason: refunds cannot be undone")
    d = diff_projects(project(BASE), project(files))
    [c] = d.changes
    assert (c.kind, c.op, c.id, c.summary) == ("contract", "changed", "refund_payment", "3.2.0 → 4.0.0 (major; 3.2.0 kept)")
    assert [f.text() for f in c.fields] == ['version "3.2.0" → "4.0.0"',
                                            'compensate "shop_tools.payments:cancel_refund" → "none"',
                                            '+ reason "refunds cannot be undone"']
    assert [r.code for r in c.risks] == ["undo_removed"]


def test_state_calling_a_side_effecting_tool_is_a_risk():
    files = dict(BASE)
    files["orchestration/states/validate_order.yaml"] = "id: validate_order\ntype: task\ntool: refund_payment@^3\n"
    d = diff_projects(project(BASE), project(files))
    [c] = d.changes
    assert [f.text() for f in c.fields] == ['- description "Is the return request complete?"', 'type "choice" → "task"',
                                            '+ tool "refund_payment@^3"']
    assert [r.message for r in c.risks] == [
        "state validate_order now calls refund_payment@^3, which has side effects: external_api_call → pay-gateway/refund"]


def test_field_changes_match_rules_by_key_and_compare_durations_by_value():
    before = {"retry": [{"errors": ["A"], "max_attempts": 2}, {"errors": ["B"], "max_attempts": 3}], "timeout": "1m"}
    after = {"retry": [{"errors": ["C"], "max_attempts": 1}, {"errors": ["A"], "max_attempts": 2},
                       {"errors": ["B"], "max_attempts": 4}], "timeout": "60s"}
    assert [f.text() for f in field_changes(before, after)] == [
        "retry[B].max_attempts 3 → 4", '+ retry[C] {"errors": ["C"], "max_attempts": 1}']
    assert field_changes({"x": 1}, {"x": True})[0].text() == "x 1 → true"
    assert field_changes({"x": 1}, {"x": 1.0}) == []


def test_added_and_removed_flows():
    files = dict(BASE)
    del files["orchestration/transitions/quick_refund.yaml"]
    files["orchestration/transitions/express.yaml"] = "flow: express\nstart: refund\ntransitions:\n  - {from: refund, to: done}\n"
    d = diff_projects(project(BASE), project(files), "a", "b")
    assert diff_render.text(d).splitlines()[:4] == [
        "flowctl diff a → b: 1 added, 1 removed, 0 changed", "",
        "+ flow express (2 states, 1 transition)", "- flow quick_refund (2 states, 1 transition)"]
    charts = {c.flow: c.text.splitlines() for c in mermaid_charts(d)}
    assert charts["express"][2:7] == ['  x_start((" "))', '  s_done((("+ done")))', '  s_refund("+ refund<br/>refund_payment@^3")',
                                      '  x_start -->|"+"| s_refund', '  s_refund -->|"+"| s_done']
    assert '  s_refund -.->|"−"| s_done' in charts["quick_refund"]
    assert "  class x_start,s_done,s_refund removed" in charts["quick_refund"]


SAGA = {
    "orchestration/states/pay.yaml": "id: pay\ntype: task\ntool: pay@^1\n",
    "orchestration/states/paid.yaml": "id: paid\ntype: succeed\n",
    "orchestration/states/stop.yaml": "id: stop\ntype: fail\nerror: Stopped\ncompensate: true\n",
    "orchestration/states/each.yaml": "id: each\ntype: map\nflow: pay_one\nitems: input.claims\n",
    "orchestration/contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:pay\n",
    "orchestration/transitions/pay_one.yaml": "flow: pay_one\nstart: pay\ntransitions:\n  - {from: pay, to: paid}\n"
                                              "on_error:\n  - errors: ['*']\n    compensate: true\n    goto: stop\n",
    "orchestration/transitions/batch.yaml": "flow: batch\nstart: each\ntransitions:\n  - {from: each, to: paid}\n",
}


def test_dropping_compensation_is_a_risk_and_a_parent_flow_is_affected_through_its_child():
    files = dict(SAGA)
    files["orchestration/transitions/pay_one.yaml"] = SAGA["orchestration/transitions/pay_one.yaml"].replace(
        "compensate: true", "compensate: false")
    files["orchestration/states/stop.yaml"] = SAGA["orchestration/states/stop.yaml"].replace("compensate: true\n", "")
    d = diff_projects(project(SAGA), project(files))
    assert [(c.kind, r.code, r.message) for c, r in d.risks()] == [
        ("handler", "compensation_dropped",
         "flow pay_one: on_error[*]: compensate true → false; a run failing here keeps its side effects"),
        ("state", "compensation_dropped",
         "state stop: compensate true → false; a run failing here keeps its side effects")]
    # `batch` maps over `pay_one`: it runs the changed handler and state too
    assert d.affected == {"batch": ["flow pay_one"], "pay_one": ["state stop"]}


def test_fail_on_risk_exits_1_on_a_flagged_change_and_0_otherwise(history):
    # without the flag a risk is exit 0 (the diff is a report); with it, a CI gate
    repo, shas = history
    risky = [shas["add_side_effect"] + "~1", shas["add_side_effect"], "--root", str(repo)]
    assert CliRunner().invoke(main, ["diff", *risky]).exit_code == 0
    result = CliRunner().invoke(main, ["diff", *risky, "--fail-on-risk"])
    assert result.exit_code == 1 and "side effect" in result.output, result.output
    calm = [shas["raise_retries"] + "~1", shas["raise_retries"], "--root", str(repo), "--fail-on-risk"]
    assert CliRunner().invoke(main, ["diff", *calm]).exit_code == 0


def test_fail_on_risk_fails_when_a_file_of_head_does_not_load(tmp_path):
    """(new-user finding: HEAD's policy file did not load, the diff said 'no changes among the
    files that load', and --fail-on-risk exited 0: what cannot be compared cannot be vouched for)"""
    from support.helpers import MINIMAL, write_project

    policy = "policy: p\napplies_to: [nothing]\nallow: []\n"
    base = write_project(tmp_path / "base", dict(MINIMAL, **{"policies/p.yaml": policy}))
    head = write_project(tmp_path / "head", dict(MINIMAL, **{"policies/p.yaml": policy + "allow: [\n"}))
    result = CliRunner().invoke(main, ["diff", str(base), str(head), "--fail-on-risk"])
    assert result.exit_code == 1, result.output
    assert "file(s) of" in result.output and "do not load" in result.output
    assert CliRunner().invoke(main, ["diff", str(base), str(head)]).exit_code == 0  # a report, without the flag
    assert CliRunner().invoke(main, ["diff", str(base), str(base), "--fail-on-risk"]).exit_code == 0
