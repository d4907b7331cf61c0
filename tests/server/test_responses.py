"""flowctl.server.responses: JSON and HTML bodies that encode any text a run may keep."""
from __future__ import annotations

import json

from flowctl.server.responses import Html, Json


def test_json_with_a_lone_surrogate_is_valid_json_of_the_same_text():
    body = Json({"message": "x\udc80y", "name": "café"}).body
    assert json.loads(body) == {"message": "x\udc80y", "name": "café"}
    assert "café".encode() in body  # other text stays UTF-8, not escaped


def test_html_with_a_lone_surrogate_shows_its_escape():
    assert Html("<p>x\udc80y</p>").body == b"<p>x\\udc80y</p>"
