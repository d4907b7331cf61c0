"""Request and response bodies of ``flowctl serve`` (pydantic): what ``/openapi.json`` describes.

Requests forbid unknown fields and take types strictly (``"true"`` is not a boolean, ``"5"`` not a
number): an agent's mistake is a 422 problem naming the field, not a guess. A free-form field
(:data:`Json`: a tool input, params, a decision's data) takes only what JSON text can hold — no
NaN, Infinity or lone surrogate — the 422 naming the value (``/body/data/refund_cap``). Times are
epoch seconds; ids as the store writes them.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictStr
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from flowctl.engine.payload import not_json

#: A session or trace id: what ties a caller's gate checks into one causal sequence.
SESSION_PATTERN = r"^[A-Za-z0-9._:-]{1,40}$"
#: the service log's own session (refusals, sign-ins: flowctl.store.servicelog), which no check may name
RESERVED_SESSION = "access"


def _not_reserved(value):
    if value == RESERVED_SESSION:
        raise PydanticCustomError("reserved", f"'{RESERVED_SESSION}' is the service's own session (its refusals); "
                                  "name the session otherwise")
    return value
#: A tool reference: contract id, optionally ``@`` and a version range (``refund_payment@^3``). An id
#: has at most 120 characters (as a contract's ``id``), so a reference (at most 181) fits what the
#: service log records of it (its ``tool``: 200), and one no contract could match is a 422.
TOOL_PATTERN = r"^[A-Za-z0-9_.-]{1,120}(@[A-Za-z0-9^~<>=*.,| +-]{1,60})?$"


def _json_only(value):
    """``value`` if JSON can hold it as UTF-8 text; else a validation error located at the bad part
    (``/body/input/amount``: NaN, an infinity, a lone surrogate), answered as a 422 problem."""
    bad = not_json(value)
    if bad is None:
        return value
    at, why = bad
    loc = tuple(p.replace("~1", "/").replace("~0", "~") for p in at.split("/")[1:])
    raise ValidationError.from_exception_data("json", [InitErrorDetails(
        type=PydanticCustomError("not_json", "{why}", {"why": why}), loc=loc, input=None)])


#: Any JSON value, as stored: what a request's free-form field (a tool input, a review's data) takes
Json = Annotated[Any, AfterValidator(_json_only)]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GateCheck(Request):
    """``POST /v1/gate/check``: may this call happen?"""

    tool: StrictStr = Field(pattern=TOOL_PATTERN, description="contract id, optionally @version-range")
    input: Json = Field(default_factory=dict, description="the tool input the caller means to send")
    session: Annotated[Optional[StrictStr], AfterValidator(_not_reserved)] = Field(
        default=None, pattern=SESSION_PATTERN,
        description="session or trace id (shared by every key that names it; each record names its caller); "
                    "default: the API key's name; not 'access', the service's own")
    dry_run: StrictBool = Field(default=False, description="explain only: not recorded, not counted by rate or dedupe")


class GateDecision(BaseModel):
    decision: Literal["allow", "deny", "review"]
    tool: str = Field(description="the contract that decided (id@version), or the reference asked for")
    policy: str = Field(description="the policies that decided ('' for read-only and default deny)")
    rule: str = Field(description="read-only | default-deny | unknown-tool | input-schema | allow | review_when | rate | dedupe | allow[i] …")
    reason: str
    session: str
    seq: Optional[int] = Field(description="this decision's number in the session's causal order (null: dry run)")
    dry_run: bool
    caller: str = Field(description="the API key's name")


class RunSummary(BaseModel):
    id: str
    flow: str
    flow_version: Optional[str] = None
    status: str
    steps: int
    created_at: float
    updated_at: float
    parent_id: Optional[str] = None
    queue: Optional[str] = None
    error: Optional[dict] = None


class PendingReview(BaseModel):
    state: Optional[str] = None
    decisions: list = Field(default_factory=list)
    show: Any = None
    deadline: Optional[float] = None
    policy: bool = False


class RunDetail(RunSummary):
    input: Any = None
    params: Any = None
    output: Any = None
    available_at: Optional[float] = None
    review: Optional[PendingReview] = None


class RunPage(BaseModel):
    runs: list[RunSummary]
    next_cursor: Optional[str] = Field(description="pass as ?cursor= for the next page; null: no more")


class Event(BaseModel):
    seq: int
    ts: float
    type: str
    state: Optional[str] = None
    attempt: Optional[int] = None
    data: Any = None
    hash: str


class EventPage(BaseModel):
    events: list[Event]
    next_after: Optional[int] = Field(description="pass as ?after= for the next page; null: no more yet")


class ReviewItem(BaseModel):
    run_id: str
    flow: str
    state: Optional[str] = None
    decisions: list = Field(default_factory=list)
    show: Any = None
    deadline: Optional[float] = None
    policy: bool = False
    parent_id: Optional[str] = None


class SubmitRun(Request):
    flow: StrictStr = Field(pattern=r"^[A-Za-z0-9_.-]{1,200}$")
    input: Json = Field(default_factory=dict)
    params: dict[str, Json] = Field(default_factory=dict)
    queue: StrictStr = Field(default="default", pattern=r"^[A-Za-z0-9_.:-]{1,100}$")
    priority: int = Field(default=0, ge=-2147483648, le=2147483647, strict=True)


class Submitted(BaseModel):
    run_id: str
    flow: str
    status: Literal["queued"]
    queue: str


class CancelRun(Request):
    compensate: StrictBool = True


class PauseRun(Request):
    reason: StrictStr = Field(min_length=1, max_length=500, description="why (recorded with the key that paused it)")


class PauseRequested(BaseModel):
    """A pause request as it stands (:func:`flowctl.engine.pause.request`): ``new`` False when an
    earlier one was pending (that one stands); ``status``: the run's status when asked."""

    run_id: str
    status: str
    new: bool
    by: Optional[str] = None
    reason: Optional[str] = None
    at: Optional[float] = None


class Decide(Request):
    decision: StrictStr = Field(min_length=1, max_length=100)
    token: Optional[StrictStr] = Field(default=None, min_length=1, max_length=200,
                                       description="the review's one-time token; without it a key with the reviews scope decides")
    data: Json = Field(default=None, description="the decision's data (checked against the review's data_schema)")


class Outcome(BaseModel):
    """A run after a request acted on it."""

    run_id: str
    flow: str
    status: str
    error: Optional[dict] = None
    steps: int = 0
    cancel_requested: bool = False
    residue: list = Field(default_factory=list)
    review: Optional[PendingReview] = None


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    store: str


class OpenSession(Request):
    """``POST /v1/sessions``."""

    name: Optional[StrictStr] = Field(default=None, pattern=SESSION_PATTERN,
                                      description="what the session is for (its run's flow is session:<name>); default: the key's name")


class SessionOpened(BaseModel):
    session: str = Field(description="the session's id: its run's id (GET /v1/runs/{id}, flowctl trace)")
    name: str
    flow: str
    status: Literal["waiting"]


class Invoke(Request):
    """``POST /v1/sessions/{session}/tools/{tool}/invoke``."""

    input: Json = Field(default_factory=dict, description="the tool input (checked against the contract's input_schema)")
    idempotency_key: Optional[StrictStr] = Field(default=None, min_length=1, max_length=200,
                                                 description="the call's key, given to the tool in this API key's "
                                                             "namespace (key:<name>:<key>); default: the contract's "
                                                             "idempotency_key expression, else <session>:<tool>:<n>")


class InvokeDecision(BaseModel):
    decision: Literal["allow", "deny", "review"]
    policy: str
    rule: str
    reason: str


class HeldReview(BaseModel):
    """A session's call held for a gate review (the 202 answer of an invoke)."""

    id: str = Field(description="the review's id: the session id (GET /v1/reviews, POST /v1/reviews/{id}/decide)")
    tool: Optional[str] = None
    policy: Optional[str] = None
    rule: Optional[str] = None
    reason: Optional[str] = None
    decisions: list[str]
    deadline: Optional[float] = Field(default=None, description="epoch seconds; undecided by then: denied")
    how: str = Field(description="how a reviewer decides it; then the caller repeats the same call")


class Invoked(BaseModel):
    """One call made (or refused) in a session: 200; 202 (``status: review``) while a reviewer decides."""

    session: str
    tool: str
    status: Literal["succeeded", "denied", "review", "failed"]
    decision: Optional[InvokeDecision] = Field(description="the gate's answer (null: the call failed before it)")
    output: Any = Field(default=None, description="the tool's output (sensitive fields redacted); succeeded only")
    error: Optional[dict] = Field(default=None, description="{type, code, message}: failed, or review (not made)")
    idempotency_key: Optional[str] = Field(default=None, description="the key the tool was called with")
    seq: int = Field(description="the session run's last audit event seq after this call")
    review: Optional[HeldReview] = Field(default=None, description="status review: the pending review")
    replayed: bool = Field(default=False, description="true: a call of this tool with this idempotency_key "
                           "succeeded before in this session; this is its recorded output, the tool was not called again")


class Compensated(BaseModel):
    session: str
    status: str
    compensated: list[str] = Field(description="the tools whose effects were undone, newest first")
    residue: list = Field(default_factory=list, description="compensations that failed")
    failed: int = 0


class CloseSession(Request):
    compensate: StrictBool = Field(default=False, description="undo the session's effects first")


class Closed(BaseModel):
    session: str
    status: Literal["succeeded"]
    calls: int
    compensated: list[str]
    residue: list = Field(default_factory=list)


class Stats(BaseModel):
    """``GET /v1/stats``: :func:`flowctl.store.history.stats` over the latest runs."""

    runs: int
    by_status: dict
    success_rate: Optional[float] = Field(description="succeeded / ended (0-1); null: none ended")
    mean_steps: Optional[float] = None
    compensation_failures: int
    step_ms: dict = Field(description="{p50, p99} of tool-call durations, milliseconds")
    tools: dict = Field(description="{tool: {calls, failures, retries, failure_rate, retry_rate}}")


__all__ = ["CancelRun", "CloseSession", "Closed", "Compensated", "Invoke", "InvokeDecision", "Invoked",
           "OpenSession", "SessionOpened", "Decide", "Event", "EventPage", "GateCheck", "GateDecision", "Health", "Outcome",
           "PendingReview", "ReviewItem", "RunDetail", "RunPage", "RunSummary", "Stats", "SubmitRun", "Submitted"]
