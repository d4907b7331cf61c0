"""Every shared case in ../shared/cases/{invalid,run}/* runs per its expect.yaml.

Each case folder is copied to a fresh temporary folder and its ``command`` is run there through
the installed ``flowctl`` console script; the exit status, output and (optionally) the tools'
``ledger.txt`` must be exactly as expected. See ../shared/cases/README.md.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess

import pytest
import yaml

from support.helpers import FLOWCTL_EXE, SHARED_CASES

GROUPS = ("invalid", "run")


def _cases():
    if not SHARED_CASES.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no shared cases folder at {SHARED_CASES}"),
                             id="no-shared-cases")]
    found = [SHARED_CASES / group / name for group in GROUPS if (SHARED_CASES / group).is_dir()
             for name in sorted(os.listdir(SHARED_CASES / group)) if (SHARED_CASES / group / name).is_dir()]
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{SHARED_CASES} holds no case folders"),
                             id="no-shared-cases")]
    return [pytest.param(path, id=f"{path.parent.name}/{path.name}") for path in found]


def _expectation(case):
    with open(case / "expect.yaml", encoding="utf-8") as fh:
        expect = yaml.safe_load(fh)
    assert isinstance(expect, dict), f"{case}/expect.yaml must be a mapping"
    assert isinstance(expect.get("command"), str), f"{case}/expect.yaml needs a command"
    assert isinstance(expect.get("exit_code"), int), f"{case}/expect.yaml needs an exit_code"
    return expect


@pytest.mark.parametrize("case", _cases())
def test_shared_case(case, tmp_path):
    expect = _expectation(case)
    work = tmp_path / case.name
    shutil.copytree(case, work)
    argv = shlex.split(expect["command"])
    assert argv and argv[0] == "flowctl", f"a case command runs flowctl: {expect['command']!r}"
    env = dict(os.environ)
    env.pop("FLOWCTL_DEBUG", None)
    result = subprocess.run([FLOWCTL_EXE, *argv[1:]], cwd=work, capture_output=True, text=True, timeout=120, env=env)
    out = result.stdout + result.stderr
    shown = f"$ {expect['command']}  (exit {result.returncode})\n{out}"
    assert result.returncode == expect["exit_code"], shown
    for text in expect.get("output_contains") or ():
        assert str(text) in out, f"missing {text!r} in:\n{shown}"
    for text in expect.get("output_excludes") or ():
        assert str(text) not in out, f"unexpected {text!r} in:\n{shown}"
    if "ledger" in expect:
        ledger = work / "ledger.txt"
        lines = ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []
        assert lines == list(expect["ledger"] or []), shown
