"""Diagnostics: what ``flowctl validate`` reports.

A :class:`Diagnostic` is located (``file``, 1-based ``line`` and ``column``) and carries a stable
``code`` (``FC`` + three digits; the table :data:`CODES` names each one) and a severity. The
codes are grouped by hundreds: 0xx files and syntax, 1xx references, 2xx graph, 3xx order,
4xx expressions, 5xx retry and time, 6xx contracts, 7xx policies, 8xx data flow
(:mod:`flowctl.dataflow`), 9xx model steps (:mod:`flowctl.check.models`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

ERROR = "error"
WARNING = "warning"

#: code -> (slug, default severity). Codes never change meaning once published.
CODES: dict[str, tuple[str, str]] = {
    "FC001": ("syntax-error", ERROR),
    "FC002": ("duplicate-key", ERROR),
    "FC003": ("file-limit", ERROR),
    "FC004": ("yaml11-ambiguity", WARNING),
    "FC005": ("id-mismatch", ERROR),
    "FC006": ("duplicate-id", ERROR),
    "FC007": ("unsupported-tag", ERROR),
    "FC008": ("link-outside-repository", ERROR),
    "FC010": ("schema", ERROR),
    "FC011": ("unknown-field", ERROR),
    "FC012": ("field-not-for-type", ERROR),
    "FC101": ("unknown-state", ERROR),
    "FC102": ("unknown-tool", ERROR),
    "FC103": ("policy-unknown-tool", ERROR),
    "FC104": ("unused-state", WARNING),
    "FC105": ("unused-contract", WARNING),
    "FC106": ("unknown-flow", ERROR),
    "FC107": ("unbounded-recursion", ERROR),
    "FC108": ("child-input-mismatch", ERROR),
    "FC201": ("unreachable-state", ERROR),
    "FC202": ("no-terminal", ERROR),
    "FC203": ("trap-state", ERROR),
    "FC204": ("terminal-has-exit", ERROR),
    "FC205": ("no-exit", ERROR),
    "FC206": ("no-default-transition", WARNING),
    "FC301": ("catch-all-not-last", ERROR),
    "FC302": ("unreachable-transition", ERROR),
    "FC303": ("unreachable-handler", WARNING),
    "FC304": ("error-name-typo", WARNING),
    "FC401": ("expression-syntax", ERROR),
    "FC402": ("quoted-identifier-literal", WARNING),
    "FC403": ("bare-backtick-literal", WARNING),
    "FC404": ("unknown-function", ERROR),
    "FC405": ("literal-looks-like-expression", WARNING),
    "FC406": ("unknown-scope-name", ERROR),
    "FC407": ("bare-null", WARNING),
    "FC408": ("expression-too-deep", ERROR),
    "FC501": ("retry-value", ERROR),
    "FC502": ("duration", ERROR),
    "FC601": ("side-effect-undeclared-undo", ERROR),
    "FC602": ("read-only-compensate", ERROR),
    "FC603": ("import-failed", ERROR),
    "FC604": ("version-mismatch", ERROR),
    "FC605": ("tool-input-mismatch", ERROR),
    "FC606": ("tool-code-outside-project", ERROR),
    "FC607": ("sensitive-field-undeclared", WARNING),
    "FC608": ("tool-function-not-found", ERROR),
    "FC609": ("invalid-json-schema", ERROR),
    "FC610": ("review-show-masked", WARNING),
    "FC701": ("policy-value", ERROR),
    "FC702": ("no-policy-allows", WARNING),
    "FC703": ("policy-limits-nothing", WARNING),
    "FC704": ("same-function-disagrees", ERROR),
    "FC705": ("helper-is-a-gated-tool", ERROR),
    "FC801": ("undefined-field", ERROR),
    "FC802": ("type-mismatch-comparison", ERROR),
    "FC803": ("required-input-unset-on-path", ERROR),
    "FC804": ("sometimes-defined-in-condition", WARNING),
    "FC805": ("function-argument-type", ERROR),
    "FC806": ("decision-not-offered", ERROR),
    "FC901": ("unknown-model-profile", ERROR),
    "FC902": ("unknown-prompt", ERROR),
    "FC903": ("prompt-syntax", ERROR),
    "FC904": ("prompt-unknown-name", ERROR),
}


@dataclass(frozen=True)
class Diagnostic:
    """One finding. ``file`` is relative to the project root (the folder holding orchestration/)."""

    code: str
    message: str
    file: str = ""
    line: int = 1
    column: int = 1
    hint: str = ""
    severity: str = field(default="")

    def __post_init__(self) -> None:
        if not self.severity:
            object.__setattr__(self, "severity", CODES.get(self.code, ("", ERROR))[1])

    @property
    def slug(self) -> str:
        return CODES.get(self.code, ("unknown", ERROR))[0]

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def as_dict(self) -> dict:
        return {
            "code": self.code,
            "name": self.slug,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "hint": self.hint,
        }


def sort_key(d: Diagnostic):
    return (d.file, d.line, d.column, d.code)
