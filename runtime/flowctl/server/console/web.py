"""What the console's pages share: the Jinja2 templates, the static files, the signed-in viewer,
scope checks, CSRF checks on every POST, and the answer to an htmx request.

Templates are in ``templates/`` and static files (htmx, its licence, the style sheet and a few lines
of script) in ``static/`` beside this module, read from the installed package: no CDN, so the
console works offline. Jinja2 autoescapes every template; only the graph's SVG (drawn by Graphviz
from the definition, its labels escaped by it) is inserted as markup.
"""
from __future__ import annotations

import hmac
import json
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from flowctl.server.responses import Html

from flowctl.store.apikeys import allows

HERE = Path(__file__).parent
STATIC = HERE / "static"
#: static files served, and their media types (nothing else in the folder is)
FILES = {"htmx.min.js": "text/javascript", "htmx.LICENSE": "text/plain", "console.css": "text/css",
         "console.js": "text/javascript"}
PREFIX = "/console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"

_env = None


def env():
    """The Jinja2 environment (created once; autoescaping on)."""
    global _env
    if _env is None:
        from jinja2 import Environment, FileSystemLoader, select_autoescape

        e = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(default=True),
                        trim_blocks=True, lstrip_blocks=True)
        e.filters["when"] = when
        e.filters["ago"] = ago
        e.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
        e.filters["pct"] = lambda v: "–" if v is None else f"{v * 100:.1f}%"
        _env = e
    return _env


def when(ts) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM:SS`` UTC ('' for None)."""
    if not isinstance(ts, (int, float)):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def ago(seconds) -> str:
    """A duration in seconds as ``3d 4h``, ``2h 5m``, ``40s``."""
    s = int(abs(seconds or 0))
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    return f"{m}m {s % 60}s" if m else f"{s}s"


@dataclass(frozen=True)
class Viewer:
    """Who is signed in: the API key's ``name`` and ``scopes``, and the session's CSRF token."""

    name: str
    scopes: tuple
    key_id: str
    csrf: str

    @property
    def by(self) -> str:
        """How the audit log names this viewer (as :attr:`flowctl.server.auth.Caller.by`)."""
        return f"key:{self.name}"

    def can(self, scope: str) -> bool:
        return allows(self.scopes, scope)


def render(request: Request, template: str, status: int = 200, **values) -> Html:
    """``template`` rendered with ``values``, ``viewer`` and ``prefix``."""
    values.setdefault("viewer", getattr(request.state, "viewer", None))
    values.setdefault("prefix", PREFIX)
    values.setdefault("path", request.url.path)
    return Html(env().get_template(template).render(**values), status_code=status)


def message(request: Request, status: int, title: str, text: str) -> Html:
    """A page (or, for htmx, a fragment) saying what went wrong or what was done."""
    template = "_message.html" if request.headers.get("hx-request") else "message.html"
    return render(request, template, status=status, title=title, text=text)


def go(request: Request, url: str) -> Response:
    """Send the browser to ``url`` after an action: ``HX-Redirect`` for htmx, else 303."""
    if request.headers.get("hx-request"):
        return Response(status_code=200, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


async def form(request: Request) -> dict:
    """The POST's urlencoded form as ``{name: value}`` (the last value of a repeated name); the
    body was already size-limited by :class:`flowctl.server.guard.Guard`."""
    body = (await request.body()).decode("utf-8", "replace")
    return dict(parse_qsl(body, keep_blank_values=True))


def csrf_ok(request: Request, viewer: Viewer, fields: dict) -> bool:
    """Whether the POST carries the session's CSRF token (hidden field or htmx header)."""
    sent = fields.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or ""
    return bool(sent) and hmac.compare_digest(sent.encode(), viewer.csrf.encode())


def static(name: str) -> Response:
    """One of :data:`FILES`, or 404."""
    media = FILES.get(name)
    if media is None:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response((STATIC / name).read_bytes(), media_type=media,
                    headers={"Cache-Control": "public, max-age=3600"})


__all__ = ["CSRF_FIELD", "PREFIX", "Viewer", "csrf_ok", "env", "form", "go", "message", "render", "static"]
