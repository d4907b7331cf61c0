"""A non-ASCII sensitive value is redacted in every escaped form a message can carry it in.

A tool's exception text quotes the value as Python does (``repr``, ``ascii``: ``p\\xe4ssw\\xf6rt``),
as ``unicode_escape`` or its UTF-8 bytes would (``\\xc3\\xa4``), or as a JSON encoder escapes it
(``\\u00e4``, also upper-case ``\\u00E4``); none of them may reach the store, whichever is stored.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowctl.store.audit import REDACTED
from flowctl.store.sql import open_store
from support.enginekit import Harness, build

SECRET = "pässwört€-😀-42"

FORMS = {
    "as written": SECRET,
    "json": json.dumps(SECRET)[1:-1],
    "json upper-case hex": json.dumps(SECRET)[1:-1].replace("\\u00e4", "\\u00E4").replace("\\u00f6", "\\u00F6")
                                                    .replace("\\u20ac", "\\u20AC").replace("\\ud83d", "\\uD83D")
                                                    .replace("\\ude00", "\\uDE00"),
    "repr": repr(SECRET)[1:-1],
    "ascii": ascii(SECRET)[1:-1],
    "unicode_escape": SECRET.encode("unicode_escape").decode("ascii"),
    "utf-8 bytes": repr(SECRET.encode())[2:-1],
}

TOOLS = """
import json

def login(input, call):
    form = input["form"]
    pw = input["password"]
    texts = {"ascii": ascii(pw), "unicode_escape": pw.encode("unicode_escape").decode("ascii"),
             "utf-8 bytes": repr(pw.encode()), "json": json.dumps(pw),
             "json upper-case hex": json.dumps(pw).replace("\\\\u00e4", "\\\\u00E4").replace("\\\\u00f6", "\\\\u00F6")
                                                  .replace("\\\\u20ac", "\\\\u20AC").replace("\\\\ud83d", "\\\\uD83D")
                                                  .replace("\\\\ude00", "\\\\uDE00"),
             "repr": repr(pw), "as written": pw}
    raise ValueError("login refused for password " + texts[form])
"""

FILES = {
    "contracts/login.v1.0.0.yaml": "id: login\nversion: 1.0.0\nentrypoint: tk:login\nsensitive: [password]\n",
    "states/log_in.yaml": "id: log_in\ntype: task\ntool: login@^1\ninput: {password: input.password, form: input.form}\n",
    "transitions/f.yaml": "flow: f\nstart: log_in\ntransitions:\n  - {from: log_in, to: done}\n",
}


def test_each_escaped_form_differs_from_the_value_where_it_should():
    assert FORMS["ascii"] == "p\\xe4ssw\\xf6rt\\u20ac-\\U0001f600-42" and FORMS["ascii"] != FORMS["repr"]
    assert FORMS["json upper-case hex"] != FORMS["json"]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_message_carrying_a_secret_in_any_escaped_form_is_redacted(form):
    from flowctl.engine.sensitive import Secrets

    s = Secrets(["password"])
    s.learn({"password": SECRET})
    text = FORMS[form]
    assert s.scrub({"message": f"refused {text}!", "whole": text}) == {"message": f"refused {REDACTED}!",
                                                                     "whole": REDACTED}


@pytest.mark.parametrize("form", ["ascii", "unicode_escape", "utf-8 bytes", "json upper-case hex"])
def test_no_escaped_form_of_a_secret_reaches_the_events_or_the_database_files(tmp_path, form, monkeypatch):
    monkeypatch.delenv("FLOWCTL_SECRET_KEY", raising=False)
    db = tmp_path / "flowctl.db"
    store = open_store(f"sqlite:///{db}")
    h = Harness(build(tmp_path, FILES, TOOLS), store=store)
    result = h.run(input={"password": SECRET, "form": form})
    assert result.status == "failed"
    failed = next(e for e in store.events(result.run_id) if e["type"] == "tool_failed")
    message = failed["data"]["message"]  # the rest of the message stays readable
    assert message.startswith("login refused for password ") and message.strip("'\"b").endswith(REDACTED), message
    store.close()
    raw = b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists())
    for name, text in FORMS.items():
        assert text.encode() not in raw, f"the {name} form of the secret is in the database files"
