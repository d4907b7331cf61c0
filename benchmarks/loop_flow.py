"""The workload every step benchmark runs: a 3-state cycle a -> b -> c -> a with a trivial tool per
state and one JMESPath condition per transition, then c -> done.

Per transition every contender does the same work: call the tool of the state it is in (input
built from ``context.n``), evaluate the transition's condition over a scope of
``{visits, response, context}``, copy ``response.n`` into ``context.n``, move to the next state.
The condition is compiled the way flowctl compiles it (:func:`flowctl.expr.expressions.compile_expr`:
JMESPath parse trees turned into closures, :mod:`flowctl.expr.compile`) for every contender, so
that no peer or floor pays for jmespath's tree interpreter, which flowctl does not use.

* :func:`make_project` writes it as a flowctl project (``orchestration/``);
* :func:`bare_loop` is the floor: exactly those calls in a plain ``for`` loop;
* :data:`CONDITIONS` / :func:`tool` are shared by the peers (transitions, python-statemachine, DBOS).
"""
from __future__ import annotations

import time
from pathlib import Path

from flowctl.expr.expressions import compile_expr

TOOLS = "def step(input, call):\n    return {'n': (input.get('n') or 0) + 1}\n"
NEXT = {"a": "b", "b": "c", "c": "a"}
# The condition of the transition leaving each state. c's bounds the loop in flowctl (visits.c <
# rounds); the peers run a fixed number of events, so theirs uses a bound that is never reached.
CONDITION_TEXT = {"a": "response.n > `0`", "b": "response.n > `0`", "c": "visits.c < `{rounds}`"}
NEVER = 10**9
#: ``{state: fn(scope) -> value}``: flowctl's compiled condition of the transition leaving the state.
CONDITIONS = {s: compile_expr(t.format(rounds=NEVER)).evaluate for s, t in CONDITION_TEXT.items()}


def tool(input: dict, call=None) -> dict:
    """The trivial tool, the same body as ``orchestration/tools/loop_tools.py:step``."""
    return {"n": (input.get("n") or 0) + 1}


def rounds_for(transitions: int) -> int:
    if transitions % 3:
        raise ValueError(f"transitions ({transitions}) must be a multiple of 3: whole a->b->c cycles")
    return transitions // 3


def make_project(root: Path, transitions: int) -> Path:
    """A flowctl project whose flow ``loop`` makes ``transitions`` tool calls, each followed by one
    condition evaluation (``transitions`` / 3 rounds of a -> b -> c), then ends in ``done``."""
    rounds = rounds_for(transitions)
    orch = root / "orchestration"
    for sub in ("states", "transitions", "contracts", "tools"):
        (orch / sub).mkdir(parents=True, exist_ok=True)
    (orch / "tools" / "loop_tools.py").write_text(TOOLS)
    (orch / "contracts" / "step.v1.0.0.yaml").write_text(
        "id: step\nversion: 1.0.0\nentrypoint: loop_tools:step\n"
        "input_schema: {type: object}\noutput_schema: {type: object, required: ['n']}\n")
    for s in "abc":
        (orch / "states" / f"{s}.yaml").write_text(f"id: {s}\ntype: task\ntool: step@^1\ninput: {{n: context.n}}\n")
    (orch / "states" / "done.yaml").write_text("id: done\ntype: succeed\n")
    (orch / "states" / "stuck.yaml").write_text("id: stuck\ntype: fail\nerror: Stuck\n")
    lines = [f"flow: loop\nstart: a\nlimits: {{max_steps: {transitions + 10}, max_visits: {rounds + 10}}}\ntransitions:"]
    for s in "abc":
        cond = CONDITION_TEXT[s].format(rounds=rounds)
        lines.append(f"  - {{from: {s}, to: {NEXT[s]}, when: '{cond}', set: {{n: response.n}}}}")
        lines.append(f"  - {{from: {s}, to: {'done' if s == 'c' else 'stuck'}}}")
    (orch / "transitions" / "loop.yaml").write_text("\n".join(lines) + "\n")
    return root


def expected_steps(transitions: int) -> int:
    """flowctl's ``RunResult.steps`` for the flow of :func:`make_project`: every tool call plus the
    final ``done`` state."""
    return transitions + 1


def drive(transitions: int, call=tool) -> dict:
    """The loop itself: ``transitions`` tool calls (``call``), each followed by its compiled
    condition and the context update. The floor times it with the plain tool; DBOS runs it as a
    workflow whose ``call`` is a ``@DBOS.step``. Returns the final context."""
    conditions, nxt = CONDITIONS, NEXT
    visits = {"a": 0, "b": 0, "c": 0}
    context = {"n": 0}
    state = "a"
    for _ in range(transitions):
        visits[state] += 1
        response = call({"n": context["n"]})
        if not conditions[state]({"visits": visits, "response": response, "context": context}):
            raise AssertionError("condition false")
        context = {"n": response["n"]}
        state = nxt[state]
    return context


def record_loop(transitions: int) -> float:
    """The floor plus the audit record every flowctl step keeps, nothing else: per transition the
    stored texts of its four events (``state_entered``, ``tool_invoked``, ``tool_succeeded``,
    ``transition_taken``, made by flowctl's own :mod:`flowctl.engine.eventtext`) with a timestamp
    each, kept as the memory store keeps them, and their hash chain (the memory store's
    ``_chain``: one sha256 per event) computed at the end, as reading a run computes it. No
    checkpoint, schema check, timeout guard, copy or limit. Returns wall seconds."""
    from flowctl.engine.eventtext import entered_text, flat_text, invoked_frame, key_text, succeeded_head
    from flowctl.store.memory import _chain

    conditions, nxt = CONDITIONS, NEXT
    frame, head = invoked_frame("step@1.0.0", 30.0), succeeded_head("step@1.0.0")
    taken = {s: '{"to":%s,"conditions":[{"when":%s,"result":true}],"line":%d}' % (
        f'"{nxt[s]}"', f'"{CONDITION_TEXT[s].format(rounds=NEVER)}"', 6) for s in nxt}
    now = time.time
    started = time.perf_counter()
    visits = {"a": 0, "b": 0, "c": 0}
    context = {"n": 0}
    state = "a"
    kept = []
    add = kept.append
    seq = 0
    for step in range(1, transitions + 1):
        visit = visits[state] = visits[state] + 1
        add((seq + 1, now(), "state_entered", state, 1, entered_text("task", step, visit), None))
        given = {"n": context["n"]}
        key = f"run:{state}:{visit}"
        add((seq + 2, now(), "tool_invoked", state, 1,
             f'{frame[0]}{flat_text(given)},"idempotency_key":{key_text(key)}{frame[1]}', None))
        response = tool(given)
        add((seq + 3, now(), "tool_succeeded", state, 1, f'{head}{flat_text(response)},"duration_ms":0.001}}', None))
        if not conditions[state]({"visits": visits, "response": response, "context": context}):
            raise AssertionError("condition false")
        add((seq + 4, now(), "transition_taken", state, 1, taken[state], None))
        seq += 4
        context = {"n": response["n"]}
        state = nxt[state]
    _chain(kept, 0, [])
    took = time.perf_counter() - started
    assert context["n"] == transitions and len(kept) == 4 * transitions
    return took


def bare_loop(transitions: int) -> float:
    """The floor: the same tool calls, the same compiled conditions, the same context update —
    nothing else. Returns wall seconds."""
    started = time.perf_counter()
    context = drive(transitions)
    took = time.perf_counter() - started
    assert context["n"] == transitions
    return took
