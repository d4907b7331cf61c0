"""Tables of the run store (SQLAlchemy Core) and in-place upgrades of older schemas.

Version 1: ``flowctl_meta``, ``flowctl_definitions``, ``flowctl_runs``, ``flowctl_events``,
``flowctl_steps``, ``flowctl_reviews``, ``flowctl_gate_log``. Times are epoch seconds (float).
"""
from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

meta = sa.Table("flowctl_meta", metadata,
                sa.Column("key", sa.String(64), primary_key=True),
                sa.Column("value", sa.Text, nullable=False))

definitions = sa.Table("flowctl_definitions", metadata,
                       sa.Column("digest", sa.String(64), primary_key=True),
                       sa.Column("files", sa.Text, nullable=False))

runs = sa.Table(
    "flowctl_runs", metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("flow", sa.String(200), nullable=False, index=True),
    sa.Column("flow_version", sa.String(40)),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("parent_id", sa.String(40), index=True),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("input", sa.Text),
    sa.Column("params", sa.Text),
    sa.Column("output", sa.Text),
    sa.Column("error", sa.Text),
    sa.Column("cursor", sa.Text),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("available_at", sa.Float),
    sa.Column("owner", sa.String(200)),
    sa.Column("last_seq", sa.Integer, nullable=False, default=0),
    sa.Column("last_hash", sa.String(64), nullable=False, default=""),
    sa.Column("steps", sa.Integer, nullable=False, default=0),
)

events = sa.Table(
    "flowctl_events", metadata,
    sa.Column("run_id", sa.String(40), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("ts", sa.Float, nullable=False),
    sa.Column("type", sa.String(40), nullable=False),
    sa.Column("state", sa.String(200)),
    sa.Column("attempt", sa.Integer),
    sa.Column("data", sa.Text),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
)

steps = sa.Table(
    "flowctl_steps", metadata,
    sa.Column("run_id", sa.String(40), primary_key=True),
    sa.Column("step_no", sa.Integer, primary_key=True),
    sa.Column("attempt", sa.Integer, primary_key=True),
    sa.Column("state", sa.String(200), nullable=False),
    sa.Column("tool", sa.String(200)),
    sa.Column("idempotency_key", sa.String(500)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("input", sa.Text),
    sa.Column("output", sa.Text),
    sa.Column("started_at", sa.Float),
    sa.Column("finished_at", sa.Float),
)

reviews = sa.Table(
    "flowctl_reviews", metadata,
    sa.Column("run_id", sa.String(40), primary_key=True),
    sa.Column("step_no", sa.Integer, primary_key=True),
    sa.Column("state", sa.String(200), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("data", sa.Text),
    sa.Column("deadline", sa.Float),
    sa.Column("decided_at", sa.Float),
)

gate_log = sa.Table(
    "flowctl_gate_log", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False, index=True),
    sa.Column("tool", sa.String(200), nullable=False),
    sa.Column("flow", sa.String(200), nullable=False),
    sa.Column("run_id", sa.String(40), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
)


def upgrade(conn, from_version: int) -> None:
    """Bring a store at ``from_version`` up to the current schema (add columns, tables)."""
    # Version 1 is the first published schema; later versions add their steps here.
    return None
