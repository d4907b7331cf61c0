"""Replay: recorded runs re-run under another definition with recorded tool outputs (issue 7)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

import flowctl
from flowctl.engine.clock import FakeClock
from flowctl.store.sql import open_store
from flowctl.testing.replay import load_recording, replay
from support.testingkit import FLOW, project


def tk(root):
    from flowctl.engine.tools import resolve

    folder = str(root / "orchestration" / "tools")
    return resolve("tk:LEDGER", folder), resolve("tk:LOOKUPS", folder)


def record(root, lookups, *, decision=None):
    """Run flow f for real (tk tools) into the project's store; return (store, run id)."""
    (root / ".flowctl").mkdir(exist_ok=True)
    store = open_store(f"sqlite:///{root}/.flowctl/flowctl.db")
    _, scripted = tk(root)
    scripted.clear()
    scripted["X-1"] = list(lookups)
    engine = flowctl.Engine(flowctl.load_project(root), store, clock=FakeClock(), max_inline_wait=1e9)
    result = engine.run("f", {"id": "X-1"})
    if decision:
        result = engine.resume(result.run_id, token=result.review["token"], decision=decision, by="alice")
    return store, result


def changed(tmp_path, root, old, new, name="changed"):
    other = tmp_path / name
    shutil.copytree(root / "orchestration", other / "orchestration")
    flow = other / "orchestration" / "transitions" / "f.yaml"
    text = flow.read_text()
    assert old in text
    flow.write_text(text.replace(old, new))
    return flowctl.load_project(other)


def test_under_the_same_definition_the_path_and_context_are_the_same_and_no_tool_is_called(tmp_path):
    root = project(tmp_path)
    store, run = record(root, [{"status": "ok", "amount": 10}])
    assert run.status == "succeeded"
    ledger, _ = tk(root)
    calls = len(ledger)
    result = replay(load_recording(store, run.run_id), flowctl.load_project(root))
    assert not result.diverged, result.text()
    assert result.replayed_path == ["lookup", "pay", "done"] and result.replayed_status == "succeeded"
    assert result.notes == []  # uuid() and now() came back as recorded: the context is identical
    recorded = store.get_run(run.run_id)["cursor"]["context"]
    assert result.context == recorded and result.context["stamp"] and result.context["at"]
    assert len(ledger) == calls  # nothing real was called
    assert "same path and outcome under the working tree" in result.text()


def test_a_condition_change_makes_the_replay_diverge_at_the_first_different_step(tmp_path):
    root = project(tmp_path)
    store, run = record(root, [{"status": "unsure", "amount": 10}], decision="approve")
    assert run.path == ["lookup", "review_it", "pay", "done"]
    other = changed(tmp_path, root, "when: \"response.status == 'unsure'\"", "when: \"response.amount > `100`\"")
    result = replay(load_recording(store, run.run_id), other, "changed/")
    assert result.diverged and result.step == 2
    assert result.replayed_path == ["lookup", "rejected"] and result.replayed_status == "failed"
    text = result.text()
    assert "diverges at step 2: recorded 'review_it', replayed 'rejected'" in text
    assert "recorded at 'lookup' (step 1): took the transition to 'review_it':" in text
    assert "response.status == 'unsure'  →  true" in text
    assert "replayed at 'lookup' (step 1): took the transition to 'rejected':" in text
    assert "response.amount > `100`  →  false" in text


def test_recorded_review_decisions_and_errors_are_replayed(tmp_path):
    root = project(tmp_path)
    unavailable = flowctl.ToolUnavailable("down")
    store, run = record(root, [unavailable, {"status": "unsure", "amount": 3}], decision="reject")
    assert run.path == ["lookup", "review_it", "rejected"]
    result = replay(load_recording(store, run.run_id), flowctl.load_project(root))
    assert not result.diverged, result.text()
    # the same run under a definition that no longer retries: the recorded ToolUnavailable now fails it
    other = changed(tmp_path, root, "  - errors: [OSError]\n", "  - errors: [ToolUnavailable]\n    goto: failed\n  - errors: [OSError]\n")
    state = other.root / "orchestration" / "states" / "lookup.yaml"
    state.write_text(state.read_text().replace("max_attempts: 3", "max_attempts: 1"))
    result = replay(load_recording(store, run.run_id), flowctl.load_project(other.root), "no retry")
    assert result.step == 2 and result.replayed_path == ["lookup", "failed"]
    assert "ToolUnavailable was caught by the flow's on_error[0]" in result.text()


def test_a_run_cancelled_at_its_review_replays_to_the_same_point_without_a_false_divergence(tmp_path):
    root = project(tmp_path)
    store, run = record(root, [{"status": "unsure", "amount": 10}])
    assert run.status == "paused"
    engine = flowctl.Engine(flowctl.load_project(root), store, clock=FakeClock(), max_inline_wait=1e9)
    assert engine.cancel(run.run_id, by="ops").status == "cancelled"
    result = replay(load_recording(store, run.run_id), flowctl.load_project(root))
    assert not result.diverged, result.text()
    assert "the recorded run was cancelled at 'review_it'; the replay reaches the same point" in result.notes
    # a changed condition still diverges before that point
    other = changed(tmp_path, root, "when: \"response.status == 'unsure'\"", "when: \"response.amount > `100`\"")
    assert replay(load_recording(store, run.run_id), other, "changed/").step == 2


def test_a_policy_change_that_drops_a_review_diverges_though_the_path_is_the_same(tmp_path):
    """(new-user finding: a policy that no longer asked for a review replayed as "same path and
    outcome": the weakened gate was invisible in review)"""
    gated = "policy: allow\napplies_to: [pay]\nallow: []\nreview_when: \"input.amount > `5`\"\n"
    root = project(tmp_path, **{"policies/allow.yaml": gated})
    store = open_store(f"sqlite:///{tmp_path}/rec.db")
    engine = flowctl.Engine(flowctl.load_project(root), store, clock=FakeClock(), max_inline_wait=1e9)
    tk(root)[1]["X-1"] = [{"status": "ok", "amount": 10}]
    paused = engine.run("f", {"id": "X-1"})
    assert paused.status == "paused"  # the gate asked for a review of the payment
    run = engine.resume(paused.run_id, token=paused.review["token"], decision="approve", by="alice")
    assert run.status == "succeeded"
    same = replay(load_recording(store, run.run_id), flowctl.load_project(root))
    assert not same.diverged, same.text()
    other = tmp_path / "ungated"
    shutil.copytree(root / "orchestration", other / "orchestration")
    (other / "orchestration" / "policies" / "allow.yaml").write_text("policy: allow\napplies_to: [pay]\nallow: []\n")
    result = replay(load_recording(store, run.run_id), flowctl.load_project(other), "ungated/")
    assert result.diverged and result.step == 2 and result.replayed_path == result.recorded_path
    text = result.text()
    assert "recorded: the gate answered review for pay@1.0.0 in 'pay' (policy allow, rule review_when)" in text
    assert "replayed: the gate answered allow for pay@1.0.0 in 'pay' (policy allow, rule allow)" in text


def test_a_run_whose_input_was_redacted_replays_without_a_false_divergence(tmp_path, run_flowctl):
    """(new-user finding: the init template's own signup run, its e-mail redacted in the record,
    failed the input_schema on replay: 'the replay did not start', exit 1 under the same definition)"""
    import json

    from flowctl.scaffold import init

    init(tmp_path, "basic")
    ran = run_flowctl(["run", "signup", "--format", "json", "-q", "--input",
                       json.dumps({"email": "ada@example.com", "plan": "team"})], tmp_path)
    run_id = json.loads(ran.stdout)["run_id"]
    replayed = run_flowctl(["replay", run_id, "--format", "json"], tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    out = json.loads(replayed.stdout)
    assert not out["diverged"] and out["replayed"]["status"] == "succeeded"
    assert any("email is redacted in the record" in n for n in out["notes"]), out["notes"]
    assert "ada@example.com" not in replayed.stdout


def test_a_definition_that_calls_more_tools_than_recorded_stops_the_replay(tmp_path):
    root = project(tmp_path)
    store, run = record(root, [{"status": "missing"}])
    assert run.path == ["lookup", "rejected"]
    other = changed(tmp_path, root, "  - from: lookup\n    to: rejected\n", "  - from: lookup\n    to: pay\n")
    result = replay(load_recording(store, run.run_id), other, "changed/")
    assert result.diverged and result.step == 2
    assert result.replayed_path == ["lookup", "pay"]
    assert result.stopped == "'pay' calls pay, but the recorded run has no further pay call to take its outcome from"


def test_a_flow_missing_from_the_definition_diverges_at_once(tmp_path):
    root = project(tmp_path)
    store, run = record(root, [{"status": "missing"}])
    other = changed(tmp_path, root, "flow: f\n", "flow: g\n")
    (other.root / "orchestration" / "transitions" / "f.yaml").rename(other.root / "orchestration" / "transitions" / "g.yaml")
    result = replay(load_recording(store, run.run_id), flowctl.load_project(other.root), "g only")
    assert result.step == 1 and result.reason == ["the flow 'f' is not in g only"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_replay_under_a_git_revision_from_the_command_line(tmp_path, run_flowctl):
    root = project(tmp_path)

    def git(*args):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                       env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                            "GIT_COMMITTER_EMAIL": "t@x", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})

    git("init", "-q")
    git("add", "orchestration")
    git("commit", "-q", "-m", "original")
    store, run = record(root, [{"status": "ok", "amount": 10}])
    store.close()
    flow = root / "orchestration" / "transitions" / "f.yaml"
    flow.write_text(FLOW.lstrip("\n").replace("when: \"response.status == 'ok'\"", "when: \"response.amount > `50`\""))
    git("commit", "-q", "-am", "pay only large amounts")

    same = run_flowctl(["replay", run.run_id[:10], "--definition", "HEAD~1"], root)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "same path and outcome under HEAD~1" in same.stdout
    moved = run_flowctl(["replay", run.run_id, "--definition", "HEAD"], root)
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "diverges at step 2: recorded 'pay', replayed 'rejected'" in moved.stdout
    working = run_flowctl(["replay", run.run_id, "--format", "json"], root)
    import json

    data = json.loads(working.stdout)
    assert working.returncode == 1 and data["diverged"] and data["step"] == 2
    missing = run_flowctl(["replay", "ffffffffffff"], root)
    assert missing.returncode == 2 and "no run 'ffffffffffff'" in missing.stderr
    bad = run_flowctl(["replay", run.run_id, "--definition", "no-such-rev"], root)
    assert bad.returncode == 2 and "neither a git revision nor a folder" in bad.stderr


def test_diff_replay_lists_the_recorded_runs_that_would_take_another_path(tmp_path, run_flowctl):
    root = project(tmp_path)
    store, ok_run = record(root, [{"status": "ok", "amount": 10}])
    store, missing_run = record(root, [{"status": "missing"}])
    store.close()
    changed(tmp_path, root, "when: \"response.status == 'ok'\"", "when: \"response.amount > `50`\"")
    out = run_flowctl(["diff", str(root), str(tmp_path / "changed"), "--replay", "5"], root)
    assert out.returncode == 0, out.stderr
    assert "replay of the last 5 recorded runs under " in out.stdout
    assert "1 of 2 would take a different path" in out.stdout
    assert f"~ {ok_run.run_id[:12]} f (succeeded): diverges at step 2: recorded pay, replayed rejected" in out.stdout
    assert f"= {missing_run.run_id[:12]} f: same path" in out.stdout
    md = run_flowctl(["diff", str(root), str(tmp_path / "changed"), "--replay", "5", "--format", "markdown"], root)
    assert "### Replay of recorded runs" in md.stdout and "| `" + ok_run.run_id[:12] + "` | f | succeeded | step 2 |" in md.stdout


# ------------------------------------------------------------------------------------ child runs
REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


def _sweep_copy(tmp_path, monkeypatch, name="sweep"):
    """The shipped orchestration/ (shipment_sweep and its child flows) in a folder of its own, on a
    seeded shop database."""
    import sys

    sys.path.insert(0, str(REPO / "orchestration" / "tools"))
    from shop_tools import db

    monkeypatch.setenv("FLOWCTL_SHOP_DB", str(tmp_path / "shop.db"))
    if not (tmp_path / "shop.db").exists():
        db.seed(tmp_path / "shop.db")
    root = tmp_path / name
    shutil.copytree(REPO / "orchestration", root / "orchestration")
    return root


def test_the_shipped_shipment_sweep_replays_with_its_child_runs(tmp_path, monkeypatch, run_flowctl):
    root = _sweep_copy(tmp_path, monkeypatch)
    db = f"sqlite:///{tmp_path}/runs.db"
    ran = run_flowctl(["run", "shipment_sweep", "--input", "@" + str(REPO / "orchestration/examples/shipment_sweep.json"),
                       "--db", db, "--format", "json"], root)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    import json

    run_id = json.loads(ran.stdout)["run_id"]
    same = run_flowctl(["replay", run_id, "--db", db], root)
    assert same.returncode == 0, same.stdout + same.stderr  # a map of children, each a parallel: all followed
    assert "same path and outcome under the working tree" in same.stdout
    changed_root = _sweep_copy(tmp_path, monkeypatch, "changed")
    flow = changed_root / "orchestration" / "transitions" / "check_shipment.yaml"
    flow.write_text(flow.read_text().replace("response[1].status != 'refunded'", "response[1].status == 'refunded'"))
    moved = run_flowctl(["replay", run_id, "--db", db, "--definition", str(changed_root)], root)
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "diverges at step 2 ('check_shipments'), inside child run " in moved.stdout
    assert "(check_shipment #0):" in moved.stdout
    assert "diverges at step 2: recorded 'shipment_consistent', replayed 'shipment_flagged'" in moved.stdout
    data = json.loads(run_flowctl(["replay", run_id, "--db", db, "--definition", str(changed_root), "--format", "json"],
                                  root).stdout)
    assert data["step"] == 2 and data["child"]["where"]["state"] == "check_shipments" and data["child"]["step"] == 2


FANNED = {
    "contracts/look.v1.0.0.yaml": "id: look\nversion: 1.0.0\nentrypoint: tk:look\n",
    "tools/tk.py": "def look(input, call):\n    return {'n': input.get('n'), 'big': (input.get('n') or 0) > 1}\n",
    "states/look.yaml": "id: look\ntype: task\ntool: look@^1\ninput: {n: input.n}\n",
    "states/big.yaml": "id: big\ntype: succeed\n",
    "states/small.yaml": "id: small\ntype: succeed\n",
    "transitions/item.yaml": "flow: item\nstart: look\ntransitions:\n  - {from: look, when: response.big, to: big}\n"
                             "  - {from: look, to: small}\n",
    "states/each.yaml": "id: each\ntype: map\nitems: input.ns\nflow: item\nitem_input: {n: item}\nmax_concurrency: 2\n",
    "states/pair.yaml": "id: pair\ntype: parallel\nbranches: [item, items]\ninput: {n: '`2`', ns: '[`1`, `3`]'}\n",
    "states/done.yaml": "id: done\ntype: succeed\n",
    "transitions/items.yaml": "flow: items\nstart: each\ntransitions:\n  - {from: each, to: done}\n",
    "transitions/top.yaml": "flow: top\nstart: pair\ntransitions:\n  - {from: pair, to: done}\n",
}


def _fanned(tmp_path, name, replace=None):
    from support.helpers import write_project

    files = dict(FANNED)
    if replace:
        key, old, new = replace
        assert old in files[key]
        files[key] = files[key].replace(old, new)
    return write_project(tmp_path / name, files)


def test_a_parallel_of_a_map_replays_and_locates_a_divergence_two_levels_down(tmp_path):
    root = _fanned(tmp_path, "p")
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run = flowctl.Engine(flowctl.load_project(root), store).run("top", {})
    assert run.status == "succeeded"
    rec = load_recording(store, run.run_id)
    assert sorted(rec.children) == [("pair", 0), ("pair", 1)] and len(rec.children[("pair", 1)][0].children) == 2
    same = replay(rec, flowctl.load_project(root))
    assert not same.diverged, same.text()
    # the map's item condition changes: item n=3 (index 1 of the map, inside branch 1) goes elsewhere
    moved = replay(load_recording(store, run.run_id),
                   flowctl.load_project(_fanned(tmp_path, "q", ("transitions/item.yaml", "when: response.big",
                                                                "when: \"response.n == `2`\""))))
    chain = moved.innermost()
    assert [c.where and (c.where["state"], c.where["index"]) for c in chain] == [None, ("pair", 1), ("each", 1)]
    assert chain[-1].step == 2 and chain[-1].recorded_path == ["look", "big"] and chain[-1].replayed_path == ["look", "small"]
    assert moved.step == 1 and "inside child run" in moved.text()
    # one more item than recorded: the replay reaches a child the recording does not have
    more = replay(load_recording(store, run.run_id),
                  flowctl.load_project(_fanned(tmp_path, "r", ("states/pair.yaml", "[`1`, `3`]", "[`1`, `3`, `4`]"))))
    inner = more.innermost()[-1]
    assert more.diverged and inner.where["state"] == "each" and inner.where["index"] == 2
    assert more.stopped and "child run that the recorded run did not have" in more.stopped


def test_diff_replay_follows_child_runs(tmp_path, run_flowctl):
    root = _fanned(tmp_path, "p")
    (root / ".flowctl").mkdir()
    store = open_store(f"sqlite:///{root}/.flowctl/flowctl.db")
    run = flowctl.Engine(flowctl.load_project(root), store).run("top", {})
    store.close()
    _fanned(tmp_path, "q", ("transitions/item.yaml", "when: response.big", "when: \"response.n == `2`\""))
    same = run_flowctl(["diff", str(root), str(root), "--replay", "5"], root)
    assert "0 of 1 would take a different path" in same.stdout, same.stdout + same.stderr
    out = run_flowctl(["diff", str(root), str(tmp_path / "q"), "--replay", "5"], root)
    assert "1 of 1 would take a different path" in out.stdout, out.stdout + out.stderr
    assert f"~ {run.run_id[:12]} top (succeeded): diverges at step 1" in out.stdout
    assert "(item #1 of 'each') at step 2: recorded big, replayed small" in out.stdout


def test_a_child_runs_review_is_replayed_with_its_recorded_decision(tmp_path):
    from support.helpers import write_project

    files = dict(FANNED)
    files["states/ask.yaml"] = "id: ask\ntype: review\ndecisions: [approve, reject]\n"
    files["transitions/asking.yaml"] = ("flow: asking\nstart: ask\ntransitions:\n  - {from: ask, when: \"review.decision == 'approve'\", "
                                        "to: big}\n  - {from: ask, to: small}\n")
    files["states/sub.yaml"] = "id: sub\ntype: subflow\nflow: asking\n"
    files["transitions/asks.yaml"] = "flow: asks\nstart: sub\ntransitions:\n  - {from: sub, to: done}\n"
    root = write_project(tmp_path / "p", files)
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    engine = flowctl.Engine(flowctl.load_project(root), store)
    parked = engine.run("asks", {})
    (child,) = store.list_runs(parent_id=parked.run_id, limit=0)
    engine.resume(child["id"], token=engine.reissue_token(child["id"]), decision="approve", by="alice")
    assert store.get_run(parked.run_id)["status"] == "succeeded"
    same = replay(load_recording(store, parked.run_id), flowctl.load_project(root))
    assert not same.diverged, same.text()
    flipped = dict(files, **{"transitions/asking.yaml": files["transitions/asking.yaml"].replace("'approve'", "'reject'")})
    moved = replay(load_recording(store, parked.run_id), flowctl.load_project(write_project(tmp_path / "q", flipped)))
    inner = moved.innermost()[-1]
    assert inner.where["state"] == "sub" and inner.recorded_path == ["ask", "big"] and inner.replayed_path == ["ask", "small"]


@pytest.mark.parametrize("in_git", [True, False])
def test_replay_definition_that_does_not_exist_says_so(tmp_path, run_flowctl, in_git):
    root = project(tmp_path)
    if in_git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    missing = tmp_path / "nonexistent"
    done = run_flowctl(["replay", "R1", "--definition", str(missing)], root)
    assert done.returncode == 2
    assert f"--definition {missing} is neither a git revision nor a folder: no such folder exists" in done.stderr
    assert "flowctl diff" not in done.stderr and "Traceback" not in done.stderr
