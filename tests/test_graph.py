"""flowctl graph: the graph of a flow and its DOT, SVG, PNG and mermaid renderings."""
from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from support.flow_fixtures import BASE, parse_mermaid, write_tree
from flowctl.graph import flowgraph as g
from flowctl.cli.main import main
from flowctl.errors import UsageError
from flowctl.definition.loader import load_project

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")

CHILDREN = {
    "orchestration/states/reserve_stock.yaml": "id: reserve_stock\ntype: parallel\nbranches: [update_stock, send_event]\n",
    "orchestration/states/each_version.yaml": "id: each_version\ntype: map\nitems: input.versions\nflow: update_stock\n",
    "orchestration/states/pause.yaml": "id: pause\ntype: wait\nduration: 5m\n",
    "orchestration/states/noop.yaml": "id: noop\ntype: pass\nset: {x: input.x}\n",
    "orchestration/transitions/restock.yaml": """\
flow: restock
start: reserve_stock
transitions:
  - {from: reserve_stock, to: each_version}
  - {from: each_version, to: pause}
  - {from: pause, to: noop}
  - {from: noop, to: done}
""",
    "orchestration/transitions/update_stock.yaml": "flow: update_stock\nstart: noop\ntransitions: [{from: noop, to: done}]\n",
    "orchestration/transitions/send_event.yaml": "flow: send_event\nstart: noop\ntransitions: [{from: noop, to: done}]\n",
}


@pytest.fixture()
def project_dir(tmp_path):
    write_tree(tmp_path, {**BASE, **CHILDREN})
    return tmp_path


@pytest.fixture()
def project(project_dir):
    return load_project(project_dir)


def test_nodes_have_stable_ids_types_and_annotations(project):
    graph = g.build_graph(project, "order_return")
    assert list(graph.nodes) == ["/start", "/on_error", "done", "escalate", "failed", "get_logistics", "refund",
                                 "validate_order"]
    types = {n.id: n.type for n in graph.nodes.values()}
    assert types == {"/start": "start", "/on_error": "flow_handlers", "done": "succeed", "escalate": "review",
                     "failed": "fail", "get_logistics": "task", "refund": "task", "validate_order": "choice"}
    gl = graph.nodes["get_logistics"]
    assert gl.lines == ("get_logistics@^2", "retry ×3", "fallback: get_logistics_cache@^1")
    assert "on_error SchemaMismatch: goto escalate" in gl.tooltip
    assert graph.nodes["/on_error"].lines == ("any error → compensate, fail ReturnFailed",)


def test_edges_kinds_labels_and_keys(project):
    graph = g.build_graph(project, "order_return")
    edges = {e.key: (e.kind, e.label) for e in graph.edges}
    assert edges == {
        "start:/start->validate_order": ("start", ""),
        "transition:validate_order->get_logistics": ("transition", "context.amount > `0`"),
        "transition:validate_order->failed": ("transition", "otherwise"),
        "transition:get_logistics->refund": ("transition", "response.status == 'success'"),
        "transition:get_logistics->escalate": ("transition", "otherwise"),
        "transition:refund->done": ("transition", ""),
        "transition:escalate->refund": ("transition", "review.decision == 'approve'"),
        "transition:escalate->failed": ("transition", "otherwise"),
        "error:get_logistics->escalate": ("error", "SchemaMismatch"),
        "timeout:escalate->failed": ("timeout", "timeout"),
        "flow_error:/on_error->escalate": ("flow_error", "PolicyDenied"),
    }
    assert [e.dashed for e in graph.edges if e.kind != "transition" and e.kind != "start"] == [True, True, True]


def test_long_conditions_are_shortened_with_the_full_text_in_the_title(project_dir):
    long = "response.status == 'success' && response.data.eta != null && context.amount < `100`"
    flow = project_dir / "orchestration/transitions/order_return.yaml"
    flow.write_text(flow.read_text().replace("response.status == 'success'", long))
    edge = next(e for e in g.build_graph(load_project(project_dir), "order_return").edges
                if e.key == "transition:get_logistics->refund")
    assert edge.label == "response.status == 'success' &&…" and len(edge.label) == g.LABEL_WIDTH
    assert edge.title == f"{long}\nset: eta"
    assert edge.condition == long


def test_child_flows_are_collapsed_nodes(project):
    graph = g.build_graph(project, "restock")
    assert {n.id: n.type for n in graph.nodes.values() if n.type == "child_flow"} == {
        "flow/update_stock": "child_flow", "flow/send_event": "child_flow"}
    child_edges = [(e.source, e.target, e.label) for e in graph.edges if e.kind == "child"]
    assert child_edges == [("reserve_stock", "flow/update_stock", "branch"), ("reserve_stock", "flow/send_event", "branch"),
                           ("each_version", "flow/update_stock", "each item")]
    assert graph.nodes["flow/update_stock"].lines == ("2 states",)
    assert g.build_graph(project, "restock", children=False).nodes.keys().isdisjoint({"flow/update_stock"})


def test_unknown_and_broken_flows(project_dir):
    project = load_project(project_dir)
    with pytest.raises(UsageError) as info:
        g.build_graph(project, "order_retrun")
    assert info.value.hint == "did you mean 'order_return'?"
    (project_dir / "orchestration/transitions/quick_refund.yaml").write_text("flow: quick_refund\nstart: [\n")
    from flowctl.errors import ProjectError

    with pytest.raises(ProjectError, match="does not load"):
        g.build_graph(load_project(project_dir), "quick_refund")


def test_unknown_state_is_drawn_as_missing(project_dir):
    flow = project_dir / "orchestration/transitions/quick_refund.yaml"
    flow.write_text(flow.read_text().replace("to: done", "to: finish"))
    node = g.build_graph(load_project(project_dir), "quick_refund").nodes["finish"]
    assert node.type == "unknown" and node.label == "? finish" and "is not defined" in node.tooltip


# ----------------------------------------------------------------------------- DOT
def test_dot_shapes_styles_and_ids(project):
    dot = g.to_dot(g.build_graph(project, "order_return"))
    lines = dot.splitlines()
    assert lines[0] == "digraph order_return {"
    node = next(line for line in lines if line.strip().startswith("get_logistics ["))
    assert "shape=box" in node and 'style="rounded,filled"' in node and "id=s_get_logistics" in node
    assert 'label="get_logistics\\nget_logistics@^2\\nretry ×3\\nfallback: get_logistics_cache@^1"' in node
    assert "shape=diamond" in next(line for line in lines if line.strip().startswith("validate_order ["))
    assert "shape=hexagon" in next(line for line in lines if line.strip().startswith("escalate ["))
    assert "shape=doublecircle" in next(line for line in lines if line.strip().startswith("done ["))
    assert "shape=doubleoctagon" in next(line for line in lines if line.strip().startswith("failed ["))
    error = next(line for line in lines if "get_logistics -> escalate [label=SchemaMismatch" in line)
    assert "style=dashed" in error
    ok = next(line for line in lines if "get_logistics -> refund" in line)
    assert "style=dashed" not in ok and "id=e_transition_s_get_logistics_s_refund" in ok


def test_dot_output_diffs_cleanly_when_a_state_is_added(project_dir):
    before = g.to_dot(g.build_graph(load_project(project_dir), "order_return")).splitlines()
    (project_dir / "orchestration/states/audit.yaml").write_text("id: audit\ntype: pass\n")
    flow = project_dir / "orchestration/transitions/order_return.yaml"
    flow.write_text(flow.read_text().replace("  - from: refund\n    to: done\n",
                                             "  - from: refund\n    to: audit\n  - from: audit\n    to: done\n"))
    after = g.to_dot(g.build_graph(load_project(project_dir), "order_return")).splitlines()
    removed = [line for line in before if line not in after]
    added = [line for line in after if line not in before]
    assert [line.split("[")[0].strip() for line in removed] == ["refund -> done"]
    assert [line.split("[")[0].strip() for line in added] == ["audit", "refund -> audit", "audit -> done"]


def test_dot_escapes_quotes_and_backslashes(project_dir):
    flow = project_dir / "orchestration/transitions/quick_refund.yaml"
    flow.write_text('flow: quick_refund\nstart: refund\ntransitions:\n'
                    '  - {from: refund, to: done, when: "contains(context.note, \'a\\\\\\"b\')"}\n'
                    '  - {from: refund, to: failed}\n')
    project = load_project(project_dir)
    assert project.flows["quick_refund"].transitions[0].when == "contains(context.note, 'a\\\"b')"
    dot = g.to_dot(g.build_graph(project, "quick_refund"))
    when = project.flows["quick_refund"].transitions[0].when
    assert g.dot_text(when) == "contains(context.note, 'a" + "\\\\" + "\\\"" + "b')"  # a\\\"b: both escaped
    assert f'label="{g.dot_text(when)}"' in dot
    if shutil.which("dot"):
        svg = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), check=True, capture_output=True).stdout.decode()
        texts = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
        assert "contains(context.note, 'a\\\"b')" in texts


# ----------------------------------------------------------------------------- SVG / PNG
@needs_dot
def test_svg_parses_and_carries_node_ids_shapes_and_tooltips(project):
    svg = g.render(g.build_graph(project, "order_return"), "svg")
    root = ET.fromstring(svg)
    groups = {el.get("id"): el for el in root.iter(f"{SVG}g")}
    for node_id in ("s_get_logistics", "s_validate_order", "s_escalate", "s_done", "s_failed", "x_start", "x_on_error"):
        assert groups[node_id].get("class") == "node"
    assert len(groups["s_validate_order"].find(f".//{SVG}polygon").get("points").split()) == 5  # a diamond (closed)
    edge = groups["e_error_s_get_logistics_s_escalate"]
    assert edge.get("class") == "edge"
    assert edge.find(f".//{SVG}path").get("stroke-dasharray")  # dashed
    titles = [a.get(f"{XLINK}title") for a in root.iter(f"{SVG}a")]
    assert "on_error SchemaMismatch → escalate" in titles
    assert "response.status == 'success'\nset: eta" in titles


@needs_dot
def test_png_bytes(project):
    png = g.render(g.build_graph(project, "order_return"), "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_dot_svg_fails_clearly_and_text_formats_still_work(project, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot here
    graph = g.build_graph(project, "order_return")
    with pytest.raises(UsageError) as info:
        g.render(graph, "svg")
    assert "Graphviz 'dot' program" in info.value.message
    assert "--format dot or --format mermaid" in info.value.hint
    assert g.render(graph, "dot").startswith("digraph")
    assert g.render(graph, "mermaid").startswith("flowchart TD")


# ----------------------------------------------------------------------------- mermaid
EXPECTED_MERMAID = """\
flowchart TD
  %% flow order_return (flowctl graph)
  x_start((" "))
  x_on_error["any state (flow on_error)<br/>any error → compensate, fail ReturnFailed"]
  s_done((("done")))
  s_escalate{{"escalate<br/>approve / reject"}}
  s_failed>"failed<br/>error ReturnFailed"]
  s_get_logistics("get_logistics<br/>get_logistics@^2<br/>retry ×3<br/>fallback: get_logistics_cache@^1")
  s_refund("refund<br/>refund_payment@^3")
  s_validate_order{"validate_order"}
  x_start --> s_validate_order
  s_validate_order -->|"context.amount #gt; `0`"| s_get_logistics
  s_validate_order -->|"otherwise"| s_failed
  s_get_logistics -->|"response.status == 'success'"| s_refund
  s_get_logistics -->|"otherwise"| s_escalate
  s_refund --> s_done
  s_escalate -->|"review.decision == 'approve'"| s_refund
  s_escalate -->|"otherwise"| s_failed
  s_escalate -.->|"timeout"| s_failed
  s_get_logistics -.->|"SchemaMismatch"| s_escalate
  x_on_error -.->|"PolicyDenied"| s_escalate
"""


def test_mermaid_structure_line_by_line(project):
    text = g.to_mermaid(g.build_graph(project, "order_return"))
    lines = text.splitlines()
    expected = EXPECTED_MERMAID.splitlines()
    assert lines[: len(expected)] == expected
    rest = lines[len(expected):]
    assert all(line.startswith(("  classDef t_", "  class ")) for line in rest)
    assert "  class s_failed t_fail" in rest and "  class s_escalate t_review" in rest


def test_mermaid_escapes_and_keeps_full_conditions_in_comments(project_dir):
    long = 'contains(context.note, "<b>#1</b>") && context.amount > `100` && context.ok'
    flow = project_dir / "orchestration/transitions/quick_refund.yaml"
    flow.write_text("flow: quick_refund\nstart: refund\ntransitions:\n"
                    f"  - from: refund\n    when: '{long}'\n    to: done\n  - {{from: refund, to: failed}}\n")
    text = g.to_mermaid(g.build_graph(load_project(project_dir), "quick_refund"))
    assert f"  %% s_refund -> s_done when: {long}" in text.splitlines()
    edge = next(line for line in text.splitlines() if line.startswith("  s_refund -->|"))
    assert edge == '  s_refund -->|"contains(context.note, #quot;#lt;b#gt;#35;1#lt;/…"| s_done'


def test_mermaid_is_accepted_by_the_real_parser(project_dir):
    (project_dir / "orchestration/states/we-ird.name.yaml").write_text("id: we-ird.name\ntype: pass\n")
    flow = project_dir / "orchestration/transitions/quick_refund.yaml"
    flow.write_text('flow: quick_refund\nstart: refund\ntransitions:\n'
                    '  - {from: refund, to: we-ird.name, when: "contains(x, \'<a href=\\"#\\">|end|</a>\')"}\n'
                    '  - {from: refund, to: end}\n  - {from: we-ird.name, to: done}\n')
    project = load_project(project_dir)
    texts = [g.to_mermaid(g.build_graph(project, f)) for f in ("order_return", "quick_refund", "restock")]
    results = parse_mermaid(texts + ["flowchart TD\n  a[\"x\" -->\n"])
    assert [r["ok"] for r in results] == [True, True, True, False]  # the parser does reject bad text
    assert {r.get("type") for r in results[:3]} == {"flowchart-v2"}


# ----------------------------------------------------------------------------- CLI
def test_cli_graph_formats_and_output_files(project_dir, tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["graph", "order_return", "--root", str(project_dir)])
    assert result.exit_code == 0 and result.output.startswith("digraph order_return {")
    result = runner.invoke(main, ["graph", "order_return", "--root", str(project_dir), "--format", "mermaid"])
    assert result.exit_code == 0 and result.output.startswith("flowchart TD\n")
    if shutil.which("dot"):
        out = tmp_path / "g.svg"
        result = runner.invoke(main, ["graph", "order_return", "--root", str(project_dir), "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert ET.parse(out).getroot().tag == f"{SVG}svg"
        png = tmp_path / "g.png"
        assert runner.invoke(main, ["graph", "order_return", "--root", str(project_dir), "-o", str(png)]).exit_code == 0
        assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_graph_errors_are_exit_2_with_hints(project_dir, tmp_path, monkeypatch):
    runner = CliRunner()
    result = runner.invoke(main, ["graph", "order_retrun", "--root", str(project_dir)])
    assert result.exit_code == 2
    assert "error: [USAGE] no flow 'order_retrun'" in result.output
    assert "hint: did you mean 'order_return'?" in result.output
    result = runner.invoke(main, ["graph", "order_return", "--root", str(project_dir), "-o", str(tmp_path / "g.txt")])
    assert result.exit_code == 2 and "cannot tell the format" in result.output
    monkeypatch.setenv("PATH", str(tmp_path))
    result = runner.invoke(main, ["graph", "order_return", "--root", str(project_dir), "--format", "svg"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "hint: install Graphviz" in result.output and "--format mermaid" in result.output


def test_validate_does_not_import_graphviz_or_networkx(project_dir):
    code = ("import sys; from flowctl.cli.main import main\n"
            "try:\n    main(['validate', '--root', sys.argv[1]])\nexcept SystemExit: pass\n"
            "bad = [m for m in ('graphviz', 'networkx', 'flowctl.graph.flowgraph', 'flowctl.diff.core') if m in sys.modules]\n"
            "print('IMPORTED', bad)")
    import sys

    out = subprocess.run([sys.executable, "-c", code, str(project_dir)], capture_output=True, text=True).stdout
    assert out.strip().endswith("IMPORTED []")


def test_show_data_annotates_each_state_with_what_is_defined_on_entry():
    from support.helpers import REPO

    result = CliRunner().invoke(main, ["graph", "order_return", "--root", str(REPO), "--format", "mermaid", "--show-data"])
    assert result.exit_code == 0, result.output
    lines = {line.split("(", 1)[0].split("[", 1)[0].split("{", 1)[0].split(">", 1)[0].strip(): line
             for line in result.output.splitlines() if line.strip().startswith("s_")}
    assert "in: (nothing set)" in lines["s_validate_order"]  # the start: nothing set yet
    assert "in: amount, carrier, category" in lines["s_check_return_policy"]  # set by validate_order's transition
    assert "denied_by?" in lines["s_return_failed"]  # set by one handler only
    plain = CliRunner().invoke(main, ["graph", "order_return", "--root", str(REPO), "--format", "mermaid"])
    assert "in: " not in plain.output
