"""``flowctl recover`` (flowctl.cli.commands.recover): exit codes and what it says about runs it refuses."""
from __future__ import annotations

import subprocess

from test_record_forgery import _db, forged_decision

from support.helpers import FLOWCTL_EXE


def test_a_run_recover_refuses_as_tampered_exits_1_and_is_named(tmp_path):
    h, paused = forged_decision(tmp_path)
    db = _db(tmp_path)
    done = subprocess.run([FLOWCTL_EXE, "recover", "--db", f"sqlite:///{tmp_path}/flowctl.db"], cwd=h.root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.stdout, done.stderr)  # not 3 ("paused or waiting"): it was refused
    assert f"error: [RECORD_TAMPERED] run {paused.run_id} was not continued" in done.stderr
    assert "flowctl audit verify" in done.stderr and "Traceback" not in done.stderr
    assert db.execute("SELECT status, output FROM flowctl_runs WHERE id = ?", (paused.run_id,)).fetchone() == \
        ("waiting", None)
