"""In-memory step (issue 8, part 1): the loop of :mod:`loop_flow` run for the same number of
transitions by

* the floor — a bare Python loop making the same tool calls and condition evaluations;
* the floor plus the record (:func:`loop_flow.record_loop`) — that loop plus the audit record
  flowctl keeps of each step and nothing else: the four events' stored texts and their hash chain
  (what any engine keeping this log pays; target 1 cannot go below it);
* ``transitions`` (0.9.x) — a ``Machine`` with a condition callback per transition and the tool
  called on entering each state;
* ``python-statemachine`` (3.x) — a ``StateMachine`` with the same callbacks;
* flowctl — ``Engine(project, MemoryStore(), check=False).run("loop")``: for each step the input
  mapping, input/output schema checks, the tool, the condition, ``set``, and the audit events.

Every contender evaluates flowctl's compiled conditions (:data:`loop_flow.CONDITIONS`), not
jmespath's interpreter. The memory store seals the audit hash chain when a run is first read;
flowctl's timed trial ends by reading the run back (``store.get_run``), so the chain of every
event is computed inside the timing.

Trials are interleaved (one of each per round, order rotated) and reported as medians with their
min–max spread. Target (issue 17, 1): flowctl at most 0.8x one ``transitions`` transition.

    python benchmarks/bench_memory.py [--transitions 24000] [--trials 5]
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import interleaved, loadavg, stats, write  # noqa: E402
from report import target  # noqa: E402
from loop_flow import CONDITIONS, bare_loop, expected_steps, make_project, record_loop, tool  # noqa: E402


class _Model:
    """The state a peer machine carries: visit counts, context, the last tool response."""

    def __init__(self):
        self.visits = {"a": 0, "b": 0, "c": 0}
        self.context = {"n": 0}
        self.response = None

    def call(self, state):
        self.visits[state] += 1
        self.response = tool({"n": self.context["n"]})

    def holds(self, state) -> bool:
        ok = CONDITIONS[state]({"visits": self.visits, "response": self.response, "context": self.context})
        if ok:
            self.context = {"n": self.response["n"]}
        return ok


def transitions_lib(n: int) -> float:
    from transitions import Machine

    class Model(_Model):
        def ok_a(self):
            return self.holds("a")

        def ok_b(self):
            return self.holds("b")

        def ok_c(self):
            return self.holds("c")

        def on_enter_a(self):
            self.call("a")

        def on_enter_b(self):
            self.call("b")

        def on_enter_c(self):
            self.call("c")

    model = Model()
    Machine(model=model, states=["a", "b", "c"], initial="a", auto_transitions=False, transitions=[
        {"trigger": "step", "source": "a", "dest": "b", "conditions": "ok_a"},
        {"trigger": "step", "source": "b", "dest": "c", "conditions": "ok_b"},
        {"trigger": "step", "source": "c", "dest": "a", "conditions": "ok_c"}])
    started = time.perf_counter()
    model.call("a")  # the initial state's tool (entering the initial state fires no callback)
    for _ in range(n - 1):
        model.step()
    took = time.perf_counter() - started
    assert model.context["n"] == n - 1 and sum(model.visits.values()) == n, (model.context, model.visits)
    return took


def statemachine_lib(n: int) -> float:
    from statemachine import State, StateMachine

    class Loop(StateMachine):
        a = State(initial=True)
        b = State()
        c = State()
        step = a.to(b, cond="ok_a") | b.to(c, cond="ok_b") | c.to(a, cond="ok_c")

        def __init__(self):
            self.m = _Model()
            super().__init__()

        def ok_a(self):
            return self.m.holds("a")

        def ok_b(self):
            return self.m.holds("b")

        def ok_c(self):
            return self.m.holds("c")

        def on_enter_a(self):
            self.m.call("a")

        def on_enter_b(self):
            self.m.call("b")

        def on_enter_c(self):
            self.m.call("c")

    started = time.perf_counter()
    sm = Loop()  # entering the initial state calls a's tool
    for _ in range(n - 1):
        sm.step()
    took = time.perf_counter() - started
    m = sm.m
    assert m.context["n"] == n - 1 and sum(m.visits.values()) == n, (m.context, m.visits)
    return took


def flowctl_factory(root: Path, n: int):
    import flowctl
    from flowctl.store.sql import MemoryStore

    project = flowctl.load_project(root)

    def once() -> float:
        store = MemoryStore()
        engine = flowctl.Engine(project, store, check=False)
        started = time.perf_counter()
        result = engine.run("loop", {})
        row = store.get_run(result.run_id, exact=True)  # seals the audit hash chain: part of the step's cost
        took = time.perf_counter() - started
        assert result.status == "succeeded" and result.steps == expected_steps(n), (result.status, result.steps)
        assert row["last_hash"] and row["last_seq"] >= n, row
        return took

    return once


def _collected(fn):
    def run_once():
        gc.collect()  # start every trial from the same heap state
        return fn()
    return run_once


def run(transitions: int = 24000, trials: int = 5) -> dict:
    import importlib.metadata as md

    with tempfile.TemporaryDirectory(prefix="flowctl-bench-mem-") as tmp:
        root = make_project(Path(tmp), transitions)
        contenders = {
            "floor": lambda: bare_loop(transitions),
            "floor + the record": lambda: record_loop(transitions),
            "transitions": lambda: transitions_lib(transitions),
            "python-statemachine": lambda: statemachine_lib(transitions),
            "flowctl": flowctl_factory(root, transitions),
        }
        before = loadavg()
        samples = interleaved({k: _collected(f) for k, f in contenders.items()}, trials)
        after = loadavg()
    out: dict = {"transitions": transitions, "trials": trials, "loadavg_before": before, "loadavg_after": after,
                 "versions": {p: md.version(p) for p in ("transitions", "python-statemachine", "jmespath")}}
    out["results"] = {k: stats(v, transitions) for k, v in samples.items()}
    out["samples_s"] = samples
    floor = out["results"]["floor"]["median_s"]
    tr = out["results"]["transitions"]["median_s"]
    out["ratio_to_floor"] = {k: v["median_s"] / floor for k, v in out["results"].items()}
    out["ratio_to_transitions"] = {k: v["median_s"] / tr for k, v in out["results"].items()}
    fc = out["results"]["flowctl"]["median_s"]
    record = out["results"]["floor + the record"]["median_s"]
    out["targets"] = {
        "1. in-memory step <= 0.8x one `transitions` transition (compiled conditions, hash chain included)":
            target(fc / tr, 0.8, unit="x transitions",
                   ratios={"flowctl / floor": fc / floor, "the record alone / transitions": record / tr}),
    }
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=24000)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    result = run(args.transitions, args.trials)
    write("memory", result)
    print(json.dumps({k: v for k, v in result.items() if k != "samples_s"}, indent=2))
