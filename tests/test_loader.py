"""flowctl.definition.loader: finding orchestration/, loading it into the model, and id/file problems."""
from __future__ import annotations

import pytest

from flowctl.errors import ProjectError
from flowctl.definition.loader import find_root, load_files, load_project, read_tree
from support.helpers import MINIMAL, of, one, problems, where

STATE_FILE = "orchestration/states/{}.yaml"


# ------------------------------------------------------------------ find_root
def test_find_root_from_the_root_the_orchestration_folder_a_subfolder_and_a_file(make_project):
    root = make_project(MINIMAL).resolve()
    assert find_root(root) == root
    assert find_root(root / "orchestration") == root
    assert find_root(root / "orchestration" / "states") == root
    assert find_root(root / "orchestration" / "states" / "done.yaml") == root


def test_find_root_uses_the_current_directory(make_project, monkeypatch):
    root = make_project(MINIMAL).resolve()
    monkeypatch.chdir(root / "orchestration" / "transitions")
    assert find_root() == root


def test_find_root_without_orchestration_is_a_project_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProjectError) as info:
        find_root(tmp_path / "empty")
    assert "orchestration/" in info.value.message
    assert "--root" in info.value.hint


# ------------------------------------------------------------------ loading the model
def test_load_project_builds_the_model(make_project):
    root = make_project({
        **MINIMAL,
        "states/fetch.yaml": """
            id: fetch
            type: task
            tool: pay@^1
            input: {order_id: context.order_id}
            timeout: 1h30m
            retry:
              - errors: [ToolTimeout]
                max_attempts: 4
                interval: 500ms
            on_error:
              - errors: [SchemaMismatch]
                goto: done
        """,
        "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:f\ntimeout: 2m\n",
        "contracts/pay.v1.10.0.yaml": "id: pay\nversion: 1.10.0\nentrypoint: m:f\n",
        "contracts/pay.v1.9.0.yaml": "id: pay\nversion: 1.9.0\nentrypoint: m:f\n",
        "policies/p.yaml": "policy: p\napplies_to: [pay]\nrate: {max: 5, window: 1m}\ndedupe: {window: 30s}\n",
    })
    project = load_project(root)
    assert set(project.states) == {"begin", "done", "fetch"}
    fetch = project.states["fetch"]
    assert (fetch.type, fetch.tool, fetch.timeout) == ("task", "pay@^1", 5400.0)
    assert fetch.input == {"order_id": "context.order_id"}
    (retry,) = fetch.retry
    assert (retry.errors, retry.max_attempts, retry.interval, retry.backoff) == (("ToolTimeout",), 4, 0.5, 2.0)
    assert fetch.on_error[0].goto == "done"
    # contract versions: semantic order, lowest first (1.10.0 after 1.9.0)
    assert [c.version for c in project.contracts["pay"]] == ["1.0.0", "1.9.0", "1.10.0"]
    assert project.contracts["pay"][0].timeout == 120.0
    policy = project.policies["p"]
    assert policy.rate == {"max": 5, "window": 60.0, "per": "flow"}
    assert policy.dedupe_window == 30.0
    flow = project.flows["flow"]
    assert (flow.start, [(t.source, t.to) for t in flow.transitions]) == ("begin", [("begin", "done")])
    assert project.diagnostics == ()
    assert project.broken == frozenset()


def test_model_elements_know_where_they_came_from(make_project):
    project = load_project(make_project(MINIMAL))
    (t,) = project.flows["flow"].transitions
    assert t.file == "orchestration/transitions/flow.yaml"
    assert t.where("to") == "orchestration/transitions/flow.yaml:6:9"


def test_load_files_from_memory_equals_load_project(make_project):
    root = make_project(MINIMAL)
    files = read_tree(root)
    assert sorted(files) == ["orchestration/states/begin.yaml", "orchestration/states/done.yaml",
                             "orchestration/transitions/flow.yaml"]
    from_disk = load_project(root)
    in_memory = load_files(files, root)
    assert set(in_memory.states) == set(from_disk.states)
    assert in_memory.digest() == from_disk.digest()


def test_files_outside_the_four_folders_or_with_other_extensions_are_ignored(make_project):
    root = make_project({
        **MINIMAL,
        "tools/helper.py": "x = 1\n",
        "states/README.md": "# notes\n",
        "states/sub/nested.yaml": "id: nested\ntype: succeed\n",
        "examples/input.json": "{}",
        "states/also.yml": "id: also\ntype: succeed\n",
        "states/json_one.json": '{"id": "json_one", "type": "succeed"}',
    })
    project = load_project(root)
    assert set(project.states) == {"begin", "done", "also", "json_one"}


def test_digest_changes_with_content(make_project):
    a = load_project(make_project(MINIMAL))
    b = load_project(make_project({**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\ndescription: x\n"}))
    assert a.digest() == load_project(a.root).digest()
    assert a.digest() != b.digest()


# ------------------------------------------------------------------ YAML 1.1 words stay strings in ids and targets
def test_yaml_1_1_words_in_ids_and_targets_stay_strings(make_project):
    root = make_project({
        "states/no.yaml": "id: no\ntype: succeed\n",
        "states/on.yaml": "id: on\ntype: succeed\n",
        "states/y.yaml": "id: y\ntype: choice\n",
        "states/NO.yaml": "id: NO\ntype: fail\nerror: Nope\n",
        "states/12:30.yaml": "id: 12:30\ntype: succeed\n",
        "transitions/flow.yaml": """
            flow: flow
            start: y
            transitions:
              - from: y
                when: input.a
                to: on
              - from: y
                when: input.b
                to: NO
              - from: y
                when: input.c
                to: 12:30
              - from: y
                to: no
        """,
    })
    project = load_project(root)
    assert set(project.states) == {"no", "on", "y", "NO", "12:30"}
    assert project.states["no"].id == "no"
    flow = project.flows["flow"]
    assert flow.start == "y"
    assert [t.to for t in flow.transitions] == ["on", "NO", "12:30", "no"]
    diags = problems(root)
    assert [d.code for d in diags if d.severity == "error"] == []
    # each plain word is flagged once where it is written, so other YAML tools are not surprised
    fc004 = [(d.file, d.line, d.column) for d in of(diags, "FC004")]
    assert ("orchestration/transitions/flow.yaml", 6, 9) in fc004  # to: on
    assert ("orchestration/transitions/flow.yaml", 2, 8) in fc004  # start: y
    assert ("orchestration/states/no.yaml", 1, 5) in fc004


def test_a_number_like_id_is_an_error_not_a_silent_number(make_project):
    root = make_project({**MINIMAL, "states/010.yaml": "id: 010\ntype: succeed\n"})
    diags = problems(root)
    err = one(diags, "FC010")
    assert where(err) == ("orchestration/states/010.yaml", 1, 5)
    warn = one(diags, "FC004")
    assert where(warn) == ("orchestration/states/010.yaml", 1, 5)
    assert "'010'" in warn.message and "10" in warn.message
    assert "010" not in load_project(root).states


# ------------------------------------------------------------------ FC005 / FC604 file name vs id
def test_state_file_stem_must_equal_its_id(make_project):
    root = make_project({**MINIMAL, "states/done.yaml": "id: finished\ntype: succeed\n"})
    diags = problems(root)
    d = one(diags, "FC005")
    assert (d.severity, *where(d)) == ("error", "orchestration/states/done.yaml", 1, 5)
    assert "done.yaml" in d.message and "finished" in d.message
    project = load_project(root)
    assert "finished" not in project.states and "done" not in project.states
    # the flow's reference to `done` is not reported again as an unknown state
    assert of(diags, "FC101") == []
    assert [x.code for x in diags if x.severity == "error"] == ["FC005"]


@pytest.mark.parametrize(
    "rel, text, line, column",
    [
        ("transitions/other.yaml", "flow: flow2\nstart: begin\ntransitions: []\n", 1, 7),
        ("policies/p.yaml", "policy: q\napplies_to: [x]\n", 1, 9),
        ("contracts/pay.yaml", "id: pay\nversion: 1.0.0\nentrypoint: m:f\n", 1, 5),
        ("contracts/pay.v1.0.0.yaml", "id: charge\nversion: 1.0.0\nentrypoint: m:f\n", 1, 5),
    ],
)
def test_other_kinds_stem_must_match_too(make_project, rel, text, line, column):
    root = make_project({**MINIMAL, rel: text})
    d = one(problems(root), "FC005")
    assert where(d) == (f"orchestration/{rel}", line, column)


def test_contract_file_version_must_match_its_version_field(make_project):
    root = make_project({**MINIMAL, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.1.0\nentrypoint: m:f\n"})
    diags = problems(root)
    d = one(diags, "FC604")
    assert (d.severity, *where(d)) == ("error", "orchestration/contracts/pay.v1.0.0.yaml", 2, 10)
    assert "1.0.0" in d.message and "1.1.0" in d.message
    assert of(diags, "FC005") == []


def test_a_contract_version_that_is_no_semver_is_hinted_to_be_fixed_not_the_file_renamed(make_project):
    root = make_project({**MINIMAL, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: '1.0'\nentrypoint: m:f\n"})
    d = one(problems(root), "FC604")
    assert "semver" in d.hint and "pay.v1.0.yaml" not in d.hint
    assert "rename the file to pay.v1.1.0.yaml" in one(problems(make_project(
        {**MINIMAL, "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.1.0\nentrypoint: m:f\n"})), "FC604").hint


# ------------------------------------------------------------------ FC006 duplicate ids
def test_the_same_id_in_two_files_is_reported(make_project):
    root = make_project({**MINIMAL, "states/done.json": '{"id": "done", "type": "succeed"}'})
    d = one(problems(root), "FC006")
    assert (d.severity, *where(d)) == ("error", "orchestration/states/done.yaml", 1, 5)
    assert "orchestration/states/done.json" in d.message


def test_the_same_contract_version_in_yaml_and_json_is_reported(make_project):
    root = make_project({
        **MINIMAL,
        "contracts/pay.v1.0.0.yaml": "id: pay\nversion: 1.0.0\nentrypoint: m:f\n",
        "contracts/pay.v1.0.0.json": '{"id": "pay", "version": "1.0.0", "entrypoint": "m:f"}',
    })
    d = one(problems(root), "FC006")
    assert d.file == "orchestration/contracts/pay.v1.0.0.yaml"


# ------------------------------------------------------------------ FC012 field for another type
def test_field_of_another_state_type_is_reported_at_its_key(make_project):
    root = make_project({**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\ntool: pay@^1\n"})
    diags = problems(root)
    d = one(diags, "FC012")
    assert (d.severity, *where(d)) == ("error", "orchestration/states/done.yaml", 3, 1)
    assert "task" in d.hint


def test_a_misspelt_field_is_one_unknown_field_not_also_a_wrong_type_field(make_project):
    root = make_project({**MINIMAL, "states/done.yaml": "id: done\ntype: succeed\ndescriptoin: x\n"})
    diags = problems(root)
    assert [d.code for d in diags] == ["FC011"]


# ------------------------------------------------------------------ files that are not one mapping
@pytest.mark.parametrize("text, what", [("- a\n- b\n", "list"), ("just words\n", "str"), ("null\n", "null"),
                                        ("~\n", "null"), ("42\n", "int")])
def test_a_definition_file_must_hold_one_mapping(make_project, text, what):
    root = make_project({**MINIMAL, "states/odd.yaml": text})
    diags = problems(root)
    d = one(diags, "FC010")
    assert (d.file, d.line) == ("orchestration/states/odd.yaml", 1)
    assert what in d.message
    assert ("state", "odd") in load_project(root).broken


def test_a_broken_file_is_left_out_and_kept_in_broken(make_project):
    root = make_project({**MINIMAL, "states/done.yaml": "id: done\ntype: [succeed\n"})
    project = load_project(root)
    assert "done" not in project.states
    assert ("state", "done") in project.broken
    diags = problems(root)
    # the syntax error is the one error: no "unknown state" or "can never end" cascade
    assert [d.code for d in diags if d.severity == "error"] == ["FC001"]
