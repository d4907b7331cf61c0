"""Running golden cases: a fake clock, an in-memory store, mocked tools; results and path diffs.

:func:`run_case` starts the case's flow on an :class:`~flowctl.engine.engine.Engine` whose tools are the
case's mocks (:class:`~flowctl.testing.mocks.MockTools`), whose clock is a
:class:`~flowctl.engine.clock.FakeClock` (retry delays, waits and review timeouts pass instantly) and
whose store is a :class:`~flowctl.store.sql.MemoryStore`. The real policy gate decides as it would in
production. When the run pauses for a review, the case's next ``reviews`` entry decides it (or
lets its timeout pass). The outcome is compared with ``expect``: path, status, error, a subset of
the final context and of the output, the tools compensated.

:func:`path_diff` renders a differing path as numbered ``-``/``+`` lines and says why the run
went elsewhere at the step before (the conditions evaluated, the error caught).
"""
from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from flowctl.store.audit import REDACTED
from flowctl.testing.cases import Case, one_line_path
from flowctl.testing.cassettes import CassetteProblem
from flowctl.testing.mocks import MockProblem, MockTools

PASSED, FAILED, ERROR = "passed", "failed", "error"


@dataclass
class CaseResult:
    case: Case
    status: str                               # passed | failed | error
    problems: list = field(default_factory=list)   # one line each
    diff: str = ""                            # the path diff ('' when the path matched)
    path: list = field(default_factory=list)
    run_status: str | None = None
    run_error: dict | None = None
    context: dict = field(default_factory=dict)
    output: Any = None
    events: list = field(default_factory=list)
    calls: list = field(default_factory=list)
    compensated: list = field(default_factory=list)
    seconds: float = 0.0
    fake_seconds: float = 0.0                 # time that passed on the fake clock
    cassette: str | None = None               # the cassette written (--record), relative to the project
    recorded: int = 0                         # the model calls it holds
    unrecorded: str | None = None             # why a recording was not written

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def report(self) -> str:
        """The failure as text: the path diff, then the other problems (for a case that could not run,
        why it could not first)."""
        diff = [self.diff] if self.diff else []
        if self.status == ERROR:  # the case could not run to its end: say why first
            return "\n".join(list(self.problems) + diff)
        return "\n".join(diff + list(self.problems))


def run_cases(project, cases, *, on_result=None, record: bool = False) -> list[CaseResult]:
    out = []
    for case in cases:
        result = run_case(project, case, record=record)
        out.append(result)
        if on_result is not None:
            on_result(result)
    return out


def run_case(project, case: Case, *, record: bool = False) -> CaseResult:
    """Run ``case`` and compare it with its ``expect``. Its llm and agent states answer from the
    case's ``models`` replies, else from its cassette (:mod:`flowctl.testing.cassettes`), else from
    a ``fake`` profile; ``record``: the states neither mocks nor a fake profile answers call their
    profile's real provider, and the replies are written as the case's cassette."""
    from flowctl.engine.clock import FakeClock
    from flowctl.testing import cassettes
    from flowctl.engine.engine import Engine
    from flowctl.errors import FlowctlError
    from flowctl.store.sql import MemoryStore

    started = time.perf_counter()
    clock = FakeClock()
    t0 = clock.time()
    seen: list = []
    mocks = MockTools(case.mocks, seen)
    store = MemoryStore()
    engine = Engine(project, store, clock=clock, max_inline_wait=float("inf"), check=False,
                    tool_resolver=mocks.resolve, listener=seen.append)
    engine.model_mocks = case.models  # llm and agent states answered by the case's replies (flowctl.models.fake)
    result = CaseResult(case, ERROR)
    problems: list = []
    run = None
    deciding = None
    tape = None
    try:
        tape = cassettes.tape_for(project, case, record=record, seen=seen)
        engine.model_provider = tape.provider  # the states the case does not mock: its cassette
        run = engine.run(case.flow, case.input, params=case.params)
        reviews = list(case.reviews)
        while run.status in ("paused", "waiting"):
            if run.status == "waiting":  # only a wait longer than forever parks; resume it when due
                clock.advance(max(0.0, (run.available_at or clock.time()) - clock.time()))
                run = engine.resume(run.run_id)
                continue
            if not reviews:
                break
            step = reviews.pop(0)
            pending = run.review or {}
            if step.state and pending.get("state") != step.state:
                problems.append(f"{step.where}: the run paused for review at '{pending.get('state')}', "
                                f"not '{step.state}'")
            if step.timeout:
                deadline = pending.get("deadline")
                if deadline is None:
                    problems.append(f"{step.where}: the review at '{pending.get('state')}' has no timeout to pass")
                    break
                clock.advance(max(0.0, deadline - clock.time()) + 1)
                run = engine.resume(run.run_id)
            else:
                deciding = step  # a refused decision is this review step's fault: located at it
                run = engine.resume(run.run_id, token=pending.get("token"), decision=step.decision, data=step.data,
                                    by=step.by or "flowctl test")
                deciding = None
        if reviews:
            problems.append(f"{reviews[0].where}: {len(reviews)} review step{'s' * (len(reviews) != 1)} left unused "
                            f"(the run ended {run.status} at '{(run.path or ['?'])[-1]}')")
    except (MockProblem, CassetteProblem) as exc:
        run = None
        kind = "mock" if isinstance(exc, MockProblem) else "cassette"
        problems.append(f"{kind} problem: {exc.message}" + (f"\n    hint: {exc.hint}" if exc.hint else ""))
    except FlowctlError as exc:
        run = None
        where = deciding.where if deciding is not None else case.where("input") if "input" in str(exc) else case.file
        problems.append(f"{where}: the run could not start or continue: {exc.message or exc}"
                        + (f"\n    hint: {exc.hint}" if getattr(exc, "hint", "") else ""))
    if mocks.problem is not None and run is not None:  # the engine handled it as a crashed tool: still the case's fault
        run = None
        problems.append(f"mock problem: {mocks.problem.message}"
                        + (f"\n    hint: {mocks.problem.hint}" if mocks.problem.hint else ""))
        if mocks.problem_steps is not None:
            seen = seen[:mocks.problem_steps]
    if tape is not None and tape.problem is not None and run is not None:  # a model error the layers handled
        run = None
        problems.append(f"cassette problem: {tape.problem.message}\n    hint: {tape.problem.hint}")
        if tape.problem_steps is not None:
            seen = seen[:tape.problem_steps]
    if record and tape is not None:
        _save(project, case, tape, result, problems)
    result.events = seen
    result.calls = mocks.calls
    result.compensated = list(mocks.compensated)
    result.fake_seconds = clock.time() - t0
    result.path = [e["state"] for e in own_events(seen) if e["type"] == "state_entered"]
    if run is not None:
        row = store.get_run(run.run_id)
        if not result.path:  # the events give the whole path; the checkpoint keeps only its tail
            result.path = list(run.path)
        result.run_status = run.status
        result.run_error = run.error
        result.output = run.output
        result.context = (row.get("cursor") or {}).get("context") or {}
        problems.extend(compare(case, result))
        result.status = PASSED if not problems and not result.diff else FAILED
    result.problems = problems
    result.seconds = time.perf_counter() - started
    return result


def _save(project, case, tape, result, problems) -> None:
    """Write what ``tape`` recorded as the case's cassette, unless nothing was or it must not be."""
    from flowctl.testing import cassettes

    if tape.unrecorded is not None:
        result.unrecorded = f"not recorded: {tape.unrecorded}"
    elif tape.unanswered:
        result.unrecorded = f"not recorded: {next(iter(tape.unanswered.values()))}; check the provider's server and key"
    elif any(p.startswith("mock problem") for p in problems):
        result.unrecorded = "not recorded: the case could not run to its end"
    elif tape.calls:
        try:
            cassettes.save(project, case, tape.calls)
        except (cassettes.CassetteProblem, OSError) as exc:
            result.unrecorded = f"not recorded: {getattr(exc, 'message', None) or exc}"
            return
        result.cassette = tape.where
        result.recorded = len(tape.calls)


def own_events(events) -> list:
    """The events of the case's own run (the first run started), without its child runs'."""
    first = events[0].get("run_id") if events else None
    return [e for e in events if e.get("run_id") == first]


def compare(case: Case, result: CaseResult) -> list:
    """Problems of ``result`` against ``case.expect`` (the path diff goes to ``result.diff``)."""
    x = case.expect
    out = []
    if x.path is not None and x.path != result.path:
        result.diff = path_diff(x.path, result.path, own_events(result.events))
    if x.status and x.status != result.run_status:
        why = ""
        if result.run_error:
            e = result.run_error
            why = f" with {e.get('type')} at '{e.get('state')}'" + (f": {e['message']}" if e.get("message") else "")
        elif result.run_status == "paused":
            why = " (paused for a review the case gives no decision for: add it under reviews)"
        out.append(f"status: expected {x.status}, got {result.run_status}{why}")
    if x.error:
        e = result.run_error or {}
        if x.error not in (e.get("type"), e.get("code")):
            got = f"{e.get('type')} ({e.get('code')})" if e else "no error"
            out.append(f"error: expected {x.error}, got {got}")
    if x.context is not None:
        out.extend(subset_problems(x.context, result.context, "context"))
    if x.has_output:
        out.extend(subset_problems(x.output, result.output, "output"))
    if x.compensated is not None and list(x.compensated) != result.compensated:
        out.append(f"compensated: expected {x.compensated}, got {result.compensated}")
    return out


# ------------------------------------------------------------------------------------ subsets
def subset_problems(expected, actual, path: str) -> list:
    """Where ``actual`` does not contain ``expected``: objects as subsets, lists and scalars exactly."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {_fmt(actual)}"]
        out = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{path}.{key}: missing (expected {_fmt(value)})")
            else:
                out.extend(subset_problems(value, actual[key], f"{path}.{key}"))
        return out
    return [] if same(expected, actual) else [f"{path}: expected {_fmt(expected)}, got {_fmt(actual)}"]


def same(a, b) -> bool:
    """JSON equality: ``1 == 1.0`` but ``true != 1``; lists element-wise; objects key-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def _fmt(value) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:199] + "…"


# ------------------------------------------------------------------------------------ path diffs
def one_line(path) -> str:
    """:func:`~flowctl.testing.cases.one_line_path`, or ``(no state entered)`` for an empty path."""
    return one_line_path(path) or "(no state entered)"


def first_difference(expected, actual) -> int | None:
    """0-based index of the first differing step, or None when equal."""
    for i, (a, b) in enumerate(zip(expected, actual)):
        if a != b:
            return i
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def path_diff(expected, actual, events=()) -> str:
    """Numbered ``-`` expected / ``+`` actual lines, the one-line paths, and why the run went elsewhere."""
    i = first_difference(expected, actual)
    if i is None:
        return ""
    lines = [f"path differs from step {i + 1} (- expected, + actual):"]
    matcher = difflib.SequenceMatcher(a=expected, b=actual, autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            lines.extend(f"      {b + 1:>3}  {actual[b]}" for b in range(b1, b2))
            continue
        lines.extend(f"    - {a + 1:>3}  {expected[a]}" for a in range(a1, a2))
        lines.extend(f"    + {b + 1:>3}  {actual[b]}" for b in range(b1, b2))
    lines.append(f"  expected: {one_line(expected)}")
    lines.append(f"  actual:   {one_line(actual)}")
    why = explain(events, i) if events else []
    if why:
        lines.append("  why: " + why[0])
        lines.extend("       " + w for w in why[1:])
    return "\n".join(lines)


def explain(events, index: int) -> list:
    """Why the run left step ``index`` (0-based; the step *before* the first difference) the way it
    did: the tool errors, the handlers, the review decisions, the conditions of the transitions."""
    if index == 0:
        starts = [e for e in events if e["type"] == "state_entered"]
        return [f"the flow starts at '{starts[0]['state']}'"] if starts else ["no state was entered"]
    step_events = events_of_step(events, index)  # the step before the difference, 1-based = index
    if not step_events:
        return []
    state = step_events[0]["state"]
    out = []
    head = f"at '{state}' (step {index})"
    for ev in step_events[1:]:
        t, d = ev["type"], ev.get("data") or {}
        if t == "tool_failed":
            out.append(f"{d.get('tool')} failed with {d.get('error')}: {d.get('message')} (attempt {ev.get('attempt')})")
        elif t == "policy_decided" and d.get("outcome") != "allow":
            out.append(f"the policy gate said {d.get('outcome')}: {d.get('reason')}")
        elif t == "verify_failed":
            out.append(f"verify of {d.get('tool')} said the effect did not happen")
        elif t == "error_caught":
            e = d.get("error") or {}
            where = {"state": "the state's on_error", "flow": "the flow's on_error",
                     "default": "no handler (default: compensate and fail)"}.get(d.get("layer"), d.get("layer"))
            handler = f"[{d.get('handler')}]" if d.get("handler") is not None else ""
            out.append(f"{e.get('type')} was caught by {where}{handler}")
        elif t == "review_decided":
            out.append(f"the review decided {d.get('decision')}")
        elif t == "review_timed_out":
            out.append("the review timed out (on_timeout)")
        elif t == "transition_taken":
            to = d.get("to")
            if to == REDACTED:  # a field named `to` is sensitive in this flow; the next step says where
                after = events_of_step(events, index + 1)
                to = after[0]["state"] if after else to
            out.append(f"took the transition to '{to}':")
            for c in d.get("conditions") or ():
                cond = c.get("when") or "(default)"
                out.append(f"    {cond}  →  {json.dumps(c.get('result'))}")
        elif t == "run_failed":
            e = d.get("error") or {}
            out.append(f"the run failed: {e.get('type')}: {e.get('message')}")
        elif t == "run_paused":
            out.append(f"the run paused ({d.get('status')})")
        elif t == "run_succeeded":
            out.append("the run succeeded")
    if not out:
        return [head + ": the run stopped here"]
    return [head + ": " + out[0]] + out[1:]


def events_of_step(events, step: int) -> list:
    """Events of the ``step``-th state entered (1-based), from its state_entered to the next."""
    out = []
    count = 0
    for ev in events:
        if ev["type"] == "state_entered":
            count += 1
            if count > step:
                break
        if count == step:
            out.append(ev)
    return out


__all__ = ["CaseResult", "run_case", "run_cases", "compare", "subset_problems", "same", "path_diff", "explain",
           "first_difference", "events_of_step", "own_events", "PASSED", "FAILED", "ERROR"]
