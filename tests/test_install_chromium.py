"""``scripts/ensure_chromium.sh`` (run by every ``make test``): Debian's chromium for the console's
browser tests is installed when root with apt-get, a failure says apt-get's reason, and anyone
else is told the browser tests will be skipped. Runs against fake ``apt-get`` and ``id`` programs."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ensure_chromium.sh"
MAKEFILE = SCRIPT.parents[1] / "Makefile"


def _run(tmp_path: Path, apt_get: str, uid: str = "0") -> subprocess.CompletedProcess:
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
    env = {"PATH": str(bindir), "TMPDIR": str(tmp_path), "FLOWCTL_CHROMIUM": str(tmp_path / "no-chromium")}
    return subprocess.run([shutil.which("bash"), str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)


def test_a_failed_install_names_apt_gets_reason_and_the_tests_skip(tmp_path):
    done = _run(tmp_path, 'echo "E: Unable to locate package chromium" >&2; exit 100')
    assert done.returncode == 0  # make test goes on; the browser tests skip saying why
    assert "could not install chromium: E: Unable to locate package chromium" in done.stdout
    assert "will be skipped" in done.stdout


def test_a_user_who_is_not_root_is_told_and_apt_get_is_not_run(tmp_path):
    done = _run(tmp_path, "echo should-not-run; exit 1", uid="1000")
    assert done.returncode == 0 and "not root" in done.stdout and "should-not-run" not in done.stdout


def test_make_test_runs_the_check_each_time():
    lines = MAKEFILE.read_text().splitlines()
    test = next(line for line in lines if line.startswith("test:"))
    assert "chromium" in test.split(":", 1)[1].split()
    assert "chromium" in next(line for line in lines if line.startswith(".PHONY:")).split()
