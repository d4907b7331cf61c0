"""Project size does not tax every command (issue 17, target 6).

``flowctl run FLOW`` loads and validates only the files FLOW reaches, yet pins the same definition
snapshot (and digest) as a whole-project load and refuses a broken flow exactly as before; the
per-file facts it caches in ``.flowctl/cache/`` are keyed by content and never make a broken flow
run. The read commands (runs, trace, audit, stats, reviews) find the store without loading the
project at all.
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from flowctl.cli.commands._common import open_engine
from flowctl.cli.main import main
from flowctl.definition import loader
from flowctl.definition.loader import load_project
from flowctl.definition.partial import CACHE_NAME, file_key, load_for_flow
from flowctl.engine.engine import Engine
from flowctl.errors import ProjectError
from flowctl.store.sql import MemoryStore
from support.helpers import write_project

TOOLS = """
def look(input, call):
    return {"status": "ok"}

def pay(input, call):
    return {"paid": True}

def same(input, call):
    return {"paid": True}

def check(input, output, call):
    return True

def undo(input, output, call):
    return None
"""

FILES = {
    "tools/tk.py": TOOLS,
    "contracts/look.v1.0.0.yaml": "id: look\nversion: 1.0.0\nentrypoint: tk:look\n",
    "contracts/look.v1.1.0.yaml": "id: look\nversion: 1.1.0\nentrypoint: tk:look\n",
    "contracts/pay.v1.0.0.yaml": ("id: pay\nversion: 1.0.0\nentrypoint: tk:pay\nverify: tk:check\n"
                                  "compensate: tk:undo\nside_effects:\n  - {type: payment, target: card}\n"),
    "contracts/other.v1.0.0.yaml": "id: other\nversion: 1.0.0\nentrypoint: tk:same\n",
    "policies/cap.yaml": "policy: cap\napplies_to: [look]\nallow: []\n",
    "states/a.yaml": "id: a\ntype: task\ntool: look@^1\n",
    "states/b.yaml": "id: b\ntype: subflow\nflow: child\n",
    "states/c.yaml": "id: c\ntype: task\ntool: look@^1\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/u.yaml": "id: u\ntype: task\ntool: other@^1\n",
    "states/bad.yaml": "id: bad\ntype: task\n  tool: [\n",  # a syntax error, used by no flow it runs
    "transitions/main.yaml": ("flow: main\nstart: a\ntransitions:\n  - {from: a, to: b}\n"
                              "  - {from: b, to: done}\n"),
    "transitions/child.yaml": "flow: child\nstart: c\ntransitions:\n  - {from: c, to: done}\n",
    "transitions/elsewhere.yaml": "flow: elsewhere\nstart: u\ntransitions:\n  - {from: u, to: done}\n",
}


@pytest.fixture
def root(tmp_path):
    return write_project(tmp_path / "p", FILES)


def test_a_flow_loads_only_what_it_reaches_but_pins_the_whole_snapshot(root):
    whole = load_project(root)
    for _ in range(2):  # cold cache, then warm
        part = load_for_flow(root, "main")
        assert set(part.flows) == {"main", "child"}  # the flow and the one its subflow state starts
        assert set(part.states) == {"a", "b", "c", "done"}
        assert [c.version for c in part.contracts["look"]] == ["1.0.0", "1.1.0"]  # every version
        assert "pay" in part.contracts  # side-effecting: the gate must know its function
        assert "other" not in part.contracts and "u" not in part.states
        assert set(part.policies) == {"cap"}
        assert part.snapshot == whole.snapshot and part.digest() == whole.digest()
        assert "orchestration/states/bad.yaml" not in part.snapshot  # rejected, as a whole load rejects it
    assert (root / ".flowctl" / "cache" / CACHE_NAME).is_file()


def test_a_run_keeps_the_digest_a_whole_project_run_keeps(root, tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    engine = open_engine(root, db, progress=False, flow="main")
    try:
        result = engine.run("main", {})
        assert result.status == "succeeded", result.error
        row = engine.store.get_run(result.run_id)
        assert row["digest"] == load_project(root).digest()
        assert engine.store.load_definition(row["digest"]) == dict(load_project(root).snapshot)
        other = engine.project_for(row["digest"])  # a run of another flow pinned to it (a due review)
        assert "elsewhere" in other.flows
    finally:
        engine.store.close()


def _outcome(root, flow, partial: bool) -> str:
    """How ``flowctl run FLOW`` ends: the refusal's message (nothing started), or the run's status."""
    engine = (open_engine(root, "memory", progress=False, flow=flow) if partial
              else Engine(load_project(root), MemoryStore()))
    try:
        return engine.run(flow, {}).status
    except ProjectError as exc:
        assert engine.store.list_runs() == []  # a refused run started nothing
        return f"refused: {exc}"


@pytest.mark.parametrize("change, refused", [
    ({"states/c.yaml": "id: c\ntype: task\ntool: look@^1\ninput: {x: 'nope(}\n"}, True),  # broken expression
    ({"states/c.yaml": "id: c\ntype: task\ntool: missing@^1\n"}, True),  # an unknown tool
    ({"states/c.yaml": "id: c\ntype: task\n  tool: [\n"}, True),  # a syntax error: the state does not load
    ({"states/a.yml": "id: a\ntype: succeed\n"}, False),  # a duplicate after a.yaml: a.yaml still loads
    ({"states/_a.yaml": "id: a\ntype: succeed\n"}, True),  # FC005, and it makes a.yaml a duplicate (FC006)
    # FC604: a version of the tool that does not load: refused (it could be the one ^1 means)
    ({"contracts/look.v1.1.0.yaml": "id: look\nversion: 1.2.0\nentrypoint: tk:look\n"}, True),
    ({"transitions/child.yaml": None}, True),  # a child flow that is not there
    ({"states/u.yaml": "id: u\ntype: task\ntool: missing@^1\n"}, False),  # another flow's error
])
def test_a_broken_flow_is_refused_exactly_as_before(root, change, refused):
    load_for_flow(root, "main")  # a warm cache of the project as it was
    for rel, text in change.items():
        path = root / "orchestration" / rel
        if text is None:
            path.unlink()
        else:
            path.write_text(text)
    expected = _outcome(root, "main", partial=False)
    assert expected.startswith("refused: ") == refused, expected
    assert _outcome(root, "main", partial=True) == expected


def test_a_corrupt_or_forged_cache_never_lets_a_broken_flow_run(root):
    load_for_flow(root, "main")
    cache = root / ".flowctl" / "cache" / CACHE_NAME
    broken = b"id: c\ntype: task\n  tool: [\n"
    (root / "orchestration" / "states" / "c.yaml").write_bytes(broken)
    entries = json.loads(cache.read_text())["entries"]
    entries[file_key("orchestration/states/c.yaml", broken)] = [False, "state", "c", False, None]  # "it loads"
    entries["0" * 64] = "garbage"
    cache.write_text(json.dumps({"version": 1, "entries": entries}))
    expected = _outcome(root, "main", partial=False)
    assert expected.startswith("refused: "), expected
    assert _outcome(root, "main", partial=True) == expected
    cache.write_text("{not json")
    assert _outcome(root, "main", partial=True) == expected
    assert load_for_flow(root, "elsewhere").digest() == load_project(root).digest()  # the cache was rebuilt


def test_a_changed_file_invalidates_its_cached_facts(root):
    load_for_flow(root, "main")
    (root / "orchestration" / "states" / "bad.yaml").write_text("id: bad\ntype: succeed\n")  # now it loads
    part = load_for_flow(root, "main")
    assert "orchestration/states/bad.yaml" in part.snapshot
    assert part.digest() == load_project(root).digest()


def test_read_commands_do_not_load_the_project(root, tmp_path, monkeypatch):
    db = f"sqlite:///{tmp_path}/r.db"
    engine = open_engine(root, db, progress=False, flow="main")
    try:
        run_id = engine.run("main", {}).run_id
    finally:
        engine.store.close()

    def refuse(*args, **kwargs):
        raise AssertionError("a read command loaded the project")

    monkeypatch.setattr(loader, "load_files", refuse)
    monkeypatch.setattr(loader, "read_tree", refuse)
    common = ["--root", str(root), "--db", db]
    for argv in (["runs"], ["trace", run_id], ["audit", "verify", run_id], ["stats"], ["reviews"],
                 ["audit", "log", run_id]):
        result = CliRunner().invoke(main, argv + common)
        assert result.exit_code == 0, (argv, result.output, result.exception)
    assert run_id in CliRunner().invoke(main, ["runs", *common]).output


@pytest.mark.parametrize("files", [
    {  # pay's function under another name, read-only, while a policy guards pay
        "contracts/alias.v1.0.0.yaml": "id: alias\nversion: 1.0.0\nentrypoint: tk:pay\n",
        "policies/guard.yaml": "policy: guard\napplies_to: [pay]\nallow:\n  - {field: amount, equals: 1}\n",
    },
    {  # a side effect declared for a function that another contract (used by no flow here) calls read-only
        "contracts/alias.v1.0.0.yaml": ("id: alias\nversion: 1.0.0\nentrypoint: tk:same\nverify: tk:check\n"
                                        "compensate: tk:undo\nside_effects:\n  - {type: payment, target: card}\n"),
    },
])
def test_contracts_naming_one_function_are_checked_together(root, files):
    write_project(root, dict(files, **{
        "states/sneak.yaml": "id: sneak\ntype: task\ntool: alias@^1\ninput: {amount: '`2`'}\n",
        "transitions/sneaky.yaml": "flow: sneaky\nstart: sneak\ntransitions:\n  - {from: sneak, to: done}\n",
    }))
    expected = _outcome(root, "sneaky", partial=False)
    assert "is the same function as" in expected and "(and " not in expected, expected  # the gate follows the function
    load_for_flow(root, "sneaky")
    assert _outcome(root, "sneaky", partial=True) == expected
