"""``flowctl init``: the first ten minutes. A scaffolded project validates, passes its golden cases
at 100% coverage and its contract tests, and runs for real; init never overwrites a project."""
from __future__ import annotations

import json
import subprocess

import pytest

from support.helpers import FLOWCTL_EXE

from flowctl.errors import UsageError
from flowctl.scaffold import init, templates


def _flowctl(cwd, *args):
    return subprocess.run([FLOWCTL_EXE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("template", templates())
def test_a_scaffolded_project_validates_and_passes_its_cases_and_contracts(tmp_path, template):
    made = _flowctl(tmp_path, "init", "proj", "--template", template)
    assert made.returncode == 0, made.stderr
    proj = tmp_path / "proj"
    for args in (("validate", "--strict", "--import-check"), ("test", "--min-coverage", "100"), ("test", "--contracts")):
        done = _flowctl(proj, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert "0 skipped" in _flowctl(proj, "test", "--contracts").stdout  # side effects run in a sandbox


def test_the_basic_project_runs_for_real_and_undoes_nothing_it_did_not_do(tmp_path):
    init(tmp_path, "basic")
    first = _flowctl(tmp_path, "run", "signup", "--format", "json", "-q",
                     "--input", json.dumps({"email": "ada@example.com", "plan": "team"}))
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["status"] == "succeeded" and out["output"]["welcomed"] is True
    again = json.loads(_flowctl(tmp_path, "run", "signup", "--format", "json", "-q",
                                "--input", json.dumps({"email": "ada@example.com", "plan": "free"})).stdout)
    assert again["path"][-1] == "already_registered"
    assert again["output"]["account_id"] == out["output"]["account_id"]
    refused = _flowctl(tmp_path, "run", "signup", "-q", "--input", json.dumps({"email": "al@example.com",
                                                                                "plan": "enterprise"}))
    assert refused.returncode == 1 and "PolicyDenied" in refused.stdout + refused.stderr


def test_init_refuses_an_existing_project_and_writes_nothing(tmp_path):
    (tmp_path / "orchestration").mkdir()
    (tmp_path / "orchestration" / "mine.txt").write_text("keep")
    done = _flowctl(tmp_path, "init")
    assert done.returncode == 2 and "already exists" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["mine.txt", "orchestration"]
    # the new folder it suggests is beside this one, not inside it (new-user finding)
    assert f"flowctl init ../{tmp_path.name}-2" in done.stderr
    elsewhere = _flowctl(tmp_path.parent, "init", str(tmp_path))
    assert f"flowctl init {tmp_path.parent / (tmp_path.name + '-2')}" in elsewhere.stderr


def test_init_inside_a_project_says_the_new_project_is_nested_in_it(tmp_path):
    """(new-user finding: init in a project's subfolder nested a project, and commands run there
    silently stopped finding the outer one)"""
    assert _flowctl(tmp_path, "init").returncode == 0
    (tmp_path / "sub").mkdir()
    done = _flowctl(tmp_path / "sub", "init", "inner")
    assert done.returncode == 0, done.stderr
    assert f"inside the flowctl project at {tmp_path.resolve()}" in done.stderr and "--root" in done.stderr
    beside = _flowctl(tmp_path.parent, "init", str(tmp_path.parent / (tmp_path.name + "-beside")))
    assert beside.returncode == 0 and "inside the flowctl project" not in beside.stderr


def test_an_unknown_template_is_a_usage_error_naming_the_choices(tmp_path):
    with pytest.raises(UsageError) as caught:
        init(tmp_path / "p", "nope")
    assert "basic" in caught.value.hint and not (tmp_path / "p").exists()


def test_an_existing_gitignore_is_kept(tmp_path):
    (tmp_path / ".gitignore").write_text("mine\n")
    written = init(tmp_path, "basic")
    assert (tmp_path / ".gitignore").read_text() == "mine\n"
    assert all(".gitignore" != p.name for p in written)


def test_a_dangling_link_or_an_unwritable_folder_is_a_usage_error_and_nothing_is_kept(tmp_path):
    # (break-it finding: both were "internal error: this is a flowctl bug")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="does not exist"):
        init(tmp_path / "dangling")
    done = _flowctl(tmp_path, "init", "/proc/self")
    assert done.returncode == 2 and "cannot write the project" in done.stderr and "internal error" not in done.stderr


def test_the_templates_tools_keep_their_data_in_the_project_whatever_the_current_folder(tmp_path):
    # (new-user finding: run with --root from elsewhere, the tools opened a second database there)
    init(tmp_path / "p", "basic")
    done = _flowctl(tmp_path, "run", "signup", "--root", "p", "-q",
                    "--input", json.dumps({"email": "ada@example.com", "plan": "team"}))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p" / ".flowctl" / "accounts.sqlite").is_file()
    assert not (tmp_path / ".flowctl" / "accounts.sqlite").exists()


# ------------------------------------------------------------------ the printed next steps can be pasted
def test_next_steps_spell_flowctl_as_given():
    from flowctl.scaffold import NEXT_STEPS, next_steps

    steps = next_steps("agent", "../.venv/bin/flowctl")
    assert len(steps) == len(NEXT_STEPS["agent"])
    assert all("../.venv/bin/flowctl " in cmd and " flowctl " not in f" {cmd}" for cmd, _ in steps)
    assert steps[-1][0].startswith("FLOWCTL_MODEL_PROFILE=live ") and "OPENAI_API_KEY=... ../.venv/bin/flowctl run" in steps[-1][0]
    assert next_steps("basic") == NEXT_STEPS["basic"] and next_steps("nope") == []


def test_init_names_the_command_as_invoked_when_flowctl_is_not_on_path(tmp_path, monkeypatch):
    from flowctl.cli.commands.init import program

    monkeypatch.chdir(tmp_path)
    assert program("my-project", ".venv/bin/flowctl", on_path="") == "../.venv/bin/flowctl"
    assert program(".", ".venv/bin/flowctl", on_path="") == ".venv/bin/flowctl"
    assert program("my-project", ".venv/bin/flowctl", on_path="/usr/bin/flowctl") == "flowctl"
    assert program("my-project", "/opt/venv/bin/flowctl", on_path="") == "/opt/venv/bin/flowctl"
    # a folder outside the current one: the absolute path (a relative one would be a maze of ..)
    assert program(str(tmp_path.parent / "elsewhere"), ".venv/bin/flowctl", on_path="") == \
        str(tmp_path / ".venv/bin/flowctl")


def test_init_prints_next_steps_that_use_the_invoked_command(tmp_path):
    # FLOWCTL_EXE is a path to the venv's script; where flowctl is not on PATH the steps use it
    import os

    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([FLOWCTL_EXE, "init", "p"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    steps = out.stdout.split("next:", 1)[1]
    assert f"{FLOWCTL_EXE} validate --import-check" in steps and "\n  flowctl " not in steps
