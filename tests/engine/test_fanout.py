"""Parallel branches, map over items and sub-flows as durable child runs."""
from __future__ import annotations

import json
import sqlite3

import pytest

from flowctl.errors import RecordTampered

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
    assert result.status == "failed" and result.error["code"] == "BRANCH_FAILED"  # the stable code, re-raised by the fail state
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


# ---------------------------------------------------------------------- the plan stays small (issue 17)
GATE = {**CHILD,
        "states/pick.yaml": "id: pick\ntype: choice\n",
        "states/ask.yaml": "id: ask\ntype: review\ndecisions: [approve]\n",
        "transitions/gate.yaml": "flow: gate\nstart: pick\ntransitions:\n  - {from: pick, to: ask, when: \"input.name == 'b'\"}\n"
                                 "  - {from: pick, to: w}\n  - {from: ask, to: w}\n  - {from: w, to: done, set: {out: response.name}}\n"
                                 "output: context.out\n"}


def _gated(tmp_path, item_input="{name: item}", concurrency=4):
    """Map ``fan`` over ``gate`` children: item ``b`` pauses for review, the others end at once."""
    files = {**GATE, **parent(f"id: fan\ntype: map\nitems: input.items\nflow: gate\nmax_concurrency: {concurrency}\n"
                              f"item_input: {item_input}\n")}
    return Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))


def _children_of(h, parent_id):
    return sorted(h.store.list_runs(parent_id=parent_id, limit=0), key=lambda r: r["input"]["name"])


def _biggest_plan(tmp_path, items: int) -> int:
    """The largest checkpoint (JSON characters) the parent of a map over ``items`` items commits."""
    files = {**CHILD, **parent("id: fan\ntype: map\nitems: input.items\nflow: child\nmax_concurrency: 4\n"
                               f"max_items: {items}\nitem_input: {{name: item}}\n")}
    h = Harness(build(tmp_path, files, TOOLS), store=sqlite_store(tmp_path))
    sizes, commit = [], h.store.commit

    def measured(run_id, expect_seq, run, *args, **kw):
        if (run.get("cursor") or {}).get("fanout"):
            sizes.append(len(run.get("cursor_json") or json.dumps(run["cursor"])))
        return commit(run_id, expect_seq, run, *args, **kw)

    h.store.commit = measured
    result = h.run(input={"items": [f"i{n}" for n in range(items)]})
    assert result.status == "succeeded" and [o["name"] for o in result.output] == [f"i{n}" for n in range(items)]
    return max(sizes)


def test_the_parents_checkpoint_does_not_grow_with_the_item_count(tmp_path):
    # before issue 17 it held every child's input and outcome: re-encoded on each child's end
    small, big = _biggest_plan(tmp_path / "s", 30), _biggest_plan(tmp_path / "b", 300)
    # what may differ: digits, and which of the (at most 4) children in flight it names; the plan
    # before issue 17 grew by about 100 characters per item (30 KB here)
    assert big <= small + 200, (small, big)


def test_the_response_is_read_from_the_childrens_rows_and_a_forged_one_is_refused(tmp_path):
    h = _gated(tmp_path)
    parked = h.run(input={"items": ["a", "b", "c"]})
    assert parked.status == "waiting"
    a, b, c = _children_of(h, parked.run_id)
    assert (a["status"], b["status"], c["status"]) == ("succeeded", "paused", "succeeded")
    plan = h.store.get_run(parked.run_id)["cursor"]["fanout"]
    assert "children" not in plan and "inputs" not in plan and plan["ended"]["succeeded"] == 2
    db = sqlite3.connect(tmp_path / "flowctl.db")
    db.execute("UPDATE flowctl_runs SET output = '\"forged\"' WHERE id = ?", (a["id"],))
    db.commit()
    h.engine.resume(b["id"], token=h.engine.reissue_token(b["id"]), decision="approve")  # continues the parent
    with pytest.raises(RecordTampered, match=a["id"]):
        h.engine.resume(parked.run_id)
    after = h.store.get_run(parked.run_id)
    assert after["status"] not in ("succeeded", "failed") and after["output"] is None


def test_a_childs_status_resealed_after_its_end_disagrees_with_the_parents_count(tmp_path):
    # the seal's formula is public: a re-sealed row passes its own check, not the parent's counters
    from flowctl.store.audit import encode_data, row_identity, run_seal

    h = _gated(tmp_path)
    parked = h.run(input={"items": ["a", "b", "c"]})
    a, b, _ = _children_of(h, parked.run_id)
    error = {"type": "RuntimeError", "code": "TOOL_ERROR", "message": "x", "state": "w"}
    seal = run_seal(a["id"], a["last_seq"], a["last_hash"], "failed", error, encode_data(a["cursor"]), row_identity(a))
    db = sqlite3.connect(tmp_path / "flowctl.db")
    db.execute("UPDATE flowctl_runs SET status = 'failed', error = ?, seal = ? WHERE id = ?",
               (json.dumps(error), seal, a["id"]))
    db.commit()
    h.engine.resume(b["id"], token=h.engine.reissue_token(b["id"]), decision="approve")  # continues the parent
    with pytest.raises(RecordTampered, match="its checkpoint recorded"):
        h.engine.resume(parked.run_id)
    after = h.store.get_run(parked.run_id)
    assert after["status"] not in ("succeeded", "failed") and after["output"] is None


def test_a_plan_whose_items_call_uuid_is_frozen_in_the_checkpoint_and_resumes_the_same(tmp_path):
    h = _gated(tmp_path, item_input="{name: item, tag: uuid()}", concurrency=1)
    parked = h.run(input={"items": ["a", "b", "c"]})
    plan = h.store.get_run(parked.run_id)["cursor"]["fanout"]
    assert [x[1]["name"] for x in plan["inputs"]] == ["a", "b", "c"] and "digest" not in plan
    kids = _children_of(h, parked.run_id)
    assert [k["input"]["tag"] for k in kids] == [x[1]["tag"] for x in plan["inputs"]]
    h.engine.resume(kids[1]["id"], token=h.engine.reissue_token(kids[1]["id"]), decision="approve")
    done = h.store.get_run(parked.run_id)
    assert done["status"] == "succeeded" and done["output"] == ["a", "b", "c"]


def test_children_planned_again_must_be_the_ones_the_plan_started(tmp_path, monkeypatch):
    # a worker's next claim plans the children again (the checkpoint keeps no inputs): a plan that
    # comes out otherwise (here: a planner changed under it) is refused, nothing queued from it
    from flowctl.engine import fanout
    from flowctl.engine.launchers import QueueLauncher
    from flowctl.engine.states import map as map_state

    h = _gated(tmp_path, concurrency=1)
    h.engine.launcher = QueueLauncher()
    parked = h.run(input={"items": ["a", "c"]})
    (first,) = h.store.list_runs(parent_id=parked.run_id, limit=0)
    fanout._RECENT.clear()  # as in another worker process
    real = map_state.plans
    monkeypatch.setattr(map_state, "plans", lambda ctx, state: ([(f, dict(i, name="z")) for f, i in real(ctx, state)[0]],
                                                                1, False))
    assert h.engine.resume(first["id"]).status == "succeeded"
    with pytest.raises(RecordTampered, match="planned again"):
        h.engine.resume(parked.run_id)
    assert len(h.store.list_runs(parent_id=parked.run_id, limit=0)) == 1
