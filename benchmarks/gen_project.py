"""Generate a large, valid orchestration/ tree: ``flows`` flows of ``states_per_flow`` states.

Each flow is a chain of task states calling one of a few read-only tools, with a conditional
retry loop on each state and a default transition, ending in a shared succeed state.
"""
from __future__ import annotations

from pathlib import Path

TOOL = """id: lookup{n}
version: 1.0.0
entrypoint: bench_tools:lookup
input_schema: {{type: object}}
output_schema: {{type: object}}
timeout: 2s
"""

STATE = """id: {sid}
description: Look something up for step {i} of flow {f}.
type: task
tool: lookup{t}@^1
input:
  order_id: input.order_id
  step: "'{sid}'"
timeout: 3s
retry:
  - errors: [ToolTimeout, ToolUnavailable]
    max_attempts: 3
    interval: 1s
    backoff: 2.0
    max_delay: 10s
"""


def generate(root: Path, flows: int = 1000, states_per_flow: int = 10, tools: int = 5) -> Path:
    orch = root / "orchestration"
    for sub in ("states", "transitions", "contracts", "policies", "tools"):
        (orch / sub).mkdir(parents=True, exist_ok=True)
    for n in range(tools):
        (orch / "contracts" / f"lookup{n}.v1.0.0.yaml").write_text(TOOL.format(n=n))
    (orch / "states" / "finished.yaml").write_text("id: finished\ntype: succeed\n")
    (orch / "tools" / "bench_tools.py").write_text("def lookup(input, call):\n    return {'status': 'success'}\n")
    for f in range(flows):
        ids = [f"f{f}_s{i}" for i in range(states_per_flow)]
        for i, sid in enumerate(ids):
            (orch / "states" / f"{sid}.yaml").write_text(STATE.format(sid=sid, i=i, f=f, t=(f + i) % tools))
        lines = [f"flow: flow{f}", "version: 1", f"start: {ids[0]}", "transitions:"]
        for i, sid in enumerate(ids):
            nxt = ids[i + 1] if i + 1 < len(ids) else "finished"
            lines += [f"  - from: {sid}", f"    when: \"response.status == 'retry' && visits.{sid} < `3`\"",
                      f"    to: {sid}", f"  - from: {sid}", f"    to: {nxt}",
                      "    set:", f"      last: response.status"]
        (orch / "transitions" / f"flow{f}.yaml").write_text("\n".join(lines) + "\n")
    return root
