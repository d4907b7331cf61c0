"""Fan-out asks the engine's launcher to run child runs (flowctl.engine.launchers): threads by
default, queued runs with a worker's QueueLauncher; a plan once queued stays queued."""
from __future__ import annotations

from support.enginekit import Harness, build, sqlite_store
from flowctl.engine.launchers import QueueLauncher, ThreadLauncher

from test_fanout import CHILD, TOOLS, parent


class Recording(ThreadLauncher):
    def __init__(self):
        self.asked = []

    def drive(self, ctx, state, fan, children):
        self.asked.append((state.id, list(range(fan["next"], fan["count"]))))
        return super().drive(ctx, state, fan, children)


def _map(tmp_path, name="p"):
    files = {**CHILD, **parent("id: fan\ntype: map\nitems: input.items\nflow: child\nitem_input: {name: item}\n")}
    return build(tmp_path, files, TOOLS, name=name)


def test_the_engine_runs_children_through_the_launcher_it_was_given(tmp_path):
    h = Harness(_map(tmp_path))
    h.engine.launcher = recording = Recording()
    result = h.run(input={"items": ["a", "b"]})
    assert result.status == "succeeded" and [o["name"] for o in result.output] == ["a", "b"]
    assert recording.asked == [("fan", [0, 1])]


def test_a_queue_launcher_queues_the_children_and_parks_the_parent(tmp_path):
    h = Harness(_map(tmp_path), store=sqlite_store(tmp_path))
    h.engine.launcher = QueueLauncher()
    result = h.run(input={"items": ["a", "b", "c"]})
    assert result.status == "waiting"
    children = h.store.list_runs(parent_id=result.run_id, limit=0)
    assert [c["status"] for c in children] == ["queued"]  # max_concurrency 1: one open at a time
    plan = h.store.get_run(result.run_id)["cursor"]["fanout"]
    assert plan["queued"] is True


def test_a_plan_queued_for_workers_stays_queued_when_a_plain_engine_resumes_it(tmp_path):
    root = _map(tmp_path)
    store = sqlite_store(tmp_path)
    queuing = Harness(root, store=store)
    queuing.engine.launcher = QueueLauncher()
    parent_run = queuing.run(input={"items": ["a", "b"]})
    plain = Harness(root, store=store)  # as `flowctl resume` has it: threads by default
    plain.engine.launcher = recording = Recording()
    assert plain.engine.resume(parent_run.run_id).status == "waiting"
    assert recording.asked == []  # the queue launcher continued it, not threads beside the workers
    assert len(store.list_runs(parent_id=parent_run.run_id, limit=0)) == 1
