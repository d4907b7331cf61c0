"""The exception hierarchy of flowctl, in one place.

Every error kind is one class with a stable ``code`` (an upper-snake string that scripts and
handlers may rely on) and a ``type_name`` used when flows match errors by name::

    FlowctlError                      base of everything flowctl raises on purpose
    ├── UsageError        USAGE       the invocation itself is unusable (CLI exit 2)
    │   ├── ReviewDataInvalid REVIEW_DATA_INVALID  a decision's data fails the review's data_schema (exit 2, HTTP 422)
    │   ├── DecisionInvalid   REVIEW_DECISION_INVALID  the review does not offer that decision (exit 2, HTTP 422)
    │   └── RunInUse          RUN_IN_USE  another live process is driving the run (exit 2, HTTP 409)
    ├── ProjectError      PROJECT     orchestration/ not found, or it does not load (CLI exit 2)
    ├── AccessError       UNAUTHORIZED  ``flowctl serve``: no API key, or one not known or revoked (HTTP 401)
    │   ├── ScopeError    FORBIDDEN     the key lacks the scope the request needs (HTTP 403)
    │   └── RateLimited   RATE_LIMITED  the key's request rate is spent; try again later (HTTP 429)
    ├── StoreError        STORE       the run store cannot be opened or used (CLI exit 2)
    │   ├── RunNotFound   RUN_NOT_FOUND   no run with that id or prefix (CLI exit 2)
    │   ├── SecretKeyError SECRET_KEY     no usable key to encrypt or open a run's secrets (CLI exit 2)
    │   ├── RunConflict   RUN_CONFLICT    another process advanced the run; this one stopped (exit 1)
    │   │   └── LeaseLost LEASE_LOST      a worker's fencing token is no longer the run's: it wrote nothing
    │   └── RecordTampered RECORD_TAMPERED  a snapshot or run row differs from its hash: not continued
    └── StepError         STEP_ERROR  raised while a run executes; handlers match these by name
        ├── ToolError             TOOL_ERROR           raised by tool code; ``error_type`` names it
        │   ├── ToolUnavailable   TOOL_UNAVAILABLE     transient: the system behind the tool is down
        │   ├── ToolThrottled     TOOL_THROTTLED       transient: the system asked us to slow down
        │   └── ToolCrashed       TOOL_CRASHED         tool code raised a BaseException (SystemExit …)
        ├── ToolTimeout           TOOL_TIMEOUT         the tool exceeded its timeout
        ├── SchemaMismatch        SCHEMA_MISMATCH      input or output violates a schema
        ├── PolicyDenied          POLICY_DENIED        the policy gate refused a side effect
        ├── BoundaryViolation     BOUNDARY_VIOLATION   verify said a side effect did not happen
        ├── NoTransitionMatched   NO_TRANSITION_MATCHED
        ├── ExpressionError       EXPRESSION_ERROR     a JMESPath expression failed to evaluate
        ├── MaxStepsExceeded      MAX_STEPS_EXCEEDED   ``limits.max_steps`` / ``max_visits``
        ├── RunTimeout            RUN_TIMEOUT          ``limits.timeout`` of the flow
        ├── ReviewTimeout         REVIEW_TIMEOUT
        ├── CompensationFailed    COMPENSATION_FAILED  an undo raised; kept as residue, never swallowed
        ├── BranchFailed          BRANCH_FAILED        a child run of parallel/map/subflow failed
        ├── PayloadTooLarge       PAYLOAD_TOO_LARGE    a payload exceeds the store's size limit
        ├── AgentLimitExceeded    AGENT_LIMIT_EXCEEDED an agent state reached ``max_turns`` / ``max_tool_calls``
        ├── BudgetExceeded        BUDGET_EXCEEDED      a run's model calls passed the flow's ``limits.tokens`` / ``cost``
        ├── Cancelled             CANCELLED            the run was cancelled (a user, or a failed sibling)
        └── FlowFailed            (code from the fail state)  a ``fail`` state or a ``fail:`` handler

A run's stored ``error`` is always made by :func:`run_error` (from an error class and a message)
or :func:`error_record` (from a raised exception): ``{type, code, message, state[, attempt]}``.

Exceptions raised by tool code that are not ``StepError`` (``ConnectionError``, ``KeyError`` …)
are wrapped by the engine; flows match them by their class name or any base class name, as
``except`` does, and by the group name ``ToolError`` (as ASL's ``States.TaskFailed``).
"""
from __future__ import annotations


class FlowctlError(Exception):
    """Base class. ``code`` is stable; ``hint`` (may be empty) says what to do about it."""

    code = "FLOWCTL_ERROR"

    def __init__(self, message: str = "", *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(FlowctlError):
    """``field``: which part of a request was unusable, when one was (``flow``, ``input``,
    ``params``): ``flowctl serve`` answers such an error 422 with a pointer to it."""

    code = "USAGE"

    def __init__(self, message: str = "", *, hint: str = "", field: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.field = field


class ReviewDataInvalid(UsageError):
    """A review decision's data does not satisfy the review state's ``data_schema``; nothing was
    recorded. ``pointer``: the JSON Pointer (RFC 6901) into the data of the first problem (``/`` for
    the whole value)."""

    code = "REVIEW_DATA_INVALID"

    def __init__(self, message: str = "", *, hint: str = "", pointer: str = "/") -> None:
        super().__init__(message, hint=hint)
        self.pointer = pointer


class DecisionInvalid(UsageError):
    """A review decision the pending review does not offer (its ``decisions``); nothing was decided.
    Its ``field`` is ``decision``."""

    code = "REVIEW_DECISION_INVALID"

    def __init__(self, message: str = "", *, hint: str = "") -> None:
        super().__init__(message, hint=hint, field="decision")


class RunInUse(UsageError):
    """The run is being driven by another process that is still alive (``flowctl run``, a resume,
    the server): not continued or cancelled here. A fan-out counts such a child as still open, and
    ``recover`` leaves it to that process."""

    code = "RUN_IN_USE"
    conflict = True


class ProjectError(FlowctlError):
    code = "PROJECT"


class DefinitionError(ProjectError):
    """A flow that cannot run because files it depends on have ``flowctl validate`` errors: a
    finding, exit 1 like ``validate``'s (not a usage error)."""

    code = "DEFINITION"


class AccessError(FlowctlError):
    """A request to ``flowctl serve`` without a usable API key (none, unknown, wrong secret, revoked)."""

    code = "UNAUTHORIZED"


class ScopeError(AccessError):
    """The API key is valid but lacks the scope the request needs."""

    code = "FORBIDDEN"


class RateLimited(AccessError):
    """The API key sent more requests than its rate allows; ``retry_after`` seconds until one is free."""

    code = "RATE_LIMITED"

    def __init__(self, message: str = "", *, hint: str = "", retry_after: float = 1.0) -> None:
        super().__init__(message, hint=hint)
        self.retry_after = retry_after


class StoreError(FlowctlError):
    code = "STORE"


class RunNotFound(StoreError):
    code = "RUN_NOT_FOUND"


class SecretKeyError(StoreError):
    """No usable key for a run's encrypted fields: ``FLOWCTL_SECRET_KEY`` unset for PostgreSQL,
    malformed, holding no key that opens a stored value, or a key file others can read."""

    code = "SECRET_KEY"


class RunConflict(StoreError):
    code = "RUN_CONFLICT"


class LeaseLost(RunConflict):
    """A worker's fencing token is no longer the run's (its lease expired or another worker
    claimed the run): the commit wrote nothing and the worker must stop driving the run."""

    code = "LEASE_LOST"


class RecordTampered(StoreError):
    """The store's record of a run no longer matches its own hashes: the definition snapshot is
    not the one its digest names, or the run row (status, checkpoint, error) is not the one its
    last commit sealed. Nothing continues from it; ``flowctl audit verify RUN`` says what differs."""

    code = "RECORD_TAMPERED"


class StepError(FlowctlError):
    """An error raised while a run executes. Handlers match ``type_name`` and base class names."""

    code = "STEP_ERROR"

    @property
    def type_name(self) -> str:
        return type(self).__name__


class ToolError(StepError):
    """Raised by tool code to name its own error: ``ToolError("Payments.CardDeclined", "…")``.

    ``error_type`` is what handlers match (besides ``ToolError`` itself); it defaults to the class
    name, so subclasses such as ``ToolUnavailable`` match by their own name.
    """

    code = "TOOL_ERROR"

    def __init__(self, error_type: str | None = None, message: str = "", *, hint: str = "") -> None:
        if message == "" and error_type is not None and not _looks_like_type(error_type):
            # ToolUnavailable("gateway down"): a single argument is the message.
            error_type, message = None, error_type
        super().__init__(message, hint=hint)
        self.error_type = error_type or type(self).__name__

    @property
    def type_name(self) -> str:
        return self.error_type


def _looks_like_type(text: str) -> bool:
    return bool(text) and " " not in text and (text[0].isupper() or "." in text)


class ToolUnavailable(ToolError):
    code = "TOOL_UNAVAILABLE"


class ToolThrottled(ToolError):
    code = "TOOL_THROTTLED"


class ToolCrashed(ToolError):
    """Tool code raised something that is not an ``Exception`` (``SystemExit``, ``GeneratorExit``, a
    ``BaseException`` subclass): the run must not die with it. Handlers match the original class
    name, ``ToolCrashed`` and ``ToolError``."""

    code = "TOOL_CRASHED"


class ToolTimeout(StepError):
    code = "TOOL_TIMEOUT"


class SchemaMismatch(StepError):
    code = "SCHEMA_MISMATCH"


class PolicyDenied(StepError):
    code = "POLICY_DENIED"


class BoundaryViolation(StepError):
    code = "BOUNDARY_VIOLATION"


class NoTransitionMatched(StepError):
    code = "NO_TRANSITION_MATCHED"


class ExpressionError(StepError):
    code = "EXPRESSION_ERROR"


class MaxStepsExceeded(StepError):
    code = "MAX_STEPS_EXCEEDED"


class RunTimeout(StepError):
    code = "RUN_TIMEOUT"


class ReviewTimeout(StepError):
    code = "REVIEW_TIMEOUT"


class CompensationFailed(StepError):
    code = "COMPENSATION_FAILED"


class BranchFailed(StepError):
    code = "BRANCH_FAILED"


class PayloadTooLarge(StepError):
    code = "PAYLOAD_TOO_LARGE"


class AgentLimitExceeded(StepError):
    """An ``agent`` state's loop reached ``max_turns`` (model calls) or ``max_tool_calls`` (tool
    calls the model asked for) without answering with JSON that satisfies its ``output_schema``."""

    code = "AGENT_LIMIT_EXCEEDED"


class BudgetExceeded(StepError):
    """The model calls of a run used more than the flow's ``limits.tokens`` (input + output tokens)
    or ``limits.cost`` (priced by ``orchestration/models.yaml``)."""

    code = "BUDGET_EXCEEDED"


class Cancelled(StepError):
    """The run was cancelled (``flowctl cancel``, or a sibling branch failed). Never raised: it names
    the stored error of a cancelled run (:func:`run_error`)."""

    code = "CANCELLED"


class FlowFailed(StepError):
    """A ``fail`` state or a ``fail:`` handler ended the run; ``error`` is the declared name."""

    code = "FLOW_FAILED"

    def __init__(self, error: str, cause: str = "") -> None:
        super().__init__(cause or error)
        self.error = error
        self.code = error

    @property
    def type_name(self) -> str:
        return self.error


def error_names(exc: BaseException) -> list[str]:
    """Names a handler's ``errors`` list can match for ``exc``, most specific first.

    The explicit ``error_type`` (for ``ToolError``), then the class and every base class up to
    (not including) ``Exception``/``BaseException``. Tool exceptions that are not flowctl errors
    also match the group ``ToolError``.
    """
    names: list[str] = []
    if isinstance(exc, StepError):
        names.append(exc.type_name)
    for cls in type(exc).__mro__:
        if cls in (Exception, BaseException, object, FlowctlError, StepError):
            continue
        if cls.__name__ not in names:
            names.append(cls.__name__)
    return names


def handler_names(exc: BaseException) -> list[str]:
    """Names a retry rule or an ``on_error`` handler can match for ``exc``: those the engine tagged
    it with (``flowctl_names``: a tool's exception also matches ``ToolError``), else
    :func:`error_names`."""
    return list(getattr(exc, "flowctl_names", None) or error_names(exc))


def _subclasses(cls) -> list:
    return [cls] + [d for sub in cls.__subclasses__() for d in _subclasses(sub)]


#: ``{class name: class}`` of flowctl's step errors (a ``fail`` state naming one gets its code)
_STEP_ERRORS = {cls.__name__: cls for cls in _subclasses(StepError)}


def run_error(kind: type | str, message: str, state: str | None, attempt: int | None = None) -> dict:
    """A run's stored error ``{type, code, message, state[, attempt]}`` for an error ``kind``: a
    :class:`StepError` class (type its name, code its ``code``) or a declared error name (a ``fail``
    state's or handler's ``error``: both type and code, unless it names a flowctl step error, e.g. a
    ``fail`` state re-raising ``error.type`` ``ExpressionError``: then that class's ``code``)."""
    if isinstance(kind, str):
        name = code = kind
        known = _STEP_ERRORS.get(kind)
        if known is not None and known.code not in (ToolError.code, FlowFailed.code):
            code = known.code
    else:
        name, code = kind.__name__, kind.code
    err = {"type": name, "code": code, "message": message, "state": state}
    if attempt is not None:
        err["attempt"] = attempt
    return err


def error_record(exc: BaseException, state: str | None, attempt: int | None) -> dict:
    """The stored error of ``exc`` raised in ``state``: ``{type, code, message, state, attempt}``
    (``attempt`` left out when None). ``type`` is its first handler name; ``code`` its own code for a
    flowctl step error, else (tool exceptions, tool errors, fail states) that same name."""
    names = handler_names(exc)
    type_name = names[0] if names else type(exc).__name__
    code = getattr(exc, "code", None)
    if not isinstance(exc, StepError) or code in (None, ToolError.code, FlowFailed.code):
        code = type_name
    err = {"type": type_name, "code": code, "message": str(exc) or type_name, "state": state}
    if attempt is not None:
        err["attempt"] = attempt
    return err


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its class name when it has none (for one-line logs)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
