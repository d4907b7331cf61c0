"""``scripts/ensure_graphviz.sh`` (run by every ``make install``): a failed Graphviz install says
why, and the next ``make install`` tries again. The script runs against fake ``apt-get`` and ``id``
programs on a PATH without ``dot``."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ensure_graphviz.sh"
MAKEFILE = SCRIPT.parents[1] / "Makefile"


def _bin(tmp_path: Path, apt_get: str, uid: str = "0") -> dict:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "grep", "tail", "cat"):
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} is not installed")
        (bindir / tool).symlink_to(found)
    (bindir / "apt-get").write_text("#!/bin/bash\n" + apt_get + "\n")
    (bindir / "id").write_text(f"#!/bin/bash\necho {uid}\n")
    for name in ("apt-get", "id"):
        (bindir / name).chmod(0o755)
    return {"PATH": str(bindir), "TMPDIR": str(tmp_path)}


def _run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("bash"), str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=30)


def test_a_failed_install_names_apt_gets_reason_and_the_log(tmp_path):
    env = _bin(tmp_path, 'echo "E: Unable to locate package graphviz" >&2; exit 100')
    done = _run(env)
    assert done.returncode == 0  # graphs in DOT and mermaid still work: the install goes on
    assert "could not install graphviz: E: Unable to locate package graphviz" in done.stdout
    assert "try again next time" in done.stdout
    assert (tmp_path / "flowctl-graphviz-install.log").read_text().count("Unable to locate") == 2


def test_a_user_who_is_not_root_is_told_how_to_install_it(tmp_path):
    env = _bin(tmp_path, "echo should-not-run; exit 1", uid="1000")
    done = _run(env)
    assert done.returncode == 0 and "not root" in done.stdout and "should-not-run" not in done.stdout


def test_the_check_runs_on_every_make_install_not_only_the_first():
    text = MAKEFILE.read_text()
    install = next(line for line in text.splitlines() if line.startswith("install:"))
    assert "graphviz" in install.split(":", 1)[1]
    phony = next(line for line in text.splitlines() if line.startswith(".PHONY:"))
    assert "graphviz" in phony.split()  # phony: not satisfied by a file, so it runs each time
