"""Tables of the run store (SQLAlchemy Core) and in-place upgrades of older schemas.

Version 1: ``flowctl_meta``, ``flowctl_definitions``, ``flowctl_runs``, ``flowctl_events``,
``flowctl_steps``, ``flowctl_reviews``, ``flowctl_gate_log``. Times are epoch seconds (float).

Version 2 (workers, see :mod:`flowctl.workers.worker`): runs gain ``queue``, ``priority``, ``lease_until``
(epoch seconds on the **database** clock; NULL when no worker holds the run) and ``fence`` (the
fencing token: +1 on every claim); events gain ``fence`` (the token of the commit that wrote
them, NULL for writers without a lease); new tables ``flowctl_workers`` (live workers and their
heartbeats) and ``flowctl_limits`` (store-wide concurrency limits per flow and per queue).

Version 3: runs gain ``cancel_requested`` (JSON ``{by, compensate, at}``): ``flowctl cancel`` of a
run a live worker holds records the request there, and that worker cancels the run at its next
checkpoint.

Version 4: runs gain ``seal`` (:func:`flowctl.store.audit.run_seal`: sha256 of the row's status, error, identity (digest,
flow, parent, input, params, output) and
checkpoint bound to the head of its event chain, written by every commit in the same statement);
the upgrade seals every run that has not ended as it stands, so it can go on.

Version 5 (issue 17: history does not slow the present): indexes only, no new column. Runs gain
``(created_at, id)`` (all runs, and top-level runs: partial on ``parent_id IS NULL``), ``(status,
created_at, id)``, ``(flow, created_at, id)`` and ``(parent_id, created_at, id)`` (replacing the
single-column ``status``, ``flow`` and ``parent_id`` indexes), ``(status, available_at)`` (the
due reviews ``flowctl run`` fires) and, on
PostgreSQL, ``id COLLATE "C"`` (run-id prefix lookups as an index range whatever the database's
collation); the gate log gains ``(tool, at)``, ``(tool, flow, at)`` and ``(tool, run_id, at)``
(replacing ``at``): the rate and dedupe counts. The upgrade also gives a paused review written
before version 2 its due time.

Version 7 (issue 17, target 2: the lean durable step): events gain ``n_events``. A commit's
events are stored as one packed row (``type`` ``packed``, keyed by the ``seq`` of its last event,
``data`` the text :func:`flowctl.store.audit.pack_text` makes, hashed once and chained to the
previous row); ``n_events`` is the number of events in it, NULL for the rows of one event each that
older versions wrote, which stay as they are (a run's chain may hold both). Readers give the same
event dicts for both (:func:`flowctl.store.records.stored_events`).

Version 8 (issue 21: events across runs, ``flowctl events``): indexes only. Events gain
``ix_flowctl_events_ts`` ``(ts, run_id, seq)``: a time range across all runs in commit order (a
packed row's ``ts`` is its last event's, so every row holding an event since a time is in the
range), the index :func:`flowctl.store.query.query_events` and ``flowctl policy report`` read. It also holds a new table, ``flowctl_pruned``
(:mod:`flowctl.store.prune`): one row per range of a finished run's event rows that ``flowctl prune`` moved to
an archive, with the hash the chain had before the range (``prev_hash``) and at its end (``hash``), so the
events left in the store still verify (:func:`upgrade_8`: nothing to change in existing rows).

Version 9 (issue 17 target 4d, issue 18 and 21's ``stats``): a new table
``flowctl_run_summaries`` ``(run_id, last_seq, facts)``: the facts ``flowctl stats`` counts of a run
that has ended (:mod:`flowctl.store.summary`), written after the commit that ends it; a summary
whose ``last_seq`` is not the run's is stale and not used. No column of an older table changes;
runs that ended before the upgrade have none (``stats`` reads their events).

Version 10 (issue 20, pause at the next checkpoint): runs gain ``pause_requested`` (JSON ``{by,
reason, at}``, NULL when none): ``flowctl pause`` records the request there, every per-step commit
returns it (``RETURNING``: no read of its own), and the run pauses at that checkpoint
(:mod:`flowctl.engine.pause`). Not part of the run's seal, as ``cancel_requested`` is not.

Version 11 (the store-wide ledger, :mod:`flowctl.store.ledger`): new tables ``flowctl_ledger`` (one
chained row per run start, run end, prune and, once, per run the upgrade found) and
``flowctl_ledger_head`` (its last ``(n, hash)``, one row). :func:`schema_11` adopts every existing
run with its head as it stands.

Version 12 (issue 17 target 4d: ``stats`` of the latest runs in a few milliseconds): run summaries
gain ``figures`` (JSON text, NULL in a summary written before): the run's facts folded as ``stats``
adds them up (:func:`flowctl.store.summary.figures_of`), written with the facts in the commit that
ends the run. :func:`schema_12` adds the column; older summaries have their figures folded from
their facts as they are read.

:func:`upgrade` adds what is missing to a version-1 to 11 store in place.
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
    sa.Column("flow", sa.String(200), nullable=False),
    sa.Column("flow_version", sa.String(40)),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("parent_id", sa.String(40)),
    sa.Column("status", sa.String(16), nullable=False),
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
    # version 2: scale-out
    sa.Column("queue", sa.String(100), nullable=False, default="default", server_default="default"),
    sa.Column("priority", sa.Integer, nullable=False, default=0, server_default="0"),
    sa.Column("lease_until", sa.Float),
    sa.Column("fence", sa.Integer, nullable=False, default=0, server_default="0"),
    # version 3: cancel requests
    sa.Column("cancel_requested", sa.Text),
    # version 4: the seal of status, error and cursor (flowctl.store.audit.run_seal)
    sa.Column("seal", sa.String(64)),
    # version 8: pause requests (flowctl.engine.pause)
    sa.Column("pause_requested", sa.Text),
)

#: The two branches of a claim: due runs (queued, waiting, paused with a review deadline) and
#: running runs whose lease expired. Partial indexes on PostgreSQL and SQLite alike.
RUN_INDEXES = (
    sa.Index("ix_flowctl_runs_due", runs.c.priority.desc(), runs.c.available_at,
             postgresql_where=runs.c.status.in_(("queued", "waiting", "paused")),
             sqlite_where=runs.c.status.in_(("queued", "waiting", "paused"))),
    sa.Index("ix_flowctl_runs_lease", runs.c.lease_until,
             postgresql_where=runs.c.status == "running", sqlite_where=runs.c.status == "running"),
    sa.Index("ix_flowctl_runs_owner", runs.c.owner),
)

#: Version 5: listings newest first (``flowctl runs``, ``stats``), due reviews, id prefixes.
HISTORY_INDEXES = (
    sa.Index("ix_flowctl_runs_created", runs.c.created_at, runs.c.id),
    sa.Index("ix_flowctl_runs_top_created", runs.c.created_at, runs.c.id,
             postgresql_where=runs.c.parent_id.is_(None), sqlite_where=runs.c.parent_id.is_(None)),
    sa.Index("ix_flowctl_runs_status_created", runs.c.status, runs.c.created_at, runs.c.id),
    sa.Index("ix_flowctl_runs_flow_created", runs.c.flow, runs.c.created_at, runs.c.id),
    sa.Index("ix_flowctl_runs_parent_created", runs.c.parent_id, runs.c.created_at, runs.c.id),
    sa.Index("ix_flowctl_runs_status_due", runs.c.status, runs.c.available_at),
    sa.Index("ix_flowctl_runs_id_c", runs.c.id.collate("C")).ddl_if(dialect="postgresql"),
)
#: Indexes of versions 1-4 that version 5 replaces (a prefix of a new one, or unused).
DROPPED_INDEXES = ("ix_flowctl_runs_status", "ix_flowctl_runs_flow", "ix_flowctl_runs_parent_id", "ix_flowctl_gate_log_at")

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
    sa.Column("fence", sa.Integer),  # version 2
    sa.Column("n_events", sa.Integer),  # version 7: events in a packed row (NULL: one event, not packed)
)
#: Version 8: events across runs by time (flowctl.store.query), in commit order.
EVENT_INDEXES = (
    sa.Index("ix_flowctl_events_ts", events.c.ts, events.c.run_id, events.c.seq),
)
#: The version that indexes events by time across runs.
EVENTS_BY_TIME_VERSION = 8

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
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("tool", sa.String(200), nullable=False),
    sa.Column("flow", sa.String(200), nullable=False),
    sa.Column("run_id", sa.String(40), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
)
#: Version 5: the gate's counts (flowctl.store.counters) per function, per flow or run, since a time.
GATE_INDEXES = (
    sa.Index("ix_flowctl_gate_log_tool_at", gate_log.c.tool, gate_log.c.at),
    sa.Index("ix_flowctl_gate_log_tool_flow_at", gate_log.c.tool, gate_log.c.flow, gate_log.c.at),
    sa.Index("ix_flowctl_gate_log_tool_run_at", gate_log.c.tool, gate_log.c.run_id, gate_log.c.at),
)

#: Version 8: what ``flowctl prune`` removed of a run (:mod:`flowctl.store.prune`): events
#: ``first_seq``..``last_seq`` (whole stored rows, ``n_rows`` of them holding ``n_events``) are in the
#: archive file ``archive`` (its name; ``archive_sha256`` of its bytes); ``prev_hash`` and ``hash`` are
#: the chain's hash before the range and the hash of its last row: the head the store keeps.
pruned = sa.Table(
    "flowctl_pruned", metadata,
    sa.Column("run_id", sa.String(40), primary_key=True),
    sa.Column("first_seq", sa.Integer, primary_key=True),
    sa.Column("last_seq", sa.Integer, nullable=False),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("n_rows", sa.Integer, nullable=False),
    sa.Column("n_events", sa.Integer, nullable=False),
    sa.Column("archive", sa.String(200), nullable=False),
    sa.Column("archive_sha256", sa.String(64), nullable=False),
    sa.Column("pruned_at", sa.Float, nullable=False),
)

#: Version 9: the facts ``flowctl stats`` counts of an ended run (flowctl.store.summary): JSON text.
run_summaries = sa.Table(
    "flowctl_run_summaries", metadata,
    sa.Column("run_id", sa.String(40), primary_key=True),
    sa.Column("last_seq", sa.Integer, nullable=False),  # the run's last_seq when it was written
    sa.Column("facts", sa.Text, nullable=False),
    sa.Column("figures", sa.Text),  # version 12: the facts folded (flowctl.store.summary.figures_of)
)

#: Version 11: the ledger of runs (flowctl.store.ledger): which runs exist, hash-chained.
ledger = sa.Table(
    "flowctl_ledger", metadata,
    sa.Column("n", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("run_id", sa.String(40), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),            # start | end | prune | adopt
    sa.Column("run_head_seq", sa.Integer, nullable=False),
    sa.Column("run_head_hash", sa.String(64), nullable=False),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)
ledger_head = sa.Table(
    "flowctl_ledger_head", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),  # always 1
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
)

workers = sa.Table(
    "flowctl_workers", metadata,
    sa.Column("id", sa.String(200), primary_key=True),          # host:pid, as runs.owner
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("queues", sa.Text),                               # JSON list, or null for every queue
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("lease_s", sa.Float, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),         # running | stopping | stopped
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),        # database clock
    sa.Column("runs_done", sa.Integer, nullable=False, default=0, server_default="0"),
)

limits = sa.Table(
    "flowctl_limits", metadata,
    sa.Column("scope", sa.String(16), primary_key=True),        # flow | queue
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("max_running", sa.Integer, nullable=False),
)

# Columns added by version 2, as (table, column, DDL type and default).
_V2_COLUMNS = (
    ("flowctl_runs", "queue", "VARCHAR(100) NOT NULL DEFAULT 'default'"),
    ("flowctl_runs", "priority", "INTEGER NOT NULL DEFAULT 0"),
    ("flowctl_runs", "lease_until", "FLOAT"),
    ("flowctl_runs", "fence", "INTEGER NOT NULL DEFAULT 0"),
    ("flowctl_events", "fence", "INTEGER"),
)
_V3_COLUMNS = (
    ("flowctl_runs", "cancel_requested", "TEXT"),
)
_V4_COLUMNS = (
    ("flowctl_runs", "seal", "VARCHAR(64)"),
)
#: The version that packs a commit's events in one row (self-contained: its own column and check).
PACKED_VERSION = 7
_PACKED_COLUMNS = (
    ("flowctl_events", "n_events", "INTEGER"),
)


#: The version that adds pause requests (self-contained: its own column and function).
PAUSE_VERSION = 10


def upgrade(conn, from_version: int) -> None:
    """Bring a store at ``from_version`` up to the current schema, in place, inside the caller's
    transaction (new tables were already created by ``create_all``). Safe to repeat."""
    present = {(t, c["name"]) for t in ("flowctl_runs", "flowctl_events")
               for c in sa.inspect(conn).get_columns(t)}
    if from_version < 4 and ("flowctl_runs", "seal") in present:
        # The upgrade to 4 seals live runs as they stand, trusting them. A store that already has
        # the seal column is version 4 or later whatever its version row says: set back, the row
        # would turn that trust into a way to re-seal runs edited in the store.
        from flowctl.errors import RecordTampered

        raise RecordTampered(f"the store's version row says schema {from_version}, but its runs already have the seal "
                             "column of schema 4: the row was set back, and upgrading would re-seal every live run as "
                             "it stands; the store is left as it is",
                             hint="restore the store from a backup (flowctl audit verify RUN checks each run)")
    added = ((_V2_COLUMNS if from_version < 2 else ()) + (_V3_COLUMNS if from_version < 3 else ())
             + (_V4_COLUMNS if from_version < 4 else ()) + (_PACKED_COLUMNS if from_version < PACKED_VERSION else ()))
    for table, column, ddl in added:
        if (table, column) not in present:
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}")
    if from_version < 2:
        for index in RUN_INDEXES:
            index.create(conn, checkfirst=True)
    if from_version < 4:
        _seal_live_runs(conn)
    if from_version < 8:
        upgrade_8(conn)
    if from_version < 5:
        for name in DROPPED_INDEXES:
            conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
        for index in HISTORY_INDEXES + GATE_INDEXES:
            index.create(conn, checkfirst=True)
        _due_paused_reviews(conn)
    if from_version < EVENTS_BY_TIME_VERSION:
        upgrade_events_by_time(conn)
    _upgrade_run_summaries(conn, from_version)
    if from_version < PAUSE_VERSION:
        schema_10(conn, present)
    if from_version < LEDGER_VERSION:
        schema_11(conn)
    if from_version < FIGURES_VERSION:
        schema_12(conn)


def upgrade_events_by_time(conn) -> None:
    """Schema 8: the index of events by time across runs (:data:`EVENT_INDEXES`). On a large
    store this reads every event row once (PostgreSQL: about a second per million rows)."""
    for index in EVENT_INDEXES:
        index.create(conn, checkfirst=True)


def upgrade_8(conn) -> None:
    """Schema 8 (retention): the table ``flowctl_pruned``. Safe to repeat; no existing row changes
    (nothing was pruned before it existed)."""
    pruned.create(conn, checkfirst=True)


#: The version that keeps ended runs' stats facts (flowctl_run_summaries).
SUMMARIES_VERSION = 9


def _upgrade_run_summaries(conn, from_version: int) -> None:
    """Schema 9: ``flowctl_run_summaries``, created by ``create_all`` before :func:`upgrade` runs
    (checked here so the step stands alone). Runs that ended before it keep no summary: ``stats``
    reads their events, as it did."""
    if from_version < SUMMARIES_VERSION:
        run_summaries.create(conn, checkfirst=True)


def schema_10(conn, present: set) -> None:
    """Version 10: runs gain ``pause_requested`` (``present``: the ``(table, column)`` pairs there
    already; a repeated upgrade adds nothing)."""
    if ("flowctl_runs", "pause_requested") not in present:
        conn.exec_driver_sql("ALTER TABLE flowctl_runs ADD COLUMN pause_requested TEXT")


#: The version that keeps the store-wide ledger of runs.
LEDGER_VERSION = 11


def schema_11(conn) -> None:
    """Version 11: the ledger tables, its head row, and an ``adopt`` row for every run already in
    the store (:func:`flowctl.store.ledger.adopt`; a new store: the head row only). Safe to repeat."""
    from flowctl.store.ledger import adopt

    ledger.create(conn, checkfirst=True)
    ledger_head.create(conn, checkfirst=True)
    adopt(conn, conn.dialect.name == "postgresql")


#: The version whose run summaries keep their figures.
FIGURES_VERSION = 12


def schema_12(conn) -> None:
    """Version 12: run summaries gain ``figures`` (NULL in every summary already there: those are
    folded from their facts as ``stats`` reads them). Safe to repeat."""
    present = {c["name"] for c in sa.inspect(conn).get_columns("flowctl_run_summaries")}
    if "figures" not in present:
        conn.exec_driver_sql("ALTER TABLE flowctl_run_summaries ADD COLUMN figures TEXT")


def _seal_live_runs(conn) -> None:
    """Seal every run that has not ended, as it stands (the upgrade to version 4 trusts the store
    it upgrades; from then on a change outside flowctl is detected)."""
    import json

    from flowctl.store.audit import encode_data, row_identity, run_seal

    def load(text):
        return None if text is None else json.loads(text)

    r = runs
    rows = conn.execute(sa.select(r.c.id, r.c.last_seq, r.c.last_hash, r.c.status, r.c.error, r.c.cursor,
                                  r.c.digest, r.c.flow, r.c.parent_id, r.c.input, r.c.params, r.c.output)
                        .where(r.c.status.notin_(("succeeded", "failed", "cancelled")))).all()
    for run_id, last_seq, last_hash, status, error, cursor, digest, flow, parent_id, inp, params, output in rows:
        try:
            identity = row_identity({"digest": digest, "flow": flow, "parent_id": parent_id, "input": load(inp),
                                     "params": load(params), "output": load(output)})
            value = run_seal(run_id, last_seq, last_hash, status, load(error), encode_data(load(cursor)), identity)
        except ValueError:
            continue  # a corrupt row stays unsealed: resuming it is refused, audit verify names it
        conn.execute(r.update().where(r.c.id == run_id).values(seal=value))


def _due_paused_reviews(conn) -> None:
    """Give each paused review without a due time the one its checkpoint names (its unsent
    reminder, else its deadline; see :func:`flowctl.store.records.review_due_at`): due reviews
    are found through ``available_at`` from version 5 on. Not part of the run's seal."""
    import json

    from flowctl.store.records import review_due_at

    r = runs
    rows = conn.execute(sa.select(r.c.id, r.c.cursor).where(r.c.status == "paused", r.c.available_at.is_(None))).all()
    for run_id, cursor in rows:
        try:
            due = review_due_at((json.loads(cursor) or {}).get("pending") or {}) if cursor else None
        except (ValueError, AttributeError):
            continue  # sealed or corrupt: found by a worker's claim or audit verify, as before
        if due is not None:
            conn.execute(r.update().where(r.c.id == run_id).values(available_at=due))
