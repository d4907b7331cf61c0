"""What a run store offers: :class:`Store` (every store) and :class:`QueueStore` (shared stores).

Two kinds implement them:

=====================================  =========  ==============  ==============================
store                                  ``Store``  ``QueueStore``  ``durable``
=====================================  =========  ==============  ==============================
:class:`flowctl.store.core.SqlStore`   yes        yes             True (SQLite file, PostgreSQL)
:class:`flowctl.store.memory.MemoryStore`  yes    **no**          False (``--db memory``)
=====================================  =========  ==============  ==============================

Callers ask ``isinstance(store, QueueStore)`` before using workers, claims or leases (the
``flowctl worker`` and ``workers`` commands refuse the memory store), and ``store.durable`` before
work that only makes sense for kept data (``secrets rotate``). Both protocols are
:func:`typing.runtime_checkable`: ``isinstance`` checks that the methods exist, not their
signatures.

Shapes: a *run* is the dict described in :mod:`flowctl.store.core` (JSON columns parsed; sealed
fields opened); an *event* ``{run_id, seq, ts, type, state, attempt, data, data_json, prev_hash,
hash, fence}`` (and ``packed: [first seq, last seq]`` when it was stored in one row with the
other events of its commit, :func:`flowctl.store.audit.seal_commit`); a *step record* ``{run_id, step_no, attempt, state, tool, idempotency_key, status,
input, output, started_at, finished_at}``. Times are epoch seconds (float); durations and leases
seconds. Errors: :class:`~flowctl.errors.RunNotFound`, :class:`~flowctl.errors.RunConflict` (and
its subclass :class:`~flowctl.store.records.LeaseLost`), :class:`~flowctl.errors.StoreError` (the
database failed; nothing of the write was kept).
"""
from __future__ import annotations

from typing import Any, Iterable, Protocol, runtime_checkable


@runtime_checkable
class Store(Protocol):
    """The store every run is kept in: runs, events, step records, definition snapshots, the gate log."""

    #: The address as given (``memory`` for the in-memory store).
    url: str
    #: True if runs outlive the process (an SQL store); False for ``MemoryStore``.
    durable: bool

    def close(self) -> None:
        """Release connections. The store is not used afterwards."""

    def now(self) -> float:
        """The store's clock, epoch seconds: the database's (leases are measured with it), or this
        process's for the memory store."""

    # -- secrets
    def keyring(self, *, create: bool = True) -> Any:
        """The :class:`~flowctl.store.keyring.Keyring` sealing sensitive run fields, or None (memory
        store: nothing leaves the process). ``create=False``: never generate a key file. Raises
        :class:`~flowctl.errors.SecretKeyError`."""

    def rekey(self) -> dict:
        """Re-seal every sealed field under the first key: ``{"resealed": n, "current": m}``."""

    def drop_secrets(self, run_id: str, expect_seq: int, fields: dict) -> bool:
        """Overwrite a *finished* run's ``fields`` with their redacted form if it is still at
        ``expect_seq``. True if written."""

    # -- definitions
    def save_definition(self, digest: str, files: dict) -> None:
        """Keep the definition snapshot ``digest`` (``{relative path: bytes}``); written once."""

    def load_definition(self, digest: str) -> dict:
        """``{relative path: bytes}`` of snapshot ``digest``. Raises :class:`StoreError` if absent."""

    # -- runs
    def create_run(self, run: dict, events: list, steps: list = (), *, lease: float | None = None) -> Any:
        """Insert a run with its first events and step records. ``lease`` (seconds): the run starts
        leased by ``run["owner"]``. Returns the run's fencing token (SQL store)."""

    def commit(self, run_id: str, expect_seq: int, run: dict, events: list = (), steps: list = (), *,
               fence: int | None = None, lease: float | None = None, unleased: bool = False) -> dict | None:
        """Append ``events``, upsert ``steps`` and update the run row with ``run``, all or nothing,
        if the run is still at ``expect_seq`` (and, with ``fence``, still leased by that token).
        Returns the run's standing pause request (``{by, reason, at}``) or None, from the same write.
        Raises :class:`RunConflict` / :class:`LeaseLost`, :class:`StoreError`."""

    def get_run(self, run_id: str, *, exact: bool = False) -> dict:
        """The run with this id, or (unless ``exact``) the one run whose id starts with this
        prefix (4 characters or more). Raises :class:`RunNotFound` (none, several, a malformed id)."""

    def list_runs(self, status: str | None = None, flow: str | None = None, limit: int = 50,
                  parent_id: str | None = None, top_level: bool = False, *, due_by: float | None = None) -> list:
        """Runs newest first (``created_at``, then ``id``), at most ``limit`` (0: all), filtered by
        ``status``, ``flow``, ``parent_id``; ``top_level``: no child runs; ``due_by`` (epoch
        seconds): only runs due by then (``available_at``, a paused review's reminder or deadline)."""

    def events(self, run_id: str) -> list:
        """The run's events in ``seq`` order (``[]`` for an unknown run)."""

    def events_page(self, run_id: str, after_seq: int, limit: int) -> list:
        """At most ``limit`` of the run's events with ``seq > after_seq``, in ``seq`` order (a long
        run's log read in batches: :func:`flowctl.store.events.iter_events`)."""

    def steps(self, run_id: str) -> list:
        """The run's step records ordered by ``(step_no, attempt)``."""

    def stats_rows(self, limit: int = 1000, since: float | None = None, flow: str | None = None,
                   top_level: bool = True) -> tuple:
        """What ``flowctl stats`` counts: ``(runs, facts)``, ``runs`` the latest ``limit`` runs
        (``[{id, status, steps, created_at, flow, last_seq}]`` newest first, created at or after
        ``since``, of ``flow``, top-level only if ``top_level``), ``facts`` ``[(run_id, fact)]`` of
        their events (:mod:`flowctl.store.summary`: a list ``[type, ts, state, name, *values]``),
        each run's in ``seq`` order. See :func:`flowctl.store.history.stats`."""

    def stats_figures(self, limit: int = 1000, since: float | None = None, flow: str | None = None,
                      top_level: bool = True) -> tuple:
        """:meth:`stats_rows` with each run's facts folded: ``(runs, [(run_id, figures)])``, one
        entry per run in the order of ``runs`` (:func:`flowctl.store.summary.figures_of`: ``[tools,
        invoked, other]``), kept with an ended run's summary (schema 12) so that they are not folded
        again. See :func:`flowctl.store.history.stats`."""

    # -- cancel requests and parents (a no-op or empty answer where no worker can hold a run)
    def request_cancel(self, run_id: str, request: dict) -> bool:
        """Ask the worker holding ``run_id`` to cancel it (``request``: ``{by, compensate}``). True if
        a live worker lease holds it; False: the caller cancels it itself."""

    def cancel_requests(self, run_ids: Iterable[str]) -> dict:
        """``{run_id: request}`` for those of ``run_ids`` someone asked to cancel."""

    def request_pause(self, run_id: str, request: dict) -> tuple:
        """Record a pause request (``{by, reason}``) unless one stands or the run ended: ``(standing
        request or None when ended, whether it is this one)``."""

    def nudge(self, run_id: str) -> None:
        """Make the waiting (or running) parent ``run_id`` due now (a child of it ended)."""

    # -- the policy gate's counters (flowctl.store.counters)
    def gate_record(self, entry: dict) -> None:
        """Record one gated call: ``{at, tool, flow, run_id, digest}``."""

    def gate_count(self, column: str, value: str, tool: str, since: float) -> int:
        """Recorded calls of ``tool`` since ``since`` whose ``column`` (flow, run_id) is ``value``."""

    def gate_seen(self, run_id: str, tool: str, digest: str, since: float) -> bool:
        """A call of ``tool`` by ``run_id`` with input digest ``digest`` was recorded since ``since``."""

    def gate_admit(self, tools, limits: list, entry: dict | None = None):
        """Check ``limits`` and record ``entry`` atomically: ``None`` when every limit holds, else
        ``(index of the failing limit, calls counted)`` (see :func:`flowctl.store.counters.admit_sql`)."""


@runtime_checkable
class QueueStore(Store, Protocol):
    """A store workers share (the SQL store only): claims, leases, the worker registry, limits.
    All times on the **database** clock."""

    def claim(self, owner: str, n: int, lease: float, queues=None) -> list:
        """Take up to ``n`` due or orphaned runs for ``owner``, leased for ``lease`` seconds:
        ``[{id, fence, lease_until, prev_status, prev_owner}]``."""

    def cancel_request_at_end(self, run_id: str) -> dict | None:
        """The cancel request (``{by, compensate, at}``) or None that ``run_id``'s row held when the
        commit ending it was written (that commit returned it: no read when it took the per-step path)."""

    def acquire(self, run_id: str, expect_seq: int, owner: str, lease: float) -> tuple:
        """Lease one unleased run by id: ``(fence, parent_id)``. Raises :class:`RunConflict`."""

    def renew(self, owner: str, held: dict, lease: float) -> set:
        """Extend the leases of ``{run_id: fence}`` still held; returns the ids renewed."""

    def release(self, run_id: str, fence: int, *, status: str | None = None, delay: float = 0.0,
                available_at: Any = ...) -> bool:
        """Give a held run back (``status`` None: its lease ends now plus ``delay``; else it returns
        to ``status``, due after ``delay`` or at ``available_at``). True if it was held."""

    def next_due(self, queues=None) -> float | None:
        """Seconds until the next run becomes claimable; None if none will by time."""

    def register_worker(self, worker_id: str, *, host: str, pid: int, queues, concurrency: int,
                        lease: float) -> None:
        """Record a starting worker (``worker_id`` is its ``host:pid``)."""

    def worker_heartbeat(self, worker_id: str, *, status: str | None = None, runs_done: int | None = None) -> None:
        """A worker's heartbeat, with its status (running, stopping, stopped) and runs done."""

    def list_workers(self, *, live_only: bool = True) -> list:
        """Workers ``[{id, host, pid, queues, concurrency, lease_s, status, started_at,
        heartbeat_at, runs_done, age_s, live, runs: [{id, flow, lease_until}]}]``."""

    def set_limit(self, scope: str, name: str, max_running: int | None) -> None:
        """At most ``max_running`` runs of flow / queue ``name`` held at once (None removes it)."""

    def limits(self) -> dict:
        """``{(scope, name): max_running}``."""

    def listen_dsn(self) -> str | None:
        """A libpq address for ``LISTEN`` (PostgreSQL), else None."""
