"""Golden path cases: ``orchestration/tests/<flow>/<case>.yaml`` (or ``.yml``/``.json``).

A case gives a run input, the tools' responses, the review decisions, and what the run must do::

    description: A-1001 is delivered and found by the carrier; the refund goes through.
    input: {order_id: A-1001, reason: damaged}
    mocks:                                  # per tool id; no real tool is ever called
      get_order:                            # one mapping: used for every call
        output: {order_id: A-1001, status: delivered, ...}
      get_logistics:                        # a list: used in call order (`times` repeats an entry)
        - output: {status: not_found, data: null}
          times: 2
        - output: {status: success, data: {...}}
      check_return_policy:
        - when: "input.category == 'furniture'"   # chosen by the tool input (JMESPath); reusable
          error: ToolTimeout                       # a mocked error, by type name
          message: the policy service is slow
    models:                                 # llm/agent states' replies, in call order (else: the case's cassette)
      classify_ticket:
        - {text: "not JSON"}                # re-asked
        - {json: {intent: refund, confidence: 0.9}}
    reviews:                                # each review the run pauses for, in order
      - {decision: approve, data: {note: ok}}
      - {timeout: true}                     # or: let the review's timeout pass
    expect:
      path: [validate_order, check_return_policy, get_logistics, process_refund, return_completed]
      status: succeeded                     # succeeded | failed | paused | waiting | cancelled
      context: {status: refunded}           # a subset of the final context
      output: {status: refunded}            # a subset of the run's output
      error: ReturnRejected                 # failed runs: the error's type or code
      compensated: [refund_payment]         # tools undone, in order

``path`` may also be written as ``flowctl trace`` prints it: ``"a → b ×3 → c"``.
The JSON Schema is printed by ``flowctl schema case``. :func:`load_cases` never raises for file
content: problems come back as located :class:`~flowctl.diagnostics.Diagnostic` objects
(``file:line:column``), errors (the case cannot run) and warnings (it can, but refers to a state
or tool the definition does not have).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from flowctl.diagnostics import ERROR, WARNING, Diagnostic
from flowctl.definition.kinds import misspelt_error
from flowctl.definition.yamlio import Document, read_document
from flowctl.testing.paths import one_line_path  # noqa: F401 - cases.one_line_path (trace imports it without YAML)

TESTS_FOLDER = "tests"
EXTENSIONS = (".yaml", ".yml", ".json")
STATUSES = ("succeeded", "failed", "paused", "waiting", "cancelled")

#: Codes of case-file problems (FC0xx codes from the YAML reader keep their meaning).
CODES = {
    "FT010": "case-schema",
    "FT011": "case-unknown-field",
    "FT101": "case-unknown-flow",
    "FT102": "case-unknown-tool",
    "FT103": "case-unknown-state",
    "FT104": "case-misplaced",
    "FT105": "case-error-name-typo",
    "FT401": "case-expression",
}


@dataclass
class MockEntry:
    """One mocked response of a tool: ``output`` or ``error`` (+ ``message``)."""

    tool: str
    label: str                   # mocks.get_order[1]
    where: str                   # file:line:column
    when: str | None = None
    output: Any = None
    has_output: bool = False
    error: str | None = None
    message: str | None = None
    times: int = 1
    verified: bool = True
    repeat: bool = False         # given as one mapping: answers every call


@dataclass
class ReviewStep:
    where: str
    decision: str | None = None
    data: Any = None
    by: str | None = None
    state: str | None = None
    timeout: bool = False


@dataclass
class Expect:
    path: list | None = None
    status: str | None = None
    context: dict | None = None
    output: Any = None
    has_output: bool = False
    error: str | None = None
    compensated: list | None = None


@dataclass
class Case:
    file: str                    # relative to the project root
    name: str
    flow: str
    doc: Document = field(repr=False)
    description: str = ""
    input: Any = None
    params: dict = field(default_factory=dict)
    mocks: dict = field(default_factory=dict)       # tool id -> [MockEntry]
    models: dict = field(default_factory=dict)      # llm/agent state id -> [reply] (flowctl.models.fake)
    reviews: list = field(default_factory=list)     # [ReviewStep]
    expect: Expect = field(default_factory=Expect)

    @property
    def id(self) -> str:
        return f"{self.flow}/{self.name}"

    def where(self, *path) -> str:
        line, col = self.doc.at(tuple(path))
        return f"{self.file}:{line}:{col}"


# ------------------------------------------------------------------------------------ discovery
def tests_dir(project) -> Path:
    return project.orchestration / TESTS_FOLDER


def case_files(project, flows=None) -> list[Path]:
    """Case files under ``orchestration/tests/<flow>/``, sorted; only of ``flows`` when given."""
    base = tests_dir(project)
    if not base.is_dir():
        return []
    out = []
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        if flows is not None and folder.name not in flows:
            continue
        out.extend(sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(EXTENSIONS)))
    return out


def load_cases(project, flows=None, files=None) -> tuple[list[Case], list[Diagnostic]]:
    """``(cases, diagnostics)`` of the case files of ``flows`` (default: all), or of ``files``.

    A case with an error is left out; one with only warnings is kept.
    """
    diags: list[Diagnostic] = []
    if files is None:
        files = case_files(project, flows)
        base = tests_dir(project)
        if base.is_dir() and flows is None:
            for stray in sorted(p for p in base.iterdir() if p.is_file() and p.name.endswith(EXTENSIONS)):
                rel = _rel(project, stray)
                diags.append(Diagnostic("FT104", f"case files go in a folder named after their flow: "
                                        f"orchestration/tests/<flow>/{stray.name}", rel, 1, 1, severity=ERROR))
    cases = []
    for path in files:
        case, problems = load_case(project, Path(path))
        diags.extend(problems)
        if case is not None:
            cases.append(case)
    return cases, diags


def _rel(project, path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(project.root.resolve()).as_posix()
    except ValueError:
        return str(path)


# ------------------------------------------------------------------------------------ one file
def load_case(project, path: Path) -> tuple[Case | None, list[Diagnostic]]:
    rel = _rel(project, path)
    try:
        content = path.read_bytes()
    except OSError as exc:
        return None, [Diagnostic("FC001", f"cannot read the case: {exc.strerror or exc}", rel, severity=ERROR)]
    doc = read_document(rel, content)
    diags = list(doc.diagnostics)
    if any(d.severity == ERROR for d in diags):
        return None, diags
    if not isinstance(doc.data, dict):
        kind = "nothing" if doc.data is None else type(doc.data).__name__
        return None, diags + [doc.diag("FT010", f"a case file holds one mapping, not {kind}", severity=ERROR)]
    schema_problems = check_schema(doc)
    diags.extend(schema_problems)
    if any(d.severity == ERROR for d in schema_problems):
        return None, diags
    case, problems = _build(project, path, doc)
    diags.extend(problems)
    if any(d.severity == ERROR for d in problems):
        return None, diags
    return case, diags


@lru_cache(maxsize=1)
def case_schema() -> dict:
    from flowctl.definition.kinds import schema_text

    return json.loads(schema_text("case"))


@lru_cache(maxsize=1)
def _validator():
    from jsonschema import Draft202012Validator

    return Draft202012Validator(case_schema())


def check_schema(doc: Document) -> list[Diagnostic]:
    """Schema problems of a case file, located (unknown fields get a "did you mean")."""
    from flowctl.definition.kinds import _translate

    v = _validator()
    out = []
    for error in sorted(v.iter_errors(doc.data), key=lambda e: list(map(str, e.absolute_path))):
        for d in _translate(error, doc):
            code = {"FC011": "FT011"}.get(d.code, "FT010")
            out.append(Diagnostic(code, d.message, d.file, d.line, d.column, d.hint, ERROR))
    return out


def _build(project, path: Path, doc: Document) -> tuple[Case | None, list[Diagnostic]]:
    from flowctl.definition.kinds import did_you_mean, unknown_flow_hint

    d = doc.data
    problems: list[Diagnostic] = []

    def err(code, message, p=(), *, key=False, hint="", severity=ERROR):
        problems.append(doc.diag(code, message, tuple(p), key=key, hint=hint, severity=severity))

    folder = path.parent.name
    flow = d.get("flow", folder)
    if "flow" in d and d["flow"] != folder:
        err("FT101", f"the case says flow '{d['flow']}' but sits in orchestration/tests/{folder}/", ("flow",),
            hint=f"move it to orchestration/tests/{d['flow']}/ or drop the flow field")
    if flow not in project.flows:
        where = ("flow",) if "flow" in d else ()
        if ("flow", flow) in project.broken:
            err("FT101", f"flow '{flow}' has definition errors", where, hint="run: flowctl validate")
        else:
            err("FT101", f"no flow '{flow}' (cases are found by their folder name)", where,
                hint=unknown_flow_hint(flow, project.flows))
    case = Case(file=doc.file, name=d.get("name") or path.name.rsplit(".", 1)[0], flow=flow, doc=doc,
                description=d.get("description", ""), input=d.get("input"), params=dict(d.get("params") or {}))

    # mocks
    for tool, spec in (d.get("mocks") or {}).items():
        if tool not in project.contracts:
            bare = tool.split("@")[0]
            hint = (f"mocks are keyed by tool id: '{bare}'" if "@" in tool and bare in project.contracts
                    else did_you_mean(tool, project.contracts) or "tool ids: " + ", ".join(sorted(project.contracts)))
            err("FT102", f"no tool contract '{tool}'; this mock is never used", ("mocks", tool), key=True, hint=hint,
                severity=WARNING)
        repeat = isinstance(spec, dict)
        entries = [spec] if repeat else list(spec)
        out = []
        for i, e in enumerate(entries):
            p = ("mocks", tool) if repeat else ("mocks", tool, i)
            label = f"mocks.{tool}" if repeat else f"mocks.{tool}[{i}]"
            if ("output" in e) == ("error" in e):
                err("FT010", f"{label}: give either output or error", p,
                    hint="output: {...} is what the tool returns; error: TypeName raises that error")
                continue
            if "when" in e and "times" in e:
                err("FT010", f"{label}: times applies to entries used in call order, not to one with when",
                    p + ("times",), key=True)
            if "message" in e and "error" not in e:
                err("FT010", f"{label}: message goes with error", p + ("message",), key=True)
            if "when" in e:
                _lint(doc, p + ("when",), e["when"], problems)
            close = misspelt_error(e.get("error"))
            if close:
                err("FT105", f"{label}: error '{e['error']}' is no flowctl error, so it raises a plain ToolError "
                    "(no retry or handler for the error meant applies)", p + ("error",), hint=close, severity=WARNING)
            line, col = doc.at(p)
            out.append(MockEntry(tool=tool, label=label, where=f"{doc.file}:{line}:{col}", when=e.get("when"),
                                 output=e.get("output"), has_output="output" in e, error=e.get("error"),
                                 message=e.get("message"), times=e.get("times", 1),
                                 verified=e.get("verified", "output" in e), repeat=repeat))
        case.mocks[tool] = out

    # model replies (llm and agent states): the fake provider answers them in call order
    for sid, replies in (d.get("models") or {}).items():
        state = project.states.get(sid)
        if state is None or state.type not in ("llm", "agent"):
            if ("state", sid) not in project.broken:
                err("FT103", f"models: '{sid}' is no llm or agent state; these replies are never used",
                    ("models", sid), key=True, severity=WARNING,
                    hint=did_you_mean(sid, [k for k, v in project.states.items() if v.type in ("llm", "agent")]))
            continue
        case.models[sid] = [dict(r) for r in replies]

    # reviews
    for i, r in enumerate(d.get("reviews") or ()):
        p = ("reviews", i)
        if ("decision" in r) == bool(r.get("timeout")):
            err("FT010", f"reviews[{i}]: give either decision or timeout: true", p)
            continue
        case.reviews.append(ReviewStep(where=case.where(*p), decision=r.get("decision"), data=r.get("data"),
                                       by=r.get("by"), state=r.get("state"), timeout=bool(r.get("timeout"))))
        if r.get("state") and r["state"] not in project.states and ("state", r["state"]) not in project.broken:
            err("FT103", f"reviews[{i}]: no state '{r['state']}'", p + ("state",), severity=WARNING,
                hint=did_you_mean(r["state"], project.states))

    # expect
    x = d["expect"]
    raw_path = x.get("path")
    if isinstance(raw_path, str):
        parsed = parse_path(raw_path)
        if parsed is None:
            err("FT010", f"expect.path: cannot read {raw_path!r}", ("expect", "path"),
                hint="a list of state ids, or one line: validate_order → get_logistics ×3 → escalate_to_human")
        raw_path = parsed or []
        located = [("expect", "path")] * len(raw_path)
    else:
        located = [("expect", "path", i) for i in range(len(raw_path))]
    for sid, p in zip(raw_path, located):
        if sid not in project.states and ("state", sid) not in project.broken:  # a broken file is FC00x
            err("FT103", f"expect.path: no state '{sid}'", p, severity=WARNING,
                hint=did_you_mean(sid, project.states) or "the case will fail on its path")
    case.expect = Expect(path=list(raw_path), status=x.get("status"), context=x.get("context"),
                         output=x.get("output"), has_output="output" in x, error=x.get("error"),
                         compensated=x.get("compensated"))
    if case.expect.error and case.expect.status not in (None, "failed"):
        err("FT010", f"expect.error is for failed runs, but expect.status is {case.expect.status}", ("expect", "error"),
            key=True, severity=WARNING)
    return case, problems


def _lint(doc: Document, path, text: str, problems: list) -> None:
    from flowctl.expr.expressions import lint

    for code, _offset, message, hint in lint(text):
        severity = ERROR if code in ("FC401", "FC404") else WARNING
        problems.append(doc.diag("FT401", f"when: {message}", tuple(path), hint=hint, severity=severity))


_STEP = re.compile(r"^(?P<id>[^\s×]+)(?:\s*[×x*]\s*(?P<n>[0-9]+))?$")
_LOOP = re.compile(r"\(([^()]*)\)\s*[×x]\s*(\d+)")


def parse_path(text: str) -> list | None:
    """``"a → b ×3 → c"`` (or ``->``, ``x3``) -> ``[a, b, b, b, c]``, and a loop as ``flowctl trace``
    prints it, ``"(a → b) ×2 → c"`` -> ``[a, b, a, b, c]``; None if unreadable."""
    out = []
    text = _LOOP.sub(lambda m: " → ".join([m.group(1)] * int(m.group(2))), text)
    for part in re.split(r"\s*(?:→|->)\s*", text.strip()):
        m = _STEP.match(part.strip())
        if not m:
            return None
        out.extend([m.group("id")] * int(m.group("n") or 1))
    return out


def format_diagnostic(d: Diagnostic, display=None) -> str:
    path = display(d) if display else d.file
    text = f"{path}:{d.line}:{d.column}: {d.severity} {d.code} {d.message}"
    if d.hint:
        text += f"\n    hint: {d.hint}"
    return text


__all__ = ["Case", "MockEntry", "ReviewStep", "Expect", "load_cases", "load_case", "case_files", "parse_path", "one_line_path",
           "check_schema", "case_schema", "format_diagnostic", "CODES", "STATUSES"]
