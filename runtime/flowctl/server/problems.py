"""Every error of ``flowctl serve`` as an RFC 9457 problem (``application/problem+json``).

A problem: ``{type, title, status, detail, code[, hint][, pointer, errors]}``. ``code`` is
flowctl's stable code (:mod:`flowctl.errors`, plus the HTTP-level ones below); ``type`` is
``urn:flowctl:problem:<code in lower case>``; for bad input ``pointer`` is a JSON Pointer (RFC 6901)
into the request — ``/body/input/amount``, ``/query/limit``, ``/path/run_id`` — and ``errors``
lists every problem found ``[{pointer, detail}]``.

Statuses: bad input 400 (``MALFORMED_JSON``) or 422 (``INVALID_REQUEST``; ``USAGE`` with a ``pointer`` to the flow, input or params a submit named; ``REVIEW_DATA_INVALID``, a
decision's data that its review's ``data_schema`` rejects, ``pointer`` into ``/body/data``;
``REVIEW_DECISION_INVALID``, a decision the review does not offer, at ``/body/decision``), 401 ``UNAUTHORIZED``,
403 ``FORBIDDEN``, 404 ``NOT_FOUND`` / ``RUN_NOT_FOUND``, 405 ``METHOD_NOT_ALLOWED``, 409 a run that
cannot do what was asked (``RUN_CONFLICT``, ``RECORD_TAMPERED``, ``USAGE`` on a run that ended), 413
``PAYLOAD_TOO_LARGE``, 429 ``RATE_LIMITED``, 503 ``STORE`` (the store failed); anything else is a
bug: logged with its traceback, answered 500 ``INTERNAL`` without one.
"""
from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from flowctl.server.responses import Json
from starlette.exceptions import HTTPException as StarletteHTTPException

from flowctl import errors

log = logging.getLogger("flowctl.server")

MEDIA_TYPE = "application/problem+json"
INVALID_REQUEST = "INVALID_REQUEST"
MALFORMED_JSON = "MALFORMED_JSON"
NOT_FOUND = "NOT_FOUND"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
PAYLOAD_TOO_LARGE = errors.PayloadTooLarge.code
INTERNAL = "INTERNAL"

TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
          408: "Request Timeout", 409: "Conflict", 413: "Content Too Large", 415: "Unsupported Media Type",
          422: "Unprocessable Content", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


def body_of(status: int, code: str, detail: str, *, hint: str = "", **extra) -> dict:
    """The problem document (a dict) for ``status`` and flowctl's stable ``code``."""
    body = {"type": f"urn:flowctl:problem:{code.lower()}", "title": TITLES.get(status, "Error"), "status": status,
            "detail": detail, "code": code}
    if hint:
        body["hint"] = hint
    body.update(extra)
    return body


def problem(status: int, code: str, detail: str, *, hint: str = "", headers=None, **extra) -> Json:
    return Json(body_of(status, code, detail, hint=hint, **extra), status_code=status, media_type=MEDIA_TYPE,
                        headers=headers)


def invalid(errors) -> tuple:
    """``(status, problem document)`` of a request's validation errors (pydantic's ``errors()``
    shape: ``[{loc, msg, type}]``, ``loc`` from the request part: ``("body", "input", 0)``): 400
    ``MALFORMED_JSON`` when the body is not JSON, else 422 ``INVALID_REQUEST`` located at the first."""
    found, malformed = [], False
    for e in errors:
        loc = tuple(e.get("loc") or ())
        if e.get("type") == "json_invalid":
            malformed = True
        found.append({"pointer": pointer(loc), "detail": str(e.get("msg", "invalid"))})
    found = found or [{"pointer": "/body", "detail": "invalid request"}]
    if malformed:
        return 400, body_of(400, MALFORMED_JSON, f"the request body is not JSON: {found[0]['detail']}",
                            pointer="/body", errors=found[:20])
    first = found[0]
    return 422, body_of(422, INVALID_REQUEST, f"{first['pointer']}: {first['detail']}", pointer=first["pointer"],
                        errors=found[:20])


def of_error(exc: Exception):
    """``(status, headers dict, problem document)`` of an error the server answers as a problem (a
    :class:`~flowctl.errors.FlowctlError`, or bad input that broke the JSON reader: nested too
    deeply, a lone surrogate), or None for any other exception (a bug: answered 500 by the caller)."""
    if isinstance(exc, RecursionError):  # json.loads of a body nested 100,000 deep
        return 400, {}, body_of(400, INVALID_REQUEST, "the request nests too deeply to be read",
                                hint="send JSON nested at most a few hundred levels")
    if isinstance(exc, UnicodeError):  # valid JSON holding a lone surrogate ("\\ud800")
        return 400, {}, body_of(400, INVALID_REQUEST, "the request holds text that is not valid Unicode "
                                "(a lone surrogate such as \\ud800)", hint="send UTF-8 text: surrogates only in pairs")
    if not isinstance(exc, errors.FlowctlError):
        return None
    status = status_of(exc)
    headers = {}
    if isinstance(exc, errors.RateLimited):
        headers = {"Retry-After": str(max(1, int(exc.retry_after + 0.999)))}
    elif status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    extra = {}
    if isinstance(exc, errors.ReviewDataInvalid):  # located in the request: /body/data/amount
        at = "/body/data" + ("" if exc.pointer == "/" else exc.pointer)
        extra = {"pointer": at, "errors": [{"pointer": at, "detail": exc.message}]}
    elif isinstance(exc, errors.UsageError) and getattr(exc, "field", None):  # /body/flow, /body/decision …
        at = f"/body/{exc.field}"
        extra = {"pointer": at, "errors": [{"pointer": at, "detail": exc.message}]}
    return status, headers, body_of(status, exc.code, exc.message or str(exc) or exc.code, hint=exc.hint, **extra)


def pointer(loc) -> str:
    """A JSON Pointer (RFC 6901) for a validation error's location, e.g. ``("body", "input", 0)``."""
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in loc)


def status_of(exc: errors.FlowctlError) -> int:
    if isinstance(exc, errors.RateLimited):
        return 429
    if isinstance(exc, errors.ScopeError):
        return 403
    if isinstance(exc, errors.AccessError):
        return 401
    if isinstance(exc, errors.RunNotFound):
        return 404
    if isinstance(exc, (errors.RunConflict, errors.RecordTampered)):
        return 409
    if isinstance(exc, errors.StoreError):
        return 503
    if isinstance(exc, errors.PayloadTooLarge):
        return 413
    if isinstance(exc, errors.ReviewDataInvalid):
        return 422
    if isinstance(exc, errors.UsageError) and getattr(exc, "field", None):
        return 422  # a named part of the request (the flow, its input, its params, the decision) is unusable
    if isinstance(exc, (errors.UsageError, errors.StepError)):
        return 409 if getattr(exc, "conflict", False) else 400
    return 500


def install(app: FastAPI) -> None:
    """Register the handlers that turn every error into a problem."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        status, body = invalid(exc.errors())
        return Json(body, status_code=status, media_type=MEDIA_TYPE)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: NOT_FOUND, 405: METHOD_NOT_ALLOWED, 413: PAYLOAD_TOO_LARGE}.get(exc.status_code, INVALID_REQUEST)
        detail = exc.detail if isinstance(exc.detail, str) else TITLES.get(exc.status_code, "error")
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no endpoint {request.method} {request.url.path}"
        return problem(exc.status_code, code, detail, headers=getattr(exc, "headers", None))

    @app.exception_handler(errors.FlowctlError)
    @app.exception_handler(RecursionError)
    @app.exception_handler(UnicodeError)
    async def _known(request: Request, exc: Exception):
        status, headers, body = of_error(exc)
        if status >= 500:
            log.error("flowctl error on %s %s: %s", request.method, request.url.path, exc, exc_info=exc)
        return Json(body, status_code=status, media_type=MEDIA_TYPE, headers=headers or None)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):  # Starlette re-raises it: Guard logs it
        return problem(500, INTERNAL, "the server failed to answer this request; it was logged",
                       hint="report it with the time of the request")


__all__ = ["INTERNAL", "INVALID_REQUEST", "MALFORMED_JSON", "MEDIA_TYPE", "body_of", "install", "invalid", "of_error",
           "pointer", "problem"]
