"""``send_email`` — "sends" a message by writing it to the shop's ``outbox`` table, from which
the mail relay delivers it; ``verify_email`` and ``recall_email`` check and undo that.

``send_email`` input (``size_mb``/``attachments_mb`` in MiB)::

    {"message_ref": "run-…:send_report", "sender": "reports@shop.example",
     "to": ["finance@corp.example"], "to_domain": "corp.example", "recipient_count": 1,
     "subject": "…", "body": "…",
     "attachments": [{"filename": "x.csv", "content_type": "text/csv", "content": "…", "size_mb": 0.0002}],
     "attachments_mb": 0.0002}

output::

    {"message_id": "<…@shop.example>", "outbox_id": 1, "status": "sent", "recipients": 1,
     "sent_at": "…Z", "replayed": false}

``to_domain``, ``recipient_count`` and ``attachments_mb`` are what the ``outbound_messages``
policy judges, so the tool refuses a message that does not match them
(``Mail.RecipientOutsideDomain``, ``Mail.InvalidMessage``). The row is keyed by
``call.idempotency_key`` (UNIQUE): the same key never queues a second message.
Faults injected for ``("send_email", to_domain)`` fire before anything is written.

``verify_email`` — true when the message is in the outbox with status ``sent``.
``recall_email`` — marks it ``recalled`` (the relay drops it; idempotent).
"""
from __future__ import annotations

import json
import uuid

from flowctl import ToolError

from . import db


def send_email(input: dict, call) -> dict:
    key = getattr(call, "idempotency_key", None)
    if not key:
        raise ToolError("Mail.MissingIdempotencyKey", "a message without an idempotency key could be sent twice")
    _check(input)
    conn = db.connect()
    try:
        existing = _find(conn, key)
        if existing is not None:
            return _output(existing, replayed=True)
        db.take_fault(conn, "send_email", input["to_domain"])
        with db.immediate(conn):
            if _find(conn, key) is None:
                conn.execute(
                    """INSERT INTO outbox (idempotency_key, message_id, sender, recipients, to_domain, subject,
                                           body, attachments, attachments_mb, status, created_at)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'sent', ?)""",
                    (key, f"<{uuid.uuid4().hex}@shop.example>", input.get("sender", "reports@shop.example"),
                     json.dumps(input["to"]), input["to_domain"], input["subject"], input["body"],
                     json.dumps(input["attachments"]), input["attachments_mb"], db.iso(db.now())))
        return _output(_find(conn, key), replayed=False)
    finally:
        conn.close()


def verify_email(input: dict, output: dict | None, call) -> bool | dict:
    # output is None after a crash or a timeout (the answer never came): found by its idempotency
    # key, the sent message's output is handed back for the run to go on with
    conn = db.connect()
    try:
        row = _find(conn, call.idempotency_key)
        return _output(row, replayed=True) if row is not None and row["status"] == "sent" else False
    finally:
        conn.close()


def recall_email(input: dict, output: dict | None, call) -> None:
    conn = db.connect()
    try:
        with db.immediate(conn):
            conn.execute("UPDATE outbox SET status = 'recalled', recalled_at = ? WHERE idempotency_key = ? "
                         "AND status = 'sent'", (db.iso(db.now()), call.idempotency_key))
    finally:
        conn.close()


def _check(input: dict) -> None:
    domain = input["to_domain"].lower()
    outside = [a for a in input["to"] if a.rsplit("@", 1)[-1].lower() != domain]
    if outside:
        raise ToolError("Mail.RecipientOutsideDomain", f"{len(outside)} recipient(s) not in {domain}: {outside[0]}")
    if input["recipient_count"] != len(input["to"]):
        raise ToolError("Mail.InvalidMessage", f"recipient_count {input['recipient_count']} but {len(input['to'])} addresses")
    actual = sum(a.get("size_mb", 0) for a in input["attachments"])
    if input["attachments_mb"] + 1e-9 < actual:
        raise ToolError("Mail.InvalidMessage", f"attachments_mb {input['attachments_mb']} understates {actual:.6f} MiB")


def _find(conn, key: str):
    return conn.execute("SELECT * FROM outbox WHERE idempotency_key = ?", (key,)).fetchone()


def _output(row, replayed: bool) -> dict:
    return {"message_id": row["message_id"], "outbox_id": row["outbox_id"], "status": row["status"],
            "recipients": len(json.loads(row["recipients"])), "sent_at": row["created_at"], "replayed": replayed}
