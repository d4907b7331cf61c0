"""Shared fixtures: small orchestration/ trees written into tmp_path, and the flowctl command."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # the support package (tests/support) imports under any --import-mode
    sys.path.insert(0, _TESTS)

from support.helpers import FLOWCTL_EXE, write_project  # noqa: E402 - after the path is set


@pytest.fixture
def make_project(tmp_path):
    """``make_project({"states/a.yaml": "id: a\\ntype: succeed\\n", ...}) -> root Path``.

    Keys are paths relative to ``orchestration/`` (or to the root if they start with
    ``orchestration/``); values are YAML/JSON text (dedented) or bytes. Each call writes a fresh
    sub-folder of ``tmp_path``, so one test may build several projects.
    """
    count = [0]

    def make(files: dict, name: str | None = None):
        count[0] += 1
        return write_project(tmp_path / (name or f"project{count[0]}"), files)

    return make


@pytest.fixture
def run_flowctl():
    """Run the installed ``flowctl`` console script: ``run_flowctl(args, cwd) -> CompletedProcess``."""

    def run(args, cwd, timeout=120):
        env = dict(os.environ)
        env.pop("FLOWCTL_DEBUG", None)
        return subprocess.run([FLOWCTL_EXE, *args], cwd=str(cwd), capture_output=True, text=True,
                              timeout=timeout, env=env)

    return run


def pytest_configure(config):
    # jmespath warns when it lexes a `bare` literal; flowctl reports those itself (FC403).
    config.addinivalue_line("filterwarnings", "ignore:deprecated string literal syntax:PendingDeprecationWarning")
