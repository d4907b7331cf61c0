"""The demo shop database: a local SQLite file the example tools read and write.

Path: ``$FLOWCTL_SHOP_DB``, default ``.flowctl/shop.db`` relative to the current directory.
:func:`connect` creates and seeds the file on first use, so ``flowctl run order_return`` works in
a fresh checkout; :func:`seed` (or ``python -m shop_tools.db seed [PATH]``) resets it.

Money is stored in integer cents (``*_cents``) and shown to flows in major units (``49.9``).
Times are ISO-8601 UTC strings (``2024-05-01T12:00:00Z``); seeded dates are relative to now.

Tables::

    orders           order_id, customer_email, category, amount_cents, currency, status,
                     carrier, created_at, delivered_at
    payments         payment_id, order_id, method, card_number, amount_cents, currency,
                     refunded_cents, status (captured | partially_refunded | refunded)
    shipments        order_id, carrier, tracking_no, status, eta, lookups, visible_after
                     (the carrier reports the parcel only once lookups > visible_after)
    return_policies  category, window_days, restocking_fee_pct, service_latency_ms
    refunds          refund_id, idempotency_key UNIQUE, order_id, payment_id, amount_cents,
                     currency, reason, status (refunded | cancelled), created_at, cancelled_at
    outbox           outbox_id, idempotency_key UNIQUE, message_id, sender, recipients (JSON),
                     to_domain, subject, body, attachments (JSON), attachments_mb,
                     status (sent | recalled), created_at, recalled_at
    faults           tool, key, error, message, remaining (NULL = forever): injected failures

Seeded orders, one per path of ``order_return`` (see ``orchestration/examples/README.md``):

=======  =========================================================================
A-1001   delivered 5 days ago, 49.90 EUR, parcel found: refunds fine
A-1002   delivered, but the carrier never reports the parcel: escalates to a human
A-1003   delivered 60 days ago (30-day window): rejected, window expired
A-1004   899.00 EUR, over the refund policy's 500 limit: PolicyDenied, escalates
A-1005   the carrier reports the parcel only on the third lookup: refunds after re-checks
A-1006   furniture: the policy service is slow (5 s), the cached policy is used
A-1007   the carrier is down for the first lookup (ToolUnavailable): retried, refunds
A-1008   the card is closed: the gateway declines the refund, escalates to a human
A-1009   still in transit (not delivered): rejected
A-1010   paid in GBP, a currency the refund policy does not allow: escalates
=======  =========================================================================
"""
from __future__ import annotations

import os
import sqlite3
import sys
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

DEFAULT_PATH = ".flowctl/shop.db"

SCHEMA = """
CREATE TABLE orders (
    order_id       TEXT PRIMARY KEY,
    customer_email TEXT NOT NULL,
    category       TEXT NOT NULL,
    amount_cents   INTEGER NOT NULL,
    currency       TEXT NOT NULL,
    status         TEXT NOT NULL,            -- placed | shipped | delivered | cancelled
    carrier        TEXT NOT NULL,            -- dhl | ups | dpd | gls
    created_at     TEXT NOT NULL,
    delivered_at   TEXT
);
CREATE TABLE payments (
    payment_id     TEXT PRIMARY KEY,
    order_id       TEXT NOT NULL REFERENCES orders(order_id),
    method         TEXT NOT NULL,            -- card
    card_number    TEXT NOT NULL,            -- a test PAN; a real shop keeps a vault token
    amount_cents   INTEGER NOT NULL,
    currency       TEXT NOT NULL,
    refunded_cents INTEGER NOT NULL DEFAULT 0,
    status         TEXT NOT NULL             -- captured | partially_refunded | refunded
);
CREATE TABLE shipments (
    order_id       TEXT PRIMARY KEY REFERENCES orders(order_id),
    carrier        TEXT NOT NULL,
    tracking_no    TEXT NOT NULL,
    status         TEXT NOT NULL,            -- in_transit | delivered | returned
    eta            TEXT,
    lookups        INTEGER NOT NULL DEFAULT 0,
    visible_after  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE return_policies (
    category           TEXT PRIMARY KEY,
    window_days        INTEGER NOT NULL,
    restocking_fee_pct REAL NOT NULL DEFAULT 0,
    service_latency_ms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE refunds (
    refund_id       TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    order_id        TEXT NOT NULL,
    payment_id      TEXT NOT NULL REFERENCES payments(payment_id),
    amount_cents    INTEGER NOT NULL,
    currency        TEXT NOT NULL,
    reason          TEXT,
    status          TEXT NOT NULL,           -- refunded | cancelled
    created_at      TEXT NOT NULL,
    cancelled_at    TEXT
);
CREATE TABLE outbox (
    outbox_id       INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL UNIQUE,
    message_id      TEXT NOT NULL UNIQUE,
    sender          TEXT NOT NULL,
    recipients      TEXT NOT NULL,           -- JSON list of addresses
    to_domain       TEXT NOT NULL,
    subject         TEXT NOT NULL,
    body            TEXT NOT NULL,
    attachments     TEXT NOT NULL,           -- JSON list of {filename, content_type, content, size_mb}
    attachments_mb  REAL NOT NULL,
    status          TEXT NOT NULL,           -- sent | recalled
    created_at      TEXT NOT NULL,
    recalled_at     TEXT
);
CREATE TABLE faults (
    tool      TEXT NOT NULL,
    key       TEXT NOT NULL,                 -- what the tool was called for (an order id …)
    error     TEXT NOT NULL,                 -- ToolUnavailable | ToolThrottled | an error_type
    message   TEXT NOT NULL,
    remaining INTEGER,                       -- failures left; NULL = fail every time
    PRIMARY KEY (tool, key)
);
"""

POLICIES = [  # category, window_days, restocking_fee_pct, service_latency_ms
    ("apparel", 30, 0.0, 0),
    ("electronics", 14, 0.0, 0),
    ("furniture", 30, 10.0, 5000),
]

# order_id, category, amount, currency, status, carrier, created (days ago), delivered (days ago)
ORDERS = [
    ("A-1001", "apparel", 49.90, "EUR", "delivered", "dhl", 9, 5),
    ("A-1002", "apparel", 89.00, "EUR", "delivered", "ups", 8, 4),
    ("A-1003", "apparel", 35.50, "EUR", "delivered", "dhl", 65, 60),
    ("A-1004", "electronics", 899.00, "EUR", "delivered", "dpd", 6, 3),
    ("A-1005", "apparel", 120.00, "USD", "delivered", "gls", 7, 2),
    ("A-1006", "furniture", 240.00, "EUR", "delivered", "dpd", 12, 6),
    ("A-1007", "electronics", 59.99, "USD", "delivered", "ups", 5, 1),
    ("A-1008", "apparel", 75.00, "EUR", "delivered", "dhl", 10, 4),
    ("A-1009", "apparel", 42.00, "EUR", "shipped", "gls", 2, None),
    ("A-1010", "apparel", 30.00, "GBP", "delivered", "dhl", 9, 5),
]

# order_id -> shipment status, eta (days from now), visible_after (lookups hidden)
SHIPMENTS = {
    "A-1001": ("delivered", None, 0),
    "A-1003": ("delivered", None, 0),
    "A-1004": ("delivered", None, 0),
    "A-1005": ("delivered", None, 2),
    "A-1006": ("delivered", None, 0),
    "A-1007": ("delivered", None, 0),
    "A-1008": ("delivered", None, 0),
    "A-1009": ("in_transit", 2, 0),
    "A-1010": ("delivered", None, 0),
}  # A-1002 has none: the carrier never heard of it

CARDS = {"A-1008": "4000000000000341"}  # a closed card; everyone else pays with 4242…
FAULTS = [  # tool, key, error, message, remaining
    ("get_logistics", "A-1007", "ToolUnavailable", "carrier API ups: 503 Service Unavailable", 1),
    ("refund_payment", "A-1008", "Payments.CardDeclined", "the card account is closed", None),
]


def db_path() -> Path:
    """The shop database file: ``$FLOWCTL_SHOP_DB`` or ``.flowctl/shop.db`` (relative to cwd)."""
    return Path(os.environ.get("FLOWCTL_SHOP_DB") or DEFAULT_PATH)


def connect(path: str | os.PathLike | None = None) -> sqlite3.Connection:
    """Open the shop database (seeding it first if the file does not exist yet).

    Rows come back as :class:`sqlite3.Row`. Use :func:`immediate` for a write transaction and
    close the connection when done (tools open one per call).
    """
    target = Path(path) if path is not None else db_path()
    if not target.exists():
        seed(target)
    conn = sqlite3.connect(target, timeout=10)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


@contextmanager
def immediate(conn: sqlite3.Connection):
    """A write transaction that takes the database lock at once (``BEGIN IMMEDIATE``), so a
    read-then-write (an idempotency check, a counter) cannot interleave with another process."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def to_cents(amount: float) -> int:
    return int(round(amount * 100))


def from_cents(cents: int) -> float:
    return round(cents / 100, 2)


def take_fault(conn: sqlite3.Connection, tool: str, key: str) -> None:
    """Raise the failure injected for ``(tool, key)`` in ``faults``, if any, using one up.

    ``ToolUnavailable``/``ToolThrottled`` raise those classes; any other name raises
    ``flowctl.ToolError(name, message)``. Commits the decrement before raising.
    """
    from flowctl import ToolError, ToolThrottled, ToolUnavailable

    with immediate(conn):
        row = conn.execute("SELECT error, message, remaining FROM faults WHERE tool = ? AND key = ?",
                           (tool, key)).fetchone()
        if row is None or row["remaining"] == 0:
            return
        if row["remaining"] is not None:
            conn.execute("UPDATE faults SET remaining = remaining - 1 WHERE tool = ? AND key = ?", (tool, key))
    if row["error"] == "ToolUnavailable":
        raise ToolUnavailable(row["message"])
    if row["error"] == "ToolThrottled":
        raise ToolThrottled(row["message"])
    raise ToolError(row["error"], row["message"])


def inject_fault(tool: str, key: str, error: str, message: str, remaining: int | None = 1,
                 path: str | os.PathLike | None = None) -> None:
    """Make ``tool`` fail for ``key`` the next ``remaining`` calls (``None``: every call)."""
    conn = connect(path)
    try:
        with conn:
            conn.execute("INSERT OR REPLACE INTO faults VALUES (?, ?, ?, ?, ?)", (tool, key, error, message, remaining))
    finally:
        conn.close()


def seed(path: str | os.PathLike | None = None) -> Path:
    """(Re)create the shop database at ``path`` (default :func:`db_path`) with the demo data."""
    target = Path(path) if path is not None else db_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    t0 = now()
    conn = sqlite3.connect(target)
    try:
        with conn:
            conn.executescript(SCHEMA)
            conn.executemany("INSERT INTO return_policies VALUES (?, ?, ?, ?)", POLICIES)
            for n, (oid, category, amount, currency, status, carrier, created, delivered) in enumerate(ORDERS):
                delivered_at = iso(t0 - timedelta(days=delivered)) if delivered is not None else None
                conn.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (oid, f"customer{n + 1}@mail.example", category, to_cents(amount), currency, status,
                              carrier, iso(t0 - timedelta(days=created)), delivered_at))
                conn.execute("INSERT INTO payments VALUES (?, ?, 'card', ?, ?, ?, 0, 'captured')",
                             (f"P-{oid[2:]}", oid, CARDS.get(oid, "4242424242424242"), to_cents(amount), currency))
                if oid in SHIPMENTS:
                    ship_status, eta_days, hidden = SHIPMENTS[oid]
                    eta = iso(t0 + timedelta(days=eta_days)) if eta_days is not None else None
                    conn.execute("INSERT INTO shipments VALUES (?, ?, ?, ?, ?, 0, ?)",
                                 (oid, carrier, f"{carrier.upper()}{oid[2:]}00042", ship_status, eta, hidden))
            conn.executemany("INSERT INTO faults VALUES (?, ?, ?, ?, ?)", FAULTS)
    finally:
        conn.close()
    return target


def main(argv: list[str]) -> int:
    """``python -m shop_tools.db seed [PATH]`` — (re)create and seed the shop database."""
    if not argv or argv[0] != "seed" or len(argv) > 2:
        print("usage: python -m shop_tools.db seed [PATH]   (default: $FLOWCTL_SHOP_DB or .flowctl/shop.db)",
              file=sys.stderr)
        return 2
    target = seed(argv[1] if len(argv) == 2 else None)
    conn = connect(target)
    try:
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("orders", "payments", "shipments", "return_policies", "faults")}
    finally:
        conn.close()
    print(f"seeded {target}: " + ", ".join(f"{n} {t}" for t, n in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
