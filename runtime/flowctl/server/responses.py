"""The response classes of ``flowctl serve``: :class:`Json` and :class:`Html`.

Text a run keeps may hold what UTF-8 cannot encode: a lone surrogate in a tool's exception
message or output is stored as its JSON escape (:func:`flowctl.store.audit.utf8_safe`) and read
back as the same Python text. Starlette encodes a body with plain ``str.encode("utf-8")``, which
raised on it, so every page that showed such a run answered 500, the run list included (breaker
finding). Here a character UTF-8 cannot hold is written as its backslash escape: inside a JSON
string that is exactly its JSON escape (``\\ud800``), so the JSON stays valid and reads back as
the same text; in HTML it is shown as written.
"""
from __future__ import annotations

import json

from fastapi.responses import HTMLResponse, JSONResponse


class Json(JSONResponse):
    """:class:`JSONResponse` whose body encodes any text (see the module)."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":")).encode("utf-8", "backslashreplace")


class Html(HTMLResponse):
    """:class:`HTMLResponse` whose body encodes any text (see the module)."""

    def render(self, content) -> bytes:
        if isinstance(content, str):
            return content.encode("utf-8", "backslashreplace")
        return super().render(content)


__all__ = ["Html", "Json"]
