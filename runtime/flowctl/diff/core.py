"""The semantic diff of two projects: what changed in the machine, not in the text.

:func:`diff_projects` compares two loaded :class:`~flowctl.definition.model.Project` objects (from git
revisions through :mod:`flowctl.definition.gitsource`, or from folders) element by element::

    d = diff_projects(base, head, "origin/main", "working tree")
    d.changes        # [Change] in a stable order: flows (each followed by its transitions and
                     #   flow handlers), states (each followed by its handlers), contracts, policies
    d.affected       # {flow id: ["state get_logistics", "contract refund_payment", …]}
    d.counts()       # {"added": n, "removed": n, "changed": n}
    d.risks()        # [(Change, Risk)]
    d.to_json()      # the documented JSON form below

Elements are matched by identity, never by position: flows, states and policies by id; contracts
by id (a new highest version is a *version bump* of the same contract, compared field by field
with the previous highest); transitions by ``(from, to)`` (a second transition between the same
pair is ``#2``); handlers by their ``errors`` list. Reordering transitions or handlers — which
changes what matches first — is reported as an ``order`` field change. Formatting, comments,
key order and YAML-vs-JSON never show as changes.

JSON form (``schema: "flowctl.diff.core/v1"``; keys are always present)::

    {"schema": "flowctl.diff.core/v1", "base": str, "head": str,
     "summary": {"added": int, "removed": int, "changed": int, "risks": int, "flows_affected": int},
     "changes": [{"kind": "flow|transition|handler|state|contract|policy",
                  "op": "added|removed|changed",
                  "id": str,            # flow/state/policy id; "src -> dst[#n]"; "on_error[E1,E2]";
                                        # contract "id" (bump/added/removed) or "id@version"
                  "title": str,         # one-line human form, e.g. "transition order_return: a → b"
                  "flow": str|null,     # the flow a transition or flow handler belongs to
                  "owner": {"kind": "state|flow", "id": str}|null,   # handlers only
                  "summary": str,       # e.g. "3.2.0 → 3.3.0 (minor)" for a contract bump, else ""
                  "fields": [{"path": str, "op": "added|removed|changed", "before": any, "after": any}],
                  "risks": [{"code": str, "message": str}],
                  "flows": [str]}],     # flows the change touches: its own flow, or those
                                        #   entering the changed state / using the contract or policy
     "affected_flows": [{"flow": str, "via": [str]}],
     "warnings": [str]}
"""
from __future__ import annotations

from dataclasses import dataclass, field

from flowctl.definition import versions
from flowctl.diagnostics import ERROR
from flowctl.diff.fields import (MISSING, FieldChange, Risk, compensation_risks, contract_risks, field_changes,
                                 policy_risks)
from flowctl.check.topology import child_flows
from flowctl.graph.flowgraph import member_states
from flowctl.definition.model import Project

SCHEMA_ID = "flowctl.diff.core/v1"
OPS = ("added", "removed", "changed")


@dataclass
class Change:
    """One added, removed or changed element (see the module docstring for each field)."""

    kind: str
    op: str
    id: str
    flow: str | None = None
    owner: tuple | None = None
    summary: str = ""
    fields: list = field(default_factory=list)
    risks: list = field(default_factory=list)
    flows: list = field(default_factory=list)
    source: str | None = None
    target: str | None = None

    @property
    def symbol(self) -> str:
        return {"added": "+", "removed": "-", "changed": "~"}[self.op]

    @property
    def title(self) -> str:
        if self.kind == "transition":
            n = self.id.rpartition("#")[2] if "#" in self.id else ""
            return f"transition {self.flow}: {self.source} → {self.target}" + (f" #{n}" if n else "")
        if self.kind == "handler":
            return f"handler {self.owner[0]} {self.owner[1]}: {self.id}"
        text = f"{self.kind} {self.id}"
        return f"{text} {self.summary}" if self.summary and self.kind == "contract" else text

    def to_json(self) -> dict:
        out = {"kind": self.kind, "op": self.op, "id": self.id, "title": self.title, "flow": self.flow,
               "owner": {"kind": self.owner[0], "id": self.owner[1]} if self.owner else None,
               "summary": self.summary, "fields": [f.to_json() for f in self.fields],
               "risks": [r.to_json() for r in self.risks], "flows": list(self.flows)}
        if self.kind == "transition":
            out["source"], out["target"] = self.source, self.target
        return out


@dataclass
class ProjectDiff:
    """The result of :func:`diff_projects`; ``base``/``head`` are the compared projects."""

    base_label: str
    head_label: str
    changes: list
    affected: dict
    warnings: list
    base: Project = field(repr=False)
    head: Project = field(repr=False)

    def counts(self) -> dict:
        out = dict.fromkeys(OPS, 0)
        for c in self.changes:
            out[c.op] += 1
        return out

    def risks(self) -> list:
        return [(c, r) for c in self.changes for r in c.risks]

    @property
    def empty(self) -> bool:
        return not self.changes

    def flows_in_scope(self) -> list[str]:
        """Flows to draw: every flow with a change of its own, plus the affected ones."""
        out = {c.flow for c in self.changes if c.flow}
        out.update(c.id for c in self.changes if c.kind == "flow")
        out.update(self.affected)
        return sorted(out)

    def to_json(self) -> dict:
        counts = self.counts()
        return {"schema": SCHEMA_ID, "base": self.base_label, "head": self.head_label,
                "summary": {**counts, "risks": len(self.risks()), "flows_affected": len(self.affected)},
                "changes": [c.to_json() for c in self.changes],
                "affected_flows": [{"flow": f, "via": via} for f, via in sorted(self.affected.items())],
                "warnings": list(self.warnings)}


# ----------------------------------------------------------------------------- indexes
class _Usage:
    """Which flows enter each state, and which states call each tool, in one project."""

    def __init__(self, project: Project) -> None:
        self.state_flows: dict[str, set] = {}
        for flow in project.flows.values():
            for sid in member_states(project, flow):
                self.state_flows.setdefault(sid, set()).add(flow.id)
        self.tool_states: dict[str, set] = {}
        for state in project.states.values():
            refs = [state.tool, state.raw.get("notify")] + [h.fallback for h in state.on_error]
            for ref in refs:
                if isinstance(ref, str):
                    self.tool_states.setdefault(versions.split_ref(ref)[0], set()).add(state.id)


# ----------------------------------------------------------------------------- the diff
def diff_projects(base: Project, head: Project, base_label: str = "base", head_label: str = "head") -> ProjectDiff:
    """Compare ``base`` with ``head``. Never raises for project content: files that do not load
    on either side are left out, with a line in ``warnings``."""
    warnings = [f"{label}: {n} file(s) have errors (run flowctl validate); what does not load is left out of the diff"
                for label, p in ((base_label, base), (head_label, head))
                if (n := len({d.file for d in p.diagnostics if d.severity == ERROR}))]
    broken = base.broken | head.broken
    changes: list[Change] = []
    changes += _flows(base, head, broken, warnings)
    changes += _states(base, head, broken, warnings)
    changes += _contracts(base, head, broken, warnings)
    changes += _policies(base, head, broken, warnings)
    affected = _affected(changes, base, head)
    return ProjectDiff(base_label, head_label, changes, affected, warnings, base, head)


def _ids(kind: str, a, b, broken, warnings) -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        if (kind, key) in broken:
            warnings.append(f"{kind} {key} does not load on one side; not compared")
        else:
            out.append(key)
    return out


def _flows(base: Project, head: Project, broken, warnings) -> list[Change]:
    out = []
    for fid in _ids("flow", base.flows, head.flows, broken, warnings):
        b, h = base.flows.get(fid), head.flows.get(fid)
        if b is None or h is None:
            f, p = (h, head) if b is None else (b, base)
            summary = f"{_plural(len(member_states(p, f)), 'state')}, {_plural(len(f.transitions), 'transition')}"
            out.append(Change("flow", "added" if b is None else "removed", fid, flow=fid, summary=summary))
            continue
        fields = field_changes(b.doc.data, h.doc.data, skip=("flow", "transitions", "on_error"))
        if fields:
            out.append(Change("flow", "changed", fid, flow=fid, fields=fields))
        out += _transitions(fid, b, h)
        out += _handlers(("flow", fid), b.doc.data.get("on_error"), h.doc.data.get("on_error"), flow=fid)
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _keyed(items, key_of) -> dict:
    """``{key: item}`` with repeated keys numbered ``key#2``, ``key#3`` in list order."""
    out: dict = {}
    counts: dict = {}
    for item in items or ():
        if not isinstance(item, dict):
            continue
        k = key_of(item)
        counts[k] = counts.get(k, 0) + 1
        out[k if counts[k] == 1 else f"{k}#{counts[k]}"] = item
    return out


def _order_changes(before: dict, after: dict, group_of) -> dict:
    """``{key: FieldChange("order", i, j)}`` for items whose rank among the items both sides share
    (within their group) moved; ranks are 1-based."""
    out = {}
    groups = {group_of(k, v) for k, v in before.items()}
    for g in groups:
        common_b = [k for k, v in before.items() if group_of(k, v) == g and k in after]
        common_a = [k for k, v in after.items() if group_of(k, v) == g and k in before]
        if common_b != common_a:
            for k in common_b:
                i, j = common_b.index(k) + 1, common_a.index(k) + 1
                if i != j:
                    out[k] = FieldChange("order", i, j)
    return out


def _pair_changes(before: dict, after: dict, group_of, make) -> list[Change]:
    moved = _order_changes(before, after, group_of)
    out = []
    for key in sorted(set(before) | set(after)):
        b, a = before.get(key, MISSING), after.get(key, MISSING)
        if b is MISSING:
            out.append(make(key, "added", field_changes({}, a, skip=("from", "to", "errors"))))
        elif a is MISSING:
            out.append(make(key, "removed", field_changes(b, {}, skip=("from", "to", "errors"))))
        else:
            fields = field_changes(b, a, skip=("from", "to", "errors"))
            if key in moved:
                fields.append(moved[key])
            if fields:
                out.append(make(key, "changed", fields))
    return out


def _transitions(fid: str, b, h) -> list[Change]:
    def key_of(t):
        return f"{t.get('from')} -> {t.get('to')}"

    before, after = _keyed(b.doc.data.get("transitions"), key_of), _keyed(h.doc.data.get("transitions"), key_of)

    def make(key, op, fields):
        item = after.get(key) or before.get(key)
        return Change("transition", op, key, flow=fid, fields=fields, source=item.get("from"), target=item.get("to"))

    return _pair_changes(before, after, lambda k, v: v.get("from"), make)


def _handlers(owner: tuple, before_list, after_list, flow: str | None = None) -> list[Change]:
    def key_of(h):
        return "on_error[" + ",".join(str(e) for e in h.get("errors") or ()) + "]"

    before, after = _keyed(before_list, key_of), _keyed(after_list, key_of)

    def make(key, op, fields):
        risks = compensation_risks(before.get(key), after.get(key), f"{owner[0]} {owner[1]}: {key}")
        return Change("handler", op, key, flow=flow, owner=owner, fields=fields, risks=risks)

    return _pair_changes(before, after, lambda k, v: None, make)


def _states(base: Project, head: Project, broken, warnings) -> list[Change]:
    out = []
    for sid in _ids("state", base.states, head.states, broken, warnings):
        b, h = base.states.get(sid), head.states.get(sid)
        if b is None:
            out.append(Change("state", "added", sid, summary=h.type, risks=_tool_risk(head, h, None)))
            continue
        if h is None:
            out.append(Change("state", "removed", sid, summary=b.type))
            continue
        fields = field_changes(b.raw, h.raw, skip=("id", "on_error"))
        if fields:
            risks = _tool_risk(head, h, b)
            if b.type == h.type == "fail":
                risks += compensation_risks(b.raw, h.raw, f"state {sid}")
            out.append(Change("state", "changed", sid, fields=fields, risks=risks))
        out += _handlers(("state", sid), b.raw.get("on_error"), h.raw.get("on_error"))
    return out


def _tool_risk(head: Project, new, old) -> list[Risk]:
    """A state that now calls a side-effecting tool it did not call before."""
    if not new.tool or (old is not None and old.tool and versions.split_ref(old.tool)[0] == versions.split_ref(new.tool)[0]):
        return []
    contract = head.resolve_tool(new.tool)
    if contract is None or not contract.side_effecting:
        return []
    effects = ", ".join(f"{e.get('type')} → {e.get('target')}" for e in contract.side_effects if isinstance(e, dict))
    return [Risk("side_effect_added", f"state {new.id} now calls {new.tool}, which has side effects: {effects}")]


def _bump(a: str, b: str) -> str:
    pa, pb = versions.parse_version(a), versions.parse_version(b)
    kind = "major" if pa[0] != pb[0] else "minor" if pa[1] != pb[1] else "patch" if pa[2] != pb[2] else "pre-release"
    return kind if pb > pa else f"{kind} downgrade"


def _contracts(base: Project, head: Project, broken, warnings) -> list[Change]:
    out = []
    for cid in _ids("contract", base.contracts, head.contracts, broken, warnings):
        bv = {c.version: c for c in base.contracts.get(cid, ())}
        hv = {c.version: c for c in head.contracts.get(cid, ())}
        if not bv or not hv:
            side = hv or bv
            listed = ", ".join(side)
            risks = [r for v in hv.values() for r in contract_risks(None, v.doc.data, v.ref)]
            out.append(Change("contract", "added" if not bv else "removed", cid, summary=f"({listed})", risks=_unique(risks)))
            continue
        b_top = max(bv, key=versions.parse_version)
        h_top = max(hv, key=versions.parse_version)
        skip_added, skip_removed = set(), set()
        if b_top != h_top:
            b, h = bv[b_top], hv[h_top]
            summary = f"{b_top} → {h_top} ({_bump(b_top, h_top)}" + (f"; {b_top} kept)" if b_top in hv else ")")
            fields = [FieldChange("version", b_top, h_top)] + field_changes(b.doc.data, h.doc.data, skip=("id", "version"))
            out.append(Change("contract", "changed", cid, summary=summary, fields=fields,
                              risks=contract_risks(b.doc.data, h.doc.data, h.ref)))
            skip_added, skip_removed = {h_top}, {b_top}
        for v in sorted(set(bv) | set(hv), key=versions.parse_version):
            ref = f"{cid}@{v}"
            if v in bv and v in hv:
                fields = field_changes(bv[v].doc.data, hv[v].doc.data)
                if fields:
                    out.append(Change("contract", "changed", ref, fields=fields,
                                      risks=contract_risks(bv[v].doc.data, hv[v].doc.data, ref, same_version=True)))
            elif v in hv and v not in skip_added:
                out.append(Change("contract", "added", ref, risks=contract_risks(None, hv[v].doc.data, ref)))
            elif v in bv and v not in skip_removed:
                out.append(Change("contract", "removed", ref))
    return out


def _unique(risks: list) -> list:
    return list(dict.fromkeys(risks))


def _policies(base: Project, head: Project, broken, warnings) -> list[Change]:
    out = []
    for name in _ids("policy", base.policies, head.policies, broken, warnings):
        b, h = base.policies.get(name), head.policies.get(name)
        bd, hd = (b.doc.data if b else None), (h.doc.data if h else None)
        if b is None or h is None:
            summary = "" if h else "(its tools fall back to default deny)"
            out.append(Change("policy", "added" if b is None else "removed", name, summary=summary,
                              risks=policy_risks(bd, hd, name)))
            continue
        fields = field_changes(bd, hd, skip=("policy",))
        if fields:
            out.append(Change("policy", "changed", name, fields=fields, risks=policy_risks(bd, hd, name)))
    return out


# ----------------------------------------------------------------------------- affected flows
def _affected(changes: list[Change], base: Project, head: Project) -> dict:
    """``{flow: [reason, …]}`` for flows that enter a changed state, or a state calling a changed
    contract or a tool under a changed policy. Also fills each change's ``flows``."""
    usages = (_Usage(base), _Usage(head))
    affected: dict[str, list] = {}

    def flows_of_states(states) -> set:
        return {f for u in usages for s in states for f in u.state_flows.get(s, ())}

    def states_of_tools(tools) -> set:
        return {s for u in usages for t in tools for s in u.tool_states.get(t, ())}

    for c in changes:
        if c.kind == "state" or (c.kind == "handler" and c.owner[0] == "state"):
            sid = c.id if c.kind == "state" else c.owner[1]
            flows, reason = flows_of_states([sid]), f"state {sid}"
        elif c.kind == "contract":
            cid = c.id.split("@")[0]
            flows, reason = flows_of_states(states_of_tools([cid])), f"contract {cid}"
        elif c.kind == "policy":
            tools = set()
            for p in (base.policies.get(c.id), head.policies.get(c.id)):
                tools.update(p.applies_to if p else ())
            flows, reason = flows_of_states(states_of_tools(tools)), f"policy {c.id}"
        else:
            c.flows = [c.flow] if c.flow else []
            continue
        c.flows = sorted(flows)
        for f in c.flows:
            via = affected.setdefault(f, [])
            if reason not in via:
                via.append(reason)
    # A flow that starts an affected flow (parallel, map, subflow) is affected through it.
    callers = {(child, parent.id) for p in (base, head) for parent in p.flows.values()
               for sid in member_states(p, parent) for child in child_flows(p.states.get(sid))}
    grew = True
    while grew:
        grew = False
        for child, parent in sorted(callers):
            if child in affected and child != parent and f"flow {child}" not in affected.get(parent, ()):
                affected.setdefault(parent, []).append(f"flow {child}")
                grew = True
    return dict(sorted(affected.items()))
