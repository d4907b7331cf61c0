"""``flowctl reviews`` and ``flowctl submit`` make a review paused under a worker reachable: a review
state without a ``notify`` tool shows its token to nobody when a worker pauses there."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))  # the worker tests' helpers (tests/workers/)
from test_workers import _engine, _fan_project, _with_workers, _worker  # noqa: E402


def test_a_review_a_worker_paused_without_notify_is_listed_with_how_to_get_a_token(tmp_path, monkeypatch, run_flowctl):
    root = _fan_project(tmp_path, monkeypatch)
    db = f"sqlite:///{tmp_path}/flowctl.db"
    submitted = run_flowctl(["submit", "fanned2", "--input", "{}", "--db", db], root)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()  # stdout is the run id alone; the note is on stderr
    assert "states/hold.yaml:" in submitted.stderr and "review 'hold' (flow 'holder') has no notify tool" in submitted.stderr
    engine = _engine(root, db)

    def paused_child():
        return next((k for k in engine.store.list_runs(parent_id=run_id, limit=0) if k["status"] == "paused"), None)

    _with_workers([_worker(_engine(root, db), concurrency=2)],
                  lambda: paused_child() is not None and engine.store.get_run(run_id)["status"] == "waiting", 60,
                  "the worker to pause the review child")
    child = paused_child()
    listed = run_flowctl(["reviews", "--db", db], root)
    assert listed.returncode == 0, listed.stderr
    assert f"{child['id']}  holder at 'hold'" in listed.stdout and f"child run of {run_id}" in listed.stdout
    assert "no notify tool" in listed.stdout and f"flowctl reviews --reissue {child['id']}" in listed.stdout
    # a worker paused it: no token was ever printed (new-user finding: it said one was, by that worker)
    assert "(workers print no token)" in listed.stdout and "printed once" not in listed.stdout
    (item,) = json.loads(run_flowctl(["reviews", "--db", db, "--format", "json"], root).stdout)
    assert (item["notified"], item["parent_id"], item["token"]) == (False, run_id, f"flowctl reviews --reissue {child['id']}")
    reissued = run_flowctl(["reviews", "--db", db, "--reissue", child["id"]], root)
    command = reissued.stdout.splitlines()[-1].split()
    token = command[command.index("--token") + 1]
    decided = run_flowctl(["resume", child["id"], "--db", db, "--token", token, "--decision", "approve"], root)
    assert decided.returncode == 0, decided.stdout + decided.stderr
    _with_workers([_worker(_engine(root, db))], lambda: engine.store.get_run(run_id)["status"] == "succeeded", 60,
                  "a worker to finish the parent")


def test_submit_says_nothing_for_a_flow_whose_reviews_notify(tmp_path, monkeypatch, run_flowctl):
    root = _fan_project(tmp_path, monkeypatch)
    out = run_flowctl(["submit", "nudger", "--input", "{}", "--db", f"sqlite:///{tmp_path}/flowctl.db"], root)
    assert out.returncode == 0 and out.stderr == "", out.stderr
