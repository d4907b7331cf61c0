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

Fields a contract marks ``sensitive`` are redacted in the audit log (and, once the run ended, in its
row: :mod:`flowctl.engine.sensitive`), so their recorded values are lost: a redacted output field is
replayed with the run input's value of the same name when that fits the output schema, else with
a value the schema accepts, and the result says so.

The recording and the tools that serve it are in :mod:`flowctl.testing.recording` (re-exported here).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from flowctl.testing.recording import (
    RecordedTools, Recording, ReplayStop, load_children, load_recording, recording, unredact)
from flowctl.testing.runner import explain, first_difference, one_line


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
    #: the divergence is inside this child run (a ReplayResult of it; its ``where`` says which)
    child: "ReplayResult | None" = None
    #: for a child run: ``{state, index, replayed_run_id}`` (the fan-out state of its parent)
    where: dict | None = None

    @property
    def diverged(self) -> bool:
        return self.step is not None

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "flow": self.flow, "definition": self.definition, "diverged": self.diverged,
                "step": self.step, "recorded": {"path": self.recorded_path, "status": self.recorded_status,
                                                "error": self.recorded_error},
                "replayed": {"path": self.replayed_path, "status": self.replayed_status, "error": self.replayed_error},
                "reason": self.reason, "notes": self.notes, "stopped": self.stopped, "context": self.context,
                "child": self.child.as_dict() if self.child is not None else None, "where": self.where}

    def innermost(self) -> list:
        """``[self, child, grandchild …]`` down to the run where the divergence is."""
        chain = [self]
        while chain[-1].child is not None:
            chain.append(chain[-1].child)
        return chain

    def text(self) -> str:
        lines = [f"recorded: {one_line(self.recorded_path)}  ({self.recorded_status}{_err(self.recorded_error)})",
                 f"replayed: {one_line(self.replayed_path)}  ({self.replayed_status or 'stopped'}"
                 f"{_err(self.replayed_error)})"]
        if not self.diverged:
            lines.append(f"same path and outcome under {self.definition}")
        elif self.child is not None:
            c, w = self.child, self.child.where or {}
            lines.append(f"diverges at step {self.step} ('{w.get('state')}'), inside child run {c.run_id} "
                         f"({c.flow} #{w.get('index')}):")
            lines.extend("  " + line for line in c.text().splitlines())
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
    from flowctl.engine.sensitive import flow_fields

    return flow_fields(project, flow)


def replay(rec: Recording, project, label: str = "the working tree") -> ReplayResult:
    """Re-run ``rec`` under ``project`` and compare. Raises :class:`~flowctl.errors.ProjectError`
    when the flow's definition files have errors."""
    from flowctl.engine.clock import FakeClock
    from flowctl.engine.engine import Engine
    from flowctl.errors import FlowctlError, ProjectError
    from flowctl.expr.expressions import Recorder
    from flowctl.store.sql import MemoryStore

    row = rec.row
    result = ReplayResult(row["id"], row["flow"], label, rec.path, [], row.get("status"), None, row.get("error"))
    flow = project.flows.get(row["flow"])
    if flow is None:
        result.step = 1
        result.reason = [f"the flow '{row['flow']}' is not in {label}"]
        return result
    run_input, replaced = unredact(row.get("input") or {}, flow.input_schema)
    if replaced:  # (new-user finding: a redacted input failed the flow's input_schema, a false divergence)
        result.notes.append(f"sensitive input field{'s' * (len(replaced) != 1)} {', '.join(replaced)} "
                            f"{'are' if len(replaced) != 1 else 'is'} redacted in the record; replayed with a "
                            "stand-in value the input_schema accepts")
    seen: list = []
    tools = RecordedTools(rec, _sensitive(project, flow), seen)
    clock = FakeClock(start=row["created_at"])
    engine = Engine(project, MemoryStore(), clock=clock, max_inline_wait=float("inf"), check=True,
                    tool_resolver=tools.resolve, listener=seen.append)
    tools.store = engine.store
    engine.model_mocks, digests = recorded_replies(rec.events)  # model steps answer as they did: no model is called
    recorders: dict = {}

    def recorder_for(runner):  # each run, child runs too, draws the uuid()/now() values it recorded
        found = recorders.get(runner.id)
        if found is None:
            followed = tools.recording_of(runner.id)
            found = recorders[runner.id] = Recorder(clock, replay=followed.values if followed else [])
        return found

    engine.recorder_factory = recorder_for
    params = {k: v for k, v in (row.get("params") or {}).items() if k in flow.params}
    dropped = sorted(set(row.get("params") or {}) - set(flow.params))
    if dropped:
        result.notes.append(f"params no longer declared by the flow were left out: {', '.join(dropped)}")
    run = None
    try:
        run = engine.run(flow.id, run_input, params=params, run_id=row["id"])
        reviews = list(rec.reviews)
        child_reviews: dict = {}
        for _ in range(10_000):  # bounded: each round decides a review or advances the clock
            if not (run.status in ("paused", "waiting") and (reviews or run.status == "waiting")):
                break
            if run.status == "waiting" and _waits_on_children(engine, run.run_id):
                run, why = _decide_child_reviews(engine, tools, child_reviews, run)
                if why:
                    result.stopped = why
                    break
                continue
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
        if tools.stop_steps is not None:  # what the stopped run did after the stop did not happen (its siblings' did)
            seen = [e for i, e in enumerate(seen) if i < tools.stop_steps or e.get("run_id") != tools.stop_run]
    from flowctl.testing.runner import own_events

    every = seen
    seen = own_events(seen)  # child runs' events (parallel, map, subflow) are compared run by run below
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
    result.notes.extend(prompt_changes(digests, seen))
    _locate(result, rec.events, seen, run is not None)
    gate = gate_difference(rec.events, seen)
    if gate is not None and (result.step is None or gate[0] <= result.step):
        result.step, result.reason = gate
    if run is not None or tools.children:
        child = _child_divergence(tools, rec, rec.run_id, every, engine.store, label)
        at = _step_of(rec, child.where["state"]) if child is not None else None
        if child is not None and (result.step is None or at <= result.step):
            result.step, result.child, result.reason = at, child, []
    return result


def recorded_replies(events) -> tuple:
    """``({STATE#VISIT: [reply, …]}, {STATE#VISIT: [digest, …]})`` of a run's ``model_called``
    events: each model call's reply (its text and tool calls, as the fake provider gives them) and
    the digest of the messages it was sent, per visit of each llm or agent state, in call order."""
    visits: dict = {}
    replies: dict = {}
    digests: dict = {}
    for ev in events:
        d = ev.get("data") if isinstance(ev.get("data"), dict) else {}
        if ev["type"] == "state_entered":
            visits[ev["state"]] = d.get("visit") or visits.get(ev["state"], 0) + 1
        elif ev["type"] == "model_called":
            key = f"{ev['state']}#{visits.get(ev['state'], 1)}"
            if "content" in d or d.get("tool_calls"):
                reply = {"text": d.get("content") or ""}
            else:  # recorded before replies kept their text: the parsed JSON stands for it
                reply = {"json": d.get("parsed")}
            if d.get("tool_calls"):
                reply["tool_calls"] = [{"id": t.get("id"), "name": t.get("name"), "arguments": t.get("arguments") or {}}
                                       for t in d["tool_calls"]]  # the recorded ids: the next turn's messages match
            usage = d.get("usage") if isinstance(d.get("usage"), dict) else {}
            reply["usage"] = {k: int(usage.get(k) or 0) for k in ("input_tokens", "output_tokens")}
            replies.setdefault(key, []).append(reply)
            digests.setdefault(key, []).append(d.get("digest"))
    return replies, digests


def prompt_changes(recorded: dict, seen: list) -> list:
    """Notes for each model call whose messages differ from the recorded call's (another digest):
    the recorded reply was used all the same, and the replay says so."""
    _, replayed = recorded_replies(seen)
    notes = []
    for key, found in replayed.items():
        before = recorded.get(key) or []
        for i, digest in enumerate(found):
            if i < len(before) and before[i] != digest:
                state, visit = key.rsplit("#", 1)
                notes.append(f"the messages of model call {i + 1} of '{state}' (visit {visit}) differ from the "
                             f"recorded ones (digest {str(before[i])[:12]} -> {str(digest)[:12]}): the recorded reply was used")
                break
    return notes


def _decisions(events) -> list:
    """``[(step, state, tool, outcome, policy, rule)]``: a run's gate decisions in order, each with
    the 1-based step (state entered) it was made in."""
    out, step = [], 0
    for ev in events:
        if ev["type"] == "state_entered":
            step += 1
        elif ev["type"] == "policy_decided":
            d = ev.get("data") if isinstance(ev.get("data"), dict) else {}
            out.append((step, ev.get("state"), d.get("tool"), d.get("outcome"), d.get("policy"), d.get("rule")))
    return out


def gate_difference(recorded_events, replayed_events):
    """``(step, reason lines)`` of the first gate decision the replay did not make as recorded
    (another outcome, policy or rule, or one the other side did not ask for), or None: a
    definition that drops a review, or allows what was denied, changes the run even where the
    path stays the same (new-user finding: a policy change removing a review replayed as "same")."""
    rec, rep = _decisions(recorded_events), _decisions(replayed_events)
    for i in range(max(len(rec), len(rep))):
        a = rec[i] if i < len(rec) else None
        b = rep[i] if i < len(rep) else None
        if a is not None and b is not None and a[1:] == b[1:]:
            continue
        step = min(x[0] for x in (a, b) if x is not None) or 1
        reason = [_said("recorded", a), _said("replayed", b)]
        if a is not None and a[5] in ("rate", "dedupe"):
            reason.append("  (rate and dedupe count the calls of other runs too, which a replay does not see)")
        return step, reason
    return None


def _said(side: str, d) -> str:
    if d is None:
        return f"{side}: no gate decision here"
    _, state, tool, outcome, policy, rule = d
    return f"{side}: the gate answered {outcome} for {tool} in '{state}' (policy {policy or '-'}, rule {rule or '-'})"


def _step_of(rec: Recording, state) -> int:
    """The 1-based step of the recorded run at which ``state`` (a fan-out state) was entered."""
    return rec.path.index(state) + 1 if state in rec.path else max(len(rec.path), 1)


def _locate(result: ReplayResult, rec_events: list, seen: list, finished: bool) -> None:
    """Set ``result.step`` and ``result.reason``: the first step whose state differs, else the last
    step when the outcome differs (or the replay did not finish)."""
    i = first_difference(result.recorded_path, result.replayed_path)
    # a run cancelled while it paused or waited: the replay, with no decision to give, stops at
    # the same point; that agrees with the record (the cancel was a command, not the flow's doing)
    cancelled_there = (i is None and finished and result.recorded_status == "cancelled"
                       and result.replayed_status in ("paused", "waiting"))
    if cancelled_there:
        result.notes.append(f"the recorded run was cancelled at '{result.recorded_path[-1] if result.recorded_path else '?'}'; "
                            "the replay reaches the same point")
    elif i is None and (not finished or result.replayed_status != result.recorded_status
                        or _err(result.replayed_error) != _err(result.recorded_error)):
        i = max(len(result.recorded_path) - 1, 0)
    if i is not None:
        result.step = i + 1
        rec_why = explain(rec_events, i) if i else []
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
            last = explain(rec_events, len(result.recorded_path))
            mine = explain(seen, len(result.replayed_path))
            result.reason = (["recorded " + last[0], *("  " + w for w in last[1:])] if last else []) + \
                            (["replayed " + mine[0], *("  " + w for w in mine[1:])] if mine else [])


def _child_divergence(tools: RecordedTools, parent: Recording, replayed_parent: str, every: list, store,
                      label: str):
    """The first child run of ``parent`` (at any depth) whose replay differs from its recording, as
    a :class:`ReplayResult` with ``where`` set; None when every child replayed as recorded. Children
    are taken in the order of their fan-out state in the parent's path, then by index."""
    from flowctl.store.sql import FINAL

    replayed: dict = {}
    for rid, _rec, pid, key in tools.children:
        if pid == replayed_parent:
            replayed.setdefault(key, []).append(rid)

    def order(key):
        state, index = key
        return (parent.path.index(state) if state in parent.path else len(parent.path), index or 0)

    for key in sorted(set(parent.children) | set(replayed), key=order):
        recs, reps = parent.children.get(key, []), replayed.get(key, [])
        for n in range(max(len(recs), len(reps))):
            kid = recs[n] if n < len(recs) else None
            rid = reps[n] if n < len(reps) else None
            where = {"state": key[0], "index": key[1], "replayed_run_id": rid}
            if kid is None:
                row = store.get_run(rid)
                path = [e["state"] for e in every if e.get("run_id") == rid and e["type"] == "state_entered"]
                return ReplayResult(rid, row["flow"], label, [], path, None, row["status"], None, row.get("error"),
                                    step=1, where=where,
                                    reason=["the replay started this child run; the recorded run had no such child"])
            if rid is None:
                return ReplayResult(kid.run_id, kid.row["flow"], label, kid.path, [], kid.row.get("status"), None,
                                    kid.row.get("error"), step=1, where=where,
                                    reason=["the recorded run had this child run; the replay did not start it"])
            events = [e for e in every if e.get("run_id") == rid]
            row = store.get_run(rid)
            path = [e["state"] for e in events if e["type"] == "state_entered"]
            deeper = _child_divergence(tools, kid, rid, every, store, label)
            cut = row["status"] not in FINAL or (row["status"] == "cancelled" and kid.row.get("status") != "cancelled")
            if deeper is None and tools.stop is not None and rid != tools.stop_run and cut \
                    and path == kid.path[:len(path)]:
                continue  # a sibling cut short (or cancelled) when the replay stopped elsewhere: as recorded so far
            r = ReplayResult(kid.run_id, kid.row["flow"], label, kid.path, path, kid.row.get("status"),
                             row["status"], kid.row.get("error"), row.get("error"), where=where)
            _locate(r, kid.events, events, row["status"] in FINAL)
            if deeper is not None and (r.step is None or _step_of(kid, deeper.where["state"]) <= r.step):
                r.step, r.child, r.reason = _step_of(kid, deeper.where["state"]), deeper, []
            if r.diverged:
                return r
    return None


def _waits_on_children(engine, run_id) -> bool:
    pending = (engine.store.get_run(run_id).get("cursor") or {}).get("pending") or {}
    return pending.get("kind") == "children"


def _decide_child_reviews(engine, tools: RecordedTools, queues: dict, run):
    """Decide the paused child runs (at any depth) with their recorded decisions; the parents go
    on in process. ``(the root's RunResult, None)`` or ``(run, why the replay cannot go on)``."""
    from flowctl.engine.runner import result_from_row

    decided = False
    for child in engine.store.list_runs(status="paused", limit=0):
        followed = tools.recording_of(child["id"])
        queue = queues.setdefault(child["id"], list(followed.reviews) if followed else [])
        step = queue.pop(0) if queue else None
        if step is None or step.get("timeout"):
            continue
        token = engine.reissue_token(child["id"])
        engine.resume(child["id"], token=token, decision=step["decision"], data=step.get("data"), by=step.get("by"))
        decided = True
    if not decided:
        return run, "a child run is paused for a review the recording has no decision for"
    return result_from_row(engine.store.get_run(run.run_id)), None


# ------------------------------------------------------------------------------------ flowctl diff --replay N
def diff_section(project_root, head_project, head_label: str, limit: int, fmt: str, db=None):
    """What ``flowctl diff … --replay N`` adds: which of the last ``limit`` recorded runs (in the
    project's run store, or ``db``/``FLOWCTL_DB``) take a different path under the HEAD definition.
    Returns ``(results, note)``; ``note`` explains an empty list (no store, no runs)."""
    import os
    from pathlib import Path

    from flowctl.errors import ProjectError, StoreError
    from flowctl.store.sql import open_store

    try:
        store = open_store(db or os.environ.get("FLOWCTL_DB"), Path(project_root), create=False)
    except StoreError as exc:
        return [], f"no run store to replay from ({exc.message})"
    try:
        results = []
        for row in store.list_runs(limit=limit, top_level=True):
            events = store.events(row["id"])
            if not events:
                continue
            try:
                results.append(replay(load_children(store, recording(row, events)), head_project, head_label))
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
                inner = r.innermost()[-1]
                if inner is not r:  # the divergence is inside a child run
                    j = inner.step - 1
                    rec = inner.recorded_path[j] if j < len(inner.recorded_path) else "(end)"
                    rep = inner.replayed_path[j] if j < len(inner.replayed_path) else "(end)"
                    rec = f"{inner.flow}#{(inner.where or {}).get('index')}: {rec}"
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
        for c in r.innermost()[1:]:  # inside child runs: where, down to the run that differs
            j = c.step - 1
            c_rec = c.recorded_path[j] if j < len(c.recorded_path) else "(end)"
            c_rep = c.replayed_path[j] if j < len(c.replayed_path) else "(end)"
            lines.append(f"      in child run {c.run_id[:12]} ({c.flow} #{(c.where or {}).get('index')} of "
                         f"'{(c.where or {}).get('state')}') at step {c.step}: recorded {c_rec}, replayed {c_rep}")
        if r.stopped:
            lines.append(f"      {r.stopped}")
    return "\n".join(lines) + "\n"


def add_to_diff(rendered, fmt: str, project_root, head_project, head_label: str, limit: int, db=None):
    """``rendered`` (the diff's output) with the replay section added: appended to text and
    markdown, a ``replay`` key in JSON. SVG has no place for it."""
    import json

    from flowctl.errors import UsageError

    if fmt == "svg":
        raise UsageError("--replay adds a section to text, markdown or json output, not to svg")
    results, note = diff_section(project_root, head_project, head_label, limit, fmt, db)
    if fmt == "json":
        data = json.loads(rendered)
        data["replay"] = {"limit": limit, "definition": head_label, "note": note,
                          "diverged": sum(r.diverged for r in results), "runs": [r.as_dict() for r in results]}
        return json.dumps(data, indent=2, ensure_ascii=False, default=str)
    return rendered.rstrip("\n") + "\n" + render_section(results, note, limit, head_label, fmt)


__all__ = ["Recording", "RecordedTools", "ReplayResult", "ReplayStop", "recording", "load_recording", "load_children",
           "replay",
           "diff_section", "render_section", "add_to_diff"]
