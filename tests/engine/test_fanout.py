"""Parallel branches, map over items and sub-flows as durable child runs."""
from __future__ import annotations

import pytest

from support.enginekit import Harness, build, sqlite_store
from support.fanoutflows import CHILD, TOOLS, ledger_of, parent


def test_parallel_outputs_are_in_branch_order_whatever_the_finish_order(tmp_path):
    files = {**CHILD,
             "transitions/slow.yaml": "flow: slow\nstart: w\ntransitions:\n  - {from: w, to: done, set: {out: response.name}}\noutput: context.out\n",
             "transitions/fast.yaml": "flow: fast\nstart: w\ntransitions:\n  - {from: w, to: done, set: {out: response.name}}\noutput: context.out\n",
             **parent("id: fan\ntype: parallel\nbranches: [slow, fast]\ninput: {name: input.name, sleep: input.sleep}\n")}
    files["states/w.yaml"] = "id: w\ntype: task\ntool: work@^1\ninput: {name: run.flow, sleep: \"run.flow == 'slow' && `0.3` || `0`\"}\n"
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    result = h.run(input={"name": "x"})
    assert result.status == "succeeded", result.error
    assert result.output == ["slow", "fast"]
    assert ledger_of(h, "work") == ["fast", "slow"]  # finished in the other order
    children = h.store.list_runs(parent_id=result.run_id, limit=0)
    assert sorted(c["flow"] for c in children) == ["fast", "slow"] and all(c["status"] == "succeeded" for c in children)


def test_a_failed_branch_cancels_the_others_and_compensates_completed_ones_newest_first(tmp_path):
    files = {**CHILD,
             **parent("id: fan\ntype: map\nitems: input.items\nflow: child\nmax_concurrency: 2\n"
                      "item_input: {name: item.name, sleep: item.sleep, fail: item.fail}\n",
                      extra_flow="on_error:\n  - {errors: [BranchFailed], compensate: true, goto: failed}\n")}
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    # two slots: "a" and "bad" start; "a" ends at once and "late" takes its slot; "bad" fails while
    # "late" is busy, so "late" stops after its current step and "never" never starts
    items = [{"name": "a", "sleep": 0}, {"name": "bad", "sleep": 0.2, "fail": True},
             {"name": "late", "sleep": 0.6}, {"name": "never", "sleep": 0}]
    result = h.run(input={"items": items})
    assert result.status == "failed" and result.error["code"] == "BranchFailed"
    assert "branch bad broke" in result.error["message"]
    children = sorted(h.store.list_runs(parent_id=result.run_id, limit=0), key=lambda r: r["input"]["name"])
    assert [(c["input"]["name"], c["status"]) for c in children] == [
        ("a", "succeeded"), ("bad", "failed"), ("late", "cancelled")]
    assert "never" not in ledger_of(h, "pay")
    # the failed child undid its own payment; then the parent undid the others', newest first
    assert ledger_of(h, "undo") == ["bad", "late", "a"]


def test_map_concurrency_is_bounded_and_outputs_keep_item_order(tmp_path):
    files = {**CHILD, **parent("id: fan\ntype: map\nitems: input.items\nflow: child\nmax_concurrency: 2\n"
                               "item_input: {name: item, n: index, sleep: '`0.3`'}\n")}
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    result = h.run(input={"items": ["a", "b", "c", "d", "e"]})
    assert result.status == "succeeded", result.error
    assert [o["name"] for o in result.output] == ["a", "b", "c", "d", "e"]
    assert [o["double"] for o in result.output] == [0, 2, 4, 6, 8]
    from flowctl.engine.tools import resolve

    assert resolve("tk:ACTIVE", str(h.root / "orchestration" / "tools"))[1] == 2  # observed peak == the limit


@pytest.mark.parametrize("tolerated, status", [("{count: 1}", "succeeded"), ("{percent: 25}", "succeeded"),
                                               ("{count: 0}", "failed"), ("{percent: 10}", "failed")])
def test_tolerated_failures_by_count_and_percent(tmp_path, tolerated, status):
    files = {**CHILD, **parent(f"id: fan\ntype: map\nitems: input.items\nflow: child\ntolerated_failures: {tolerated}\n"
                               "item_input: {name: item.name, fail: item.fail}\n")}
    h = Harness(build(tmp_path, files, TOOLS))
    result = h.run(input={"items": [{"name": "a"}, {"name": "b", "fail": True}, {"name": "c"}, {"name": "d"}]})
    assert result.status == status
    if status == "succeeded":
        err = result.output[1]["error"]
        assert (err["type"], err["message"], err["state"]) == ("RuntimeError", "branch b broke", "w")


def test_nested_parallel_inside_map(tmp_path):
    files = {**CHILD,
             "states/inner.yaml": "id: inner\ntype: parallel\nbranches: [child, child]\ninput: {name: input.name}\n",
             "transitions/pair.yaml": "flow: pair\nstart: inner\ntransitions:\n  - {from: inner, to: done, set: {out: response}}\noutput: context.out\n",
             **parent("id: fan\ntype: map\nitems: input.items\nflow: pair\nmax_concurrency: 2\nitem_input: {name: item}\n")}
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    result = h.run(input={"items": ["x", "y"]})
    assert result.status == "succeeded", result.error
    assert [[o["name"] for o in pair] for pair in result.output] == [["x", "x"], ["y", "y"]]


def test_a_child_review_parks_the_parent_until_the_child_is_decided(tmp_path):
    files = {**CHILD,
             "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\n",
             "transitions/asking.yaml": "flow: asking\nstart: ask\ntransitions:\n  - {from: ask, to: done}\noutput: review.decision\n",
             **parent("id: fan\ntype: subflow\nflow: asking\n")}
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    parked = h.run()
    assert parked.status == "waiting"
    (child,) = h.store.list_runs(parent_id=parked.run_id, limit=0)
    assert child["status"] == "paused"
    token = h.engine.reissue_token(child["id"])
    h.engine.resume(child["id"], token=token, decision="approve")
    assert h.store.get_run(parked.run_id)["status"] == "succeeded"
    assert h.store.get_run(parked.run_id)["output"] == "approve"


def test_cancel_of_the_parent_reaches_its_children(tmp_path):
    files = {**CHILD,
             "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve]\n",
             "transitions/asking.yaml": "flow: asking\nstart: p\ntransitions:\n  - {from: p, to: ask}\n  - {from: ask, to: done}\n",
             **parent("id: fan\ntype: parallel\nbranches: [asking, asking]\ninput: {name: \"'n'\"}\n")}
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    parked = h.run()
    assert parked.status == "waiting"
    h.engine.cancel(parked.run_id)
    children = h.store.list_runs(parent_id=parked.run_id, limit=0)
    assert [c["status"] for c in children] == ["cancelled", "cancelled"]
    assert ledger_of(h, "undo") == ["n", "n"]


ASKING = {**CHILD,
          "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve, reject]\nshow: {who: input.name}\n",
          "transitions/asking.yaml": "flow: asking\nstart: ask\ntransitions:\n  - {from: ask, to: done}\noutput: review.decision\n",
          **parent("id: fan\ntype: subflow\nflow: asking\ninput: {name: \"'ann'\"}\n")}


def test_a_parent_waiting_on_a_child_review_says_which_child_and_gives_its_token(tmp_path):
    h = Harness(build(tmp_path, ASKING, TOOLS), store=sqlite_store(tmp_path))
    parked = h.run()
    assert parked.status == "waiting"
    (child,) = h.store.list_runs(parent_id=parked.run_id, limit=0)
    (shown,) = parked.children
    assert (shown["run_id"], shown["flow"], shown["status"]) == (child["id"], "asking", "paused")
    assert shown["review"]["state"] == "ask" and shown["review"]["decisions"] == ["approve", "reject"]
    h.engine.resume(child["id"], token=shown["review"]["token"], decision="approve")  # the token works
    assert h.store.get_run(parked.run_id)["status"] == "succeeded"


def test_flowctl_run_of_a_parent_whose_child_pauses_prints_the_child_and_how_to_continue_it(tmp_path, run_flowctl):
    root = build(tmp_path, ASKING, TOOLS)
    db = f"sqlite:///{tmp_path}/cli.db"
    done = run_flowctl(["run", "f", "--db", db], root)
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    child = next(line for line in lines if line.startswith("  child run")).split()[2]
    assert f"  child run {child} (asking) is paused for review at 'ask': {{\"who\": \"ann\"}}" in lines
    resume = next(line for line in lines if "resume it with:" in line).split("resume it with: ", 1)[1]
    assert resume.startswith(f"flowctl resume {child} --db {db} --token ") and resume.endswith("--decision approve|reject")
    # later, from the store (the token was printed once): how to get a new one
    again = run_flowctl(["resume", [x for x in lines if x.startswith("run ")][0].split()[1], "--db", db], root)
    assert again.returncode == 3
    assert f"a new token: flowctl reviews --db {db} --reissue {child}" in again.stdout
    token = resume.split("--token ")[1].split()[0]
    ok = run_flowctl(["resume", child, "--db", db, "--token", token, "--decision", "approve"], root)
    assert ok.returncode == 0, ok.stdout + ok.stderr
