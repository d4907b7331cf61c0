"""Steps per second of a 3-state loop with trivial tools and one JMESPath condition per step:
flowctl on the in-memory store, on SQLite (one checkpoint commit per step, WAL,
synchronous=NORMAL), on PostgreSQL when reachable, and the floor — a bare Python loop making the
same tool calls and the same compiled JMESPath evaluation."""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import jmespath

TOOLS = "def step(input, call):\n    return {'n': (input.get('n') or 0) + 1}\n"


def make_project(root: Path, steps: int) -> Path:
    orch = root / "orchestration"
    for sub in ("states", "transitions", "contracts", "tools"):
        (orch / sub).mkdir(parents=True, exist_ok=True)
    (orch / "tools" / "loop_tools.py").write_text(TOOLS)
    (orch / "contracts" / "step.v1.0.0.yaml").write_text(
        "id: step\nversion: 1.0.0\nentrypoint: loop_tools:step\n"
        "input_schema: {type: object}\noutput_schema: {type: object, required: [n]}\n")
    for s in "abc":
        (orch / "states" / f"{s}.yaml").write_text(f"id: {s}\ntype: task\ntool: step@^1\ninput: {{n: context.n}}\n")
    (orch / "states" / "done.yaml").write_text("id: done\ntype: succeed\n")
    rounds = steps // 3
    (orch / "transitions" / "loop.yaml").write_text(
        f"flow: loop\nstart: a\nlimits: {{max_steps: {steps + 10}}}\ntransitions:\n"
        "  - {from: a, to: b, set: {n: response.n}}\n"
        "  - {from: b, to: c, set: {n: response.n}}\n"
        f"  - {{from: c, to: a, when: 'visits.c < `{rounds}`', set: {{n: response.n}}}}\n"
        "  - {from: c, to: done}\n")
    return root


def floor(steps: int) -> float:
    """The same work with nothing around it: tool calls and one compiled condition per step."""
    def step(input, call):
        return {"n": input.get("n", 0) + 1}

    cond = jmespath.compile("visits.c < `1000000000`")
    visits = {"a": 0, "b": 0, "c": 0}
    context = {"n": 0}
    started = time.perf_counter()
    state = "a"
    for _ in range(steps):
        visits[state] += 1
        out = step({"n": context["n"]}, None)
        cond.search({"visits": visits, "response": out, "context": context})
        context = {"n": out["n"]}
        state = {"a": "b", "b": "c", "c": "a"}[state]
    return time.perf_counter() - started


def flowctl_run(root: Path, steps: int, db: str) -> float:
    import flowctl
    from flowctl.store import open_store

    project = flowctl.load_project(root)
    store = open_store(db)
    engine = flowctl.Engine(project, store, check=False)
    started = time.perf_counter()
    result = engine.run("loop", {})
    took = time.perf_counter() - started
    assert result.status == "succeeded", result
    assert result.steps >= steps, result.steps
    store.close()
    return took


def run(steps: int = 3000, repeat: int = 3, pg_url: str | None = None) -> dict:
    out = {"steps": steps}
    with tempfile.TemporaryDirectory() as tmp:
        root = make_project(Path(tmp), steps)
        samples: dict = {"floor": [], "memory": [], "sqlite": []}
        for i in range(repeat):
            samples["floor"].append(floor(steps))
            samples["memory"].append(flowctl_run(root, steps, "memory"))
            samples["sqlite"].append(flowctl_run(root, steps, f"sqlite:///{tmp}/bench{i}.db"))
            if pg_url:
                samples.setdefault("postgresql", []).append(flowctl_run(root, steps, pg_url))
    for name, values in samples.items():
        t = statistics.median(values)
        out[name] = {"seconds": t, "steps_per_s": steps / t, "us_per_step": t / steps * 1e6}
    f = out["floor"]["seconds"]
    out["ratios_to_floor"] = {k: out[k]["seconds"] / f for k in samples if k != "floor"}
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
