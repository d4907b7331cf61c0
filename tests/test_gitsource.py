"""Reading orchestration/ trees from git objects (flowctl.definition.gitsource)."""
from __future__ import annotations

import shutil

import pytest

from support.flow_fixtures import BASE, CONTRACT_32, CONTRACT_33, commit_all, git, make_history, write_tree
from flowctl.definition import gitsource
from flowctl.errors import UsageError
from flowctl.definition.loader import load_files

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

DEFINITIONS = {k: v for k, v in BASE.items() if k.startswith("orchestration/") and not k.endswith(".py")}


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    return repo, make_history(repo)


def test_reads_exactly_the_definition_files_of_a_revision(history):
    repo, shas = history
    files = gitsource.read_revision(repo, shas["base"])
    assert files == {k: v.encode() for k, v in DEFINITIONS.items()}  # no tools/*.py, no README


def test_each_revision_sees_its_own_content(history):
    repo, shas = history
    before = gitsource.read_revision(repo, shas["add_side_effect"] + "~1")
    after = gitsource.read_revision(repo, shas["add_side_effect"])
    assert CONTRACT_32 not in before and CONTRACT_33 in before
    assert b"database_write" not in before[CONTRACT_33]
    assert b"database_write" in after[CONTRACT_33]
    assert gitsource.read_revision(repo, "main") == gitsource.read_revision(repo, shas["base"])


def test_loaded_project_matches_the_folder_version(history, tmp_path):
    repo, shas = history
    project = load_files(gitsource.read_revision(repo, shas["base"]), repo)
    assert set(project.states) == {"validate_order", "get_logistics", "refund", "escalate", "done", "failed"}
    assert set(project.flows) == {"order_return", "quick_refund"}
    assert [c.version for c in project.contracts["refund_payment"]] == ["3.2.0"]
    assert project.diagnostics == ()


def test_the_working_tree_and_index_are_not_touched(history):
    repo, shas = history
    state = repo / "orchestration/states/done.yaml"
    state.write_text("id: done\ntype: succeed\ndescription: edited, not committed\n")
    status_before = git(repo, "status", "--porcelain")
    index_before = (repo / ".git/index").read_bytes()
    files = gitsource.read_revision(repo, "HEAD")
    assert files["orchestration/states/done.yaml"] == b"id: done\ntype: succeed\n"
    assert git(repo, "status", "--porcelain") == status_before == "M orchestration/states/done.yaml"
    assert (repo / ".git/index").read_bytes() == index_before
    assert "edited, not committed" in state.read_text()
    git(repo, "checkout", "--", "orchestration/states/done.yaml")


def test_project_in_a_subfolder_uses_a_prefix(tmp_path):
    repo = tmp_path / "mono"
    make_history(repo, prefix="services/shop")
    files = gitsource.read_revision(repo, "main", "services/shop/")
    assert set(files) == set(DEFINITIONS)
    assert gitsource.project_prefix(repo, repo / "services/shop") == "services/shop/"
    assert gitsource.project_prefix(repo, repo) == ""


def test_revision_without_orchestration_gives_an_empty_tree(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("nothing yet\n")
    commit_all(repo, "first")
    assert gitsource.read_revision(repo, "HEAD") == {}


def test_blobs_with_odd_content_round_trip(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    odd = {"orchestration/states/a.yaml": "id: a\ntype: succeed\n# no newline at end",
           "orchestration/states/b.yaml": "\n\n\nid: b\ntype: succeed\ndescription: \"ünïcödé \\n\"\n\n",
           "orchestration/states/empty.yaml": ""}
    write_tree(repo, odd)
    commit_all(repo, "odd")
    assert gitsource.read_revision(repo, "HEAD") == {k: v.encode() for k, v in odd.items()}


def test_unknown_revision_is_a_usage_error_with_a_hint(history):
    repo, _ = history
    with pytest.raises(UsageError) as info:
        gitsource.read_revision(repo, "no-such-branch")
    assert "no-such-branch" in info.value.message
    assert info.value.hint


def test_not_a_repository(tmp_path):
    with pytest.raises(UsageError) as info:
        gitsource.toplevel(tmp_path)
    assert "not inside a git repository" in info.value.message
    assert "two folders" in info.value.hint


def test_default_base_prefers_origin_head_then_main(history, tmp_path):
    repo, shas = history
    commit, label = gitsource.default_base(repo)
    assert commit == shas["base"] and "main" in label
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--branch", "feature", str(repo), str(clone))
    git(clone, "branch", "-q", "-D", "main") if "main" in git(clone, "branch") else None
    git(clone, "remote", "set-head", "origin", "main")
    commit, label = gitsource.default_base(clone)
    assert commit == shas["base"] and label == "merge-base with origin/main"


def test_default_base_without_any_default_branch(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "trunk")
    (repo / "x").write_text("x")
    commit_all(repo, "x")
    with pytest.raises(UsageError) as info:
        gitsource.default_base(repo)
    assert "flowctl diff origin/main" in info.value.hint
