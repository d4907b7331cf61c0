"""Replay: a recorded run re-run under another definition, and where its path diverges.

Like Temporal's replayer against a saved history: nothing real is called. The recorded run's
audit events supply, in order,

* every tool outcome (``tool_succeeded`` output, ``tool_failed`` error by name, a ``verify_failed``
  boundary) — served per tool id in call order by :class:`RecordedTools`;
* every ``uuid()``/``now()`` value (``transition_taken.recorded``) — through the engine's
  ``recorder_factory`` hook;
* every review decision and review timeout.

The run starts on a fake clock at the recorded start time with the recorded input and params, on
an in-memory store; the real policy gate decides. :func:`replay` compares the states entered with
the recorded ones and reports the first step that differs, with why each side went where it did.

Fields a contract marks ``sensitive`` are redacted in the audit log, so their recorded values are
lost: a redacted output field is replayed with the run input's value of the same name when that
fits the output schema, else with a value the schema accepts, and the result says so.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from .mocks import make_error
from .runner import explain, first_difference, one_line


class ReplayStop(BaseException):
    """The new definition asks for something the recording does not have. Remembered by
    :class:`RecordedTools` (``stop``), so the replay stops there whether or not the engine lets
    the exception through."""


@dataclass
class Recording:
    row: dict
    events: list
    path: list
    outcomes: dict        # tool id -> [outcome]
    reviews: list         # [{decision, data, by} | {timeout: True}]
    values: list          # [{kind: uuid|now, value}]

    @property
    def run_id(self) -> str:
        return self.row["id"]


def recording(row: dict, events: list) -> Recording:
    outcomes: dict = {}
    reviews: list = []
    values: list = []
    pending = None
    for ev in events:
        t, d = ev["type"], ev.get("data") or {}
        if t == "tool_invoked":
            pending = {"state": ev.get("state"), "tool": d.get("tool"), "input": d.get("input"),
                       "attempt": ev.get("attempt"), "purpose": d.get("purpose")}
        elif t in ("tool_succeeded", "tool_failed") and pending is not None:
            out = dict(pending)
            if t == "tool_succeeded":
                out["output"] = d.get("output")
            else:
                out["error"], out["message"] = d.get("error"), d.get("message")
            outcomes.setdefault(_tool_id(pending["tool"]), []).append(out)
            pending = None
        elif t == "verify_failed" and pending is not None and pending["tool"] == d.get("tool"):
            out = dict(pending, boundary=True)
            outcomes.setdefault(_tool_id(pending["tool"]), []).append(out)
            pending = None
        elif t == "review_decided":
            reviews.append({"decision": d.get("decision"), "data": d.get("data"), "by": d.get("by")})
        elif t == "review_timed_out":
            reviews.append({"timeout": True})
        elif t == "transition_taken":
            values.extend(d.get("recorded") or ())
    path = [e["state"] for e in events if e["type"] == "state_entered"]
    return Recording(row, events, path, outcomes, reviews, values)


def load_recording(store, run_id: str) -> Recording:
    from ..errors import UsageError

    row = store.get_run(run_id)
    events = store.events(row["id"])
    if not events:
        raise UsageError(f"run {row['id']} has no audit events to replay")
    return recording(row, events)


def _tool_id(ref) -> str:
    return str(ref or "").split("@")[0]


class RecordedTools:
    """A ``tool_resolver`` serving a recording's outcomes per tool id, in call order."""

    def __init__(self, rec: Recording, sensitive=frozenset(), seen: list | None = None):
        self.seen = seen
        self.stop: ReplayStop | None = None
        self.stop_steps: int | None = None   # events recorded before the stop
        self.queues = {tool: list(items) for tool, items in rec.outcomes.items()}
        self.run_input = rec.row.get("input")
        self.sensitive = sensitive
        self.notes: list = []
        self._answered: dict = {}
        self._undone: set = set()

    def resolve(self, contract, kind):
        if kind == "entrypoint":
            return lambda tool_input, call: self._invoke(contract, tool_input, call)
        if kind == "verify":
            return lambda tool_input, output, call: self._verify(contract, call)
        if kind == "compensate":
            return lambda tool_input, output, call: self._undone.add((contract.id, call.idempotency_key))
        if kind == "snapshot":  # never the real systems: the recording holds the snapshots taken then
            return lambda tool_input, call: {"replayed": True}
        return None

    def _invoke(self, contract, tool_input, call):
        from ..audit import redact

        queue = self.queues.get(contract.id) or []
        if not queue:
            stop = ReplayStop(f"'{call.state}' calls {contract.id}, but the recorded run has no further "
                              f"{contract.id} call to take its outcome from")
            if self.stop is None:
                self.stop = stop
                if self.seen is not None:
                    self.stop_steps = len(self.seen)  # the events recorded before it
            raise stop
        outcome = queue.pop(0)
        shown = redact(tool_input, self.sensitive)
        if outcome.get("input") is not None and outcome["input"] != shown and outcome.get("purpose") != "notify":
            self.notes.append(f"'{call.state}' calls {contract.id} with another input than recorded "
                              f"(at '{outcome['state']}'): {_input_change(outcome['input'], shown)}")
        self._answered[(contract.id, call.idempotency_key)] = outcome
        if outcome.get("boundary"):
            from ..errors import BoundaryViolation

            raise BoundaryViolation(f"verify of {contract.ref} said the effect did not happen (recorded)")
        if outcome.get("error"):
            raise make_error(outcome["error"], outcome.get("message"))
        output = copy.deepcopy(outcome.get("output"))
        return self._unredact(output, contract, call.state)

    def _verify(self, contract, call):
        key = (contract.id, call.idempotency_key)
        return key not in self._undone and key in self._answered

    def _unredact(self, output, contract, state):
        from ..audit import REDACTED

        replaced = []

        def walk(value, schema, path):
            if isinstance(value, dict):
                props = (schema or {}).get("properties") or {} if isinstance(schema, dict) else {}
                return {k: walk(v, props.get(k), path + [k]) for k, v in value.items()}
            if isinstance(value, list):
                items = schema.get("items") if isinstance(schema, dict) else None
                return [walk(v, items, path) for v in value]
            if value == REDACTED:
                found = _stand_in(path[-1] if path else "", schema, self.run_input)
                if found != REDACTED:
                    replaced.append(".".join(path))
                return found
            return value

        out = walk(output, contract.output_schema, [])
        if replaced:
            self.notes.append(f"'{state}': sensitive field{'s' * (len(replaced) != 1)} {', '.join(replaced)} of "
                              f"{contract.id} {'are' if len(replaced) != 1 else 'is'} redacted in the audit log; "
                              "replayed with a stand-in value")
        return out


def _stand_in(name, schema, run_input):
    from ..audit import REDACTED
    from ..schemas_runtime import check_instance
    from .coverage import sample

    for candidate in _values_named(run_input, name):
        if not schema or check_instance(schema, candidate) is None:
            return copy.deepcopy(candidate)
    if not schema or check_instance(schema, REDACTED) is None:
        return REDACTED
    return sample(schema)


def _values_named(value, name):
    if isinstance(value, dict):
        for k, v in value.items():
            if k == name:
                yield v
            yield from _values_named(v, name)
    elif isinstance(value, list):
        for v in value:
            yield from _values_named(v, name)


def _input_change(before, after) -> str:
    if isinstance(before, dict) and isinstance(after, dict):
        changes = [f"{k}: {before.get(k)!r} → {after.get(k)!r}" for k in sorted(set(before) | set(after))
                   if before.get(k) != after.get(k)]
        return "; ".join(changes[:4]) + (" …" if len(changes) > 4 else "")
    return f"{before!r} → {after!r}"


# ------------------------------------------------------------------------------------ replaying
@dataclass
class ReplayResult:
    run_id: str
    flow: str
    definition: str
    recorded_path: list
    replayed_path: list
    recorded_status: str | None
    replayed_status: str | None
    recorded_error: dict | None = None
    replayed_error: dict | None = None
    step: int | None = None          # 1-based first diverging step; None: the same
    reason: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    stopped: str | None = None       # why the replay stopped before the run ended
    context: dict = field(default_factory=dict)   # the replayed run's final context

    @property
    def diverged(self) -> bool:
        return self.step is not None

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "flow": self.flow, "definition": self.definition, "diverged": self.diverged,
                "step": self.step, "recorded": {"path": self.recorded_path, "status": self.recorded_status,
                                                "error": self.recorded_error},
                "replayed": {"path": self.replayed_path, "status": self.replayed_status, "error": self.replayed_error},
                "reason": self.reason, "notes": self.notes, "stopped": self.stopped, "context": self.context}

    def text(self) -> str:
        lines = [f"recorded: {one_line(self.recorded_path)}  ({self.recorded_status}{_err(self.recorded_error)})",
                 f"replayed: {one_line(self.replayed_path)}  ({self.replayed_status or 'stopped'}"
                 f"{_err(self.replayed_error)})"]
        if not self.diverged:
            lines.append(f"same path and outcome under {self.definition}")
        else:
            i = self.step - 1
            rec = self.recorded_path[i] if i < len(self.recorded_path) else "(the run had ended)"
            rep = self.replayed_path[i] if i < len(self.replayed_path) else "(the replay had ended)"
            if rec == rep:
                lines.append(f"diverges at step {self.step} ('{rec}'): same path, different outcome")
            else:
                lines.append(f"diverges at step {self.step}: recorded '{rec}', replayed '{rep}'")
            lines.extend("  " + r for r in self.reason)
        if self.stopped:
            lines.append(f"replay stopped: {self.stopped}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def _err(error) -> str:
    return f" {error.get('type')}" if error else ""


def _sensitive(project, flow) -> frozenset:
    from ..engine import flow_files

    files = flow_files(project, flow)
    return frozenset(f for versions in project.contracts.values() for c in versions if c.file in files
                     for f in c.sensitive)


def replay(rec: Recording, project, label: str = "the working tree") -> ReplayResult:
    """Re-run ``rec`` under ``project`` and compare. Raises :class:`~flowctl.errors.ProjectError`
    when the flow's definition files have errors."""
    from ..clock import FakeClock
    from ..engine import Engine
    from ..errors import FlowctlError, ProjectError
    from ..expressions import Recorder
    from ..store import MemoryStore

    row = rec.row
    result = ReplayResult(row["id"], row["flow"], label, rec.path, [], row.get("status"), None, row.get("error"))
    flow = project.flows.get(row["flow"])
    if flow is None:
        result.step = 1
        result.reason = [f"the flow '{row['flow']}' is not in {label}"]
        return result
    seen: list = []
    tools = RecordedTools(rec, _sensitive(project, flow), seen)
    clock = FakeClock(start=row["created_at"])
    engine = Engine(project, MemoryStore(), clock=clock, max_inline_wait=float("inf"), check=True,
                    tool_resolver=tools.resolve, listener=seen.append)
    values = Recorder(clock, replay=rec.values)
    engine.recorder_factory = lambda runner: values
    params = {k: v for k, v in (row.get("params") or {}).items() if k in flow.params}
    dropped = sorted(set(row.get("params") or {}) - set(flow.params))
    if dropped:
        result.notes.append(f"params no longer declared by the flow were left out: {', '.join(dropped)}")
    run = None
    try:
        run = engine.run(flow.id, row.get("input") or {}, params=params, run_id=row["id"])
        reviews = list(rec.reviews)
        while run.status in ("paused", "waiting") and (reviews or run.status == "waiting"):
            if run.status == "waiting":
                clock.advance(max(0.0, (run.available_at or clock.time()) - clock.time()))
                run = engine.resume(run.run_id)
                continue
            step = reviews.pop(0)
            pending = run.review or {}
            if step.get("timeout"):
                deadline = pending.get("deadline")
                if deadline is None:
                    result.stopped = f"the recorded review timed out, but '{pending.get('state')}' has no timeout now"
                    break
                clock.advance(max(0.0, deadline - clock.time()) + 1)
                run = engine.resume(run.run_id)
            else:
                run = engine.resume(run.run_id, token=pending.get("token"), decision=step["decision"],
                                    data=step.get("data"), by=step.get("by"))
    except ReplayStop as exc:
        result.stopped = str(exc)
        run = None
    except ProjectError:
        raise
    except FlowctlError as exc:
        result.stopped = f"{exc.message or exc}"
        run = None
    if tools.stop is not None:  # the engine may have handled it as a crashed tool: the replay ends there
        result.stopped = str(tools.stop)
        run = None
        if tools.stop_steps is not None:
            seen = seen[:tools.stop_steps]
    from .runner import own_events

    seen = own_events(seen)  # child runs' events (parallel, map, subflow) are not the recorded run's
    result.replayed_path = [e["state"] for e in seen if e["type"] == "state_entered"]
    if run is not None:
        result.replayed_status = run.status
        result.replayed_error = run.error
        result.context = (engine.store.get_run(run.run_id).get("cursor") or {}).get("context") or {}
        recorded = (row.get("cursor") or {}).get("context") or {}
        changed = sorted(k for k in set(recorded) | set(result.context) if recorded.get(k) != result.context.get(k))
        if changed and result.replayed_path == result.recorded_path:
            result.notes.append(f"same path, but the final context differs in: {', '.join(changed)}")
    result.notes.extend(tools.notes)
    i = first_difference(result.recorded_path, result.replayed_path)
    if i is None and (run is None or run.status != result.recorded_status
                      or _err(run.error) != _err(result.recorded_error)):
        i = max(len(result.recorded_path) - 1, 0)
    if i is not None:
        result.step = i + 1
        rec_why = explain(rec.events, i) if i else []
        rep_why = explain(seen, i) if i else []
        if i == 0 and not result.replayed_path:
            result.reason = [f"the replay did not start: {result.stopped}"] if result.stopped else []
        if rec_why:
            result.reason.append("recorded " + rec_why[0])
            result.reason.extend("  " + w for w in rec_why[1:])
        if rep_why:
            result.reason.append("replayed " + rep_why[0])
            result.reason.extend("  " + w for w in rep_why[1:])
        if result.step == len(result.recorded_path) and result.recorded_path == result.replayed_path:
            last = explain(rec.events, len(rec.path))
            mine = explain(seen, len(result.replayed_path))
            result.reason = (["recorded " + last[0], *("  " + w for w in last[1:])] if last else []) + \
                            (["replayed " + mine[0], *("  " + w for w in mine[1:])] if mine else [])
    return result


# ------------------------------------------------------------------------------------ flowctl diff --replay N
def diff_section(project_root, head_project, head_label: str, limit: int, fmt: str, db=None):
    """What ``flowctl diff … --replay N`` adds: which of the last ``limit`` recorded runs (in the
    project's run store, or ``db``/``FLOWCTL_DB``) take a different path under the HEAD definition.
    Returns ``(results, note)``; ``note`` explains an empty list (no store, no runs)."""
    import os
    from pathlib import Path

    from ..errors import ProjectError, StoreError
    from ..store import open_store

    try:
        store = open_store(db or os.environ.get("FLOWCTL_DB"), Path(project_root), create=False)
    except StoreError as exc:
        return [], f"no run store to replay from ({exc.message})"
    try:
        results = []
        for row in store.list_runs(limit=limit):
            if row.get("parent_id"):
                continue
            events = store.events(row["id"])
            if not events:
                continue
            try:
                results.append(replay(recording(row, events), head_project, head_label))
            except ProjectError as exc:
                r = ReplayResult(row["id"], row["flow"], head_label, [], [], row.get("status"), None)
                r.stopped = exc.message
                r.step = 1
                results.append(r)
    finally:
        store.close()
    return results, ("no recorded runs" if not results else "")


def render_section(results, note: str, limit: int, head_label: str, fmt: str) -> str:
    """The ``--replay`` section in the diff's format (text or markdown)."""
    diverged = [r for r in results if r.diverged]
    head = (f"replay of the last {limit} recorded run{'s' * (limit != 1)} under {head_label}: "
            + (note or f"{len(diverged)} of {len(results)} would take a different path"))
    if fmt == "markdown":
        lines = ["", "### Replay of recorded runs", "", head[0].upper() + head[1:] + "."]
        if diverged:
            lines += ["", "| run | flow | recorded | diverges at | recorded → replayed |", "| --- | --- | --- | --- | --- |"]
            for r in diverged:
                i = r.step - 1
                rec = r.recorded_path[i] if i < len(r.recorded_path) else "(end)"
                rep = r.replayed_path[i] if i < len(r.replayed_path) else (r.stopped and "(stopped)") or "(end)"
                lines.append(f"| `{r.run_id[:12]}` | {r.flow} | {r.recorded_status} | step {r.step} | "
                             f"`{rec}` → `{rep}` |")
        return "\n".join(lines) + "\n"
    lines = ["", head]
    for r in results:
        if not r.diverged:
            lines.append(f"  = {r.run_id[:12]} {r.flow}: same path ({one_line(r.recorded_path)})")
            continue
        i = r.step - 1
        rec = r.recorded_path[i] if i < len(r.recorded_path) else "(end)"
        rep = r.replayed_path[i] if i < len(r.replayed_path) else "(stopped)" if r.stopped else "(end)"
        lines.append(f"  ~ {r.run_id[:12]} {r.flow} ({r.recorded_status}): diverges at step {r.step}: "
                     f"recorded {rec}, replayed {rep}")
        if r.stopped:
            lines.append(f"      {r.stopped}")
    return "\n".join(lines) + "\n"


def add_to_diff(rendered, fmt: str, project_root, head_project, head_label: str, limit: int, db=None):
    """``rendered`` (the diff's output) with the replay section added: appended to text and
    markdown, a ``replay`` key in JSON. SVG has no place for it."""
    import json

    from ..errors import UsageError

    if fmt == "svg":
        raise UsageError("--replay adds a section to text, markdown or json output, not to svg")
    results, note = diff_section(project_root, head_project, head_label, limit, fmt, db)
    if fmt == "json":
        data = json.loads(rendered)
        data["replay"] = {"limit": limit, "definition": head_label, "note": note,
                          "diverged": sum(r.diverged for r in results), "runs": [r.as_dict() for r in results]}
        return json.dumps(data, indent=2, ensure_ascii=False, default=str)
    return rendered.rstrip("\n") + "\n" + render_section(results, note, limit, head_label, fmt)


__all__ = ["Recording", "RecordedTools", "ReplayResult", "ReplayStop", "recording", "load_recording", "replay",
           "diff_section", "render_section", "add_to_diff"]
