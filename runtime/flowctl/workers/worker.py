"""Workers: many processes, on one host or many, driving the runs of one store.

``flowctl submit`` puts a run in the store as ``queued`` (its definition snapshot saved, its input
checked, exactly as ``flowctl run`` would start it) and returns. ``flowctl worker`` claims runs and
drives them until it is stopped. The store is the only coordinator (PostgreSQL for many hosts;
SQLite for several processes of one host); there is no broker.

**Claim.** :meth:`SqlStore.claim <flowctl.store.sql.SqlStore.claim>` takes a batch in one statement
from two branches — runs that are due (``queued``, ``waiting`` and ``paused`` runs with
``available_at <= now``: waits, retry delays and review deadlines are only due times) and
``running`` runs whose lease expired (their worker died or stalled) — with ``FOR UPDATE SKIP
LOCKED`` on PostgreSQL, marks them running for this worker with ``lease_until = now + lease`` and
increments their fencing token (``fence``). ``now`` is the database's clock, never a host's.

**Lease.** A heartbeat thread renews the leases of the runs this worker holds every ``lease/3``
seconds, so a long tool call keeps its run; each successful checkpoint extends it too. A run whose
renewal fails is lost: the worker stops driving it.

**Fencing.** Every write of a run this worker holds — checkpoint, events, status — goes through
:class:`LeasedStore`, which adds the worker's token: the store's update requires ``fence = token
AND lease_until >= now``. A worker that was paused or cut off past its lease therefore writes
nothing (zero rows; :class:`~flowctl.errors.LeaseLost`) and drops the run; the worker that claimed
it next continues from the last checkpoint, verifying a side effect that was in flight before it
repeats it with the same idempotency key. Child runs (parallel/map/subflow) created or continued
by a worker are leased and fenced the same way, so any worker can take them over.

**Wake-up.** On PostgreSQL a submit (and a released run) sends ``NOTIFY flowctl_runs``; idle
workers ``LISTEN`` and claim at once. Polling (``poll`` seconds, or sooner when the store says a
run becomes due) is the fallback and the only mechanism on SQLite.

**Stopping and cancelling.** SIGTERM (or Ctrl-C): no new claims; each running run stops at its
next checkpoint between steps (the runner checks :meth:`Worker.halt`, a flag, there: nothing is
raised out of a store write); its lease is released so another worker continues it at once; the
worker exits 0. A second signal exits at once. After SIGKILL the leases simply expire. Cancel
requests are polled every ``cancel_poll`` seconds (default 1 s; one indexed query of the runs
this worker holds), independent of the lease heartbeat: a request seen halts the run at its next
checkpoint, and the worker cancels it (compensating). A run that ends before its request was seen
gets a ``cancel_request_unseen`` event (who asked, when, how the run ended) appended to its log,
and its ``cancel_requested`` is cleared: nothing looks honoured that was not.

**Limits.** ``flowctl_limits`` holds store-wide caps per flow and per queue. A claim on
PostgreSQL first locks those rows (claimers take turns only when limits exist) and picks a run only
if the runs of its flow/queue held under live leases plus the ones it is taking stay within the
cap; on SQLite ``BEGIN IMMEDIATE`` already serialises claims.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from flowctl.engine import cancel as cancelling
from flowctl.engine import lifecycle
from flowctl.engine.engine import Engine
from flowctl.engine.launchers import QueueLauncher
from flowctl.errors import LeaseLost, RunConflict, UsageError, first_line
from flowctl.store.protocol import QueueStore
from flowctl.store.records import FINAL, review_due_at
from flowctl.store.url import safe_url
from flowctl.workers.leased import LeasedStore
from flowctl.workers.logs import json_logger, text_logger
from flowctl.workers.submit import enqueue

DEFAULT_LEASE = 30.0
DEFAULT_POLL = 2.0
#: longest time (seconds) between two looks for cancel requests of the runs a worker holds
DEFAULT_CANCEL_POLL = 1.0
#: longest time (seconds) a run this worker could not drive again and again is released for: the
#: delay doubles each time in a row (from 1 s for a refusal, 10 s for an error), up to this
MAX_SETBACK_DELAY = 300.0


class Worker:
    """Claims and drives runs of ``store`` with ``concurrency`` threads until :meth:`stop`.

    ``queues``: the queues to take runs from (None: all). ``lease``: seconds a claim lasts without
    a heartbeat. ``poll``: longest idle wait between claims (LISTEN/NOTIFY wakes it sooner on
    PostgreSQL). ``max_runs``: exit after driving that many runs (None: run until stopped).
    ``log``: ``fn(event: str, fields: dict)`` for each claim, outcome and lease loss.
    ``cancel_poll``: seconds between looks for cancel requests (default :data:`DEFAULT_CANCEL_POLL`).
    """

    def __init__(self, project, store, *, concurrency: int = 4, queues=None, lease: float = DEFAULT_LEASE,
                 poll: float = DEFAULT_POLL, max_inline_wait: float = 1.0, max_runs: int | None = None,
                 worker_id: str | None = None, log=None, heartbeat: float | None = None, listen: bool = True,
                 cancel_poll: float | None = None):
        if not isinstance(store, QueueStore):
            raise UsageError("flowctl worker needs a shared store: --db postgresql://… or sqlite:///path.db")
        if concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if lease < 1.0:
            raise UsageError("--lease must be at least 1s")
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.store = store
        self.concurrency = concurrency
        self.queues = sorted(set(queues)) if queues else None
        self.lease = float(lease)
        self.poll = max(0.05, float(poll))
        self.heartbeat_every = heartbeat or max(0.2, self.lease / 3)
        self.cancel_poll_every = max(0.05, float(cancel_poll or DEFAULT_CANCEL_POLL))
        self.max_runs = max_runs
        self.listen = listen
        self.log = log or (lambda event, fields: None)
        self.engine = Engine(project, LeasedStore(store, self), max_inline_wait=max_inline_wait, owner=self.id,
                             check=False)
        self.engine.launcher = QueueLauncher()  # fan-out children are queued for every worker to claim
        self.engine.halt = self.halt  # checked by the runner between steps (never inside a store write)
        self.engine.fold_final = True  # a move into a succeed state is committed with the run's end
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.stats: Counter = Counter()
        self._lock = threading.Lock()
        # Every claim is driven by one slot; what it holds is booked under the claim's *drive* key,
        # ``(root run id, fence)``, never under the run id alone: a run this worker parks may be
        # claimed again by another of its slots before the first slot has finished its books, and
        # that slot's finish must not give back (or count as its own) what the new claim holds.
        self._held: dict = {}      # run id -> [fence, drive]
        self._lost: dict = {}      # run id -> [stale fence, drive]
        self._touched: set = set()  # (drive, run id): committed since claimed
        self.cancel_wanted: dict = {}  # run id -> {by, compensate}: cancel requests the heartbeat saw
        self._active: dict = {}    # drive -> future
        self._setbacks: dict = {}  # run id -> times in a row this worker could not drive it (deferred, error)
        self._local = threading.local()
        self._signalled = 0
        self._listening = False

    # ------------------------------------------------------------------ bookkeeping of held runs
    def take(self, claim) -> tuple:
        """Book ``claim`` (an entry of :meth:`SqlStore.claim`) as held by this worker before a slot
        drives it (:meth:`_drive`); returns its drive key ``(run id, fence)``."""
        drive = (claim["id"], claim["fence"])
        with self._lock:
            self._held[claim["id"]] = [claim["fence"], drive]
            self._lost.pop(claim["id"], None)
            self._active.setdefault(drive, None)
        return drive

    def hold(self, run_id, fence, parent=None) -> None:
        with self._lock:
            drive = getattr(self._local, "drive", None)  # the calling slot's claim, else its parent's
            if drive is None and parent is not None and parent in self._held:
                drive = self._held[parent][1]
            self._held[run_id] = [fence, drive or (run_id, fence)]
            self._lost.pop(run_id, None)

    def lost_fence(self, run_id):
        """The token this worker held on a run it has since lost, or None."""
        with self._lock:
            entry = self._lost.get(run_id)
            return entry[0] if entry else None

    def fence_of(self, run_id):
        """The token this worker holds on ``run_id`` for the calling slot's claim; None when it
        holds none, or holds it for another claim (the run was claimed again after this slot lost
        it: this slot's writes must not carry the new claim's token)."""
        with self._lock:
            entry = self._held.get(run_id)
            if entry is None:
                return None
            drive = getattr(self._local, "drive", None)
            if drive is None or entry[1] == drive:
                return entry[0]
            # claimed again after this slot lost it: the slot's own token, which the store refuses
            return drive[1] if drive[0] == run_id else None

    def touched(self, run_id) -> None:
        with self._lock:
            entry = self._held.get(run_id)
            if entry is not None:
                self._touched.add((entry[1], run_id))

    def drop(self, run_id) -> None:
        with self._lock:
            self._held.pop(run_id, None)

    def mark_lost(self, run_id, fence, why) -> None:
        with self._lock:
            entry = self._held.pop(run_id, None)
            if entry is None and run_id in self._lost:
                return
            self._lost[run_id] = [fence, entry[1] if entry else getattr(self._local, "drive", None) or (run_id, fence)]
        self.stats["leases_lost"] += 1  # a run or a child; the run driven is counted "lost" once, as it ends here
        self.log("lease_lost", {"run": run_id, "fence": fence, "why": why})

    def halt(self, run_id) -> str | None:
        """Checked by the runner at each checkpoint (between steps, the last one committed): ``"cancel"``
        when someone asked to cancel ``run_id``, ``"stop"`` when this worker is stopping, else None.
        The runner then returns with the run still ``running`` and :meth:`_drive` acts on it."""
        if run_id in self.cancel_wanted:
            return "cancel"
        if self.stopping.is_set():
            return "stop"
        return None

    # ------------------------------------------------------------------ the loop
    def stop(self) -> None:
        """Stop claiming; running runs halt at their next checkpoint and are released."""
        self.stopping.set()
        self.wake.set()

    def _on_signal(self, signum, _frame) -> None:
        # Only a flag here: the main loop polls it (no locks are taken inside a signal handler).
        self._signalled += 1
        if self._signalled > 1:
            os._exit(128 + signum)  # second signal: leave now; the leases expire on their own

    def run(self) -> Counter:
        """Claim and drive runs until stopped (SIGTERM/SIGINT in the main thread, :meth:`stop`, or
        ``max_runs``). Returns counters: claimed, and one per outcome."""
        store = self.store
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        store.register_worker(self.id, host=socket.gethostname(), pid=os.getpid(), queues=self.queues,
                              concurrency=self.concurrency, lease=self.lease)
        self.log("worker_started", {"worker": self.id, "store": safe_url(store.url), "queues": self.queues or "*",
                                    "concurrency": self.concurrency, "lease_s": self.lease})
        beat = threading.Thread(target=self._heartbeat_loop, name="flowctl-heartbeat", daemon=True)
        beat.start()
        threading.Thread(target=self._cancel_poll_loop, name="flowctl-cancel-poll", daemon=True).start()
        if self.listen and store.listen_dsn():
            threading.Thread(target=self._listen_loop, name="flowctl-listen", daemon=True).start()
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="flowctl-run")
        try:
            self._loop(pool)
        finally:
            self.stopping.set()
            pool.shutdown(wait=True)
            self._release_all("worker stopping")
            try:
                store.worker_heartbeat(self.id, status="stopped", runs_done=self.stats["done"])
            except Exception:  # noqa: BLE001 - the store may be gone; the row ages out
                pass
            self.log("worker_stopped", {"worker": self.id, **dict(self.stats)})
        return self.stats

    def _loop(self, pool) -> None:
        started = 0
        while True:
            if self._signalled and not self.stopping.is_set():
                self.log("worker_stopping", {"worker": self.id, "running": len(self._active)})
                self.stop()
            if self.stopping.is_set():
                return
            if self.max_runs is not None and started >= self.max_runs:
                if not self._active:
                    return
                self._idle(self.poll)
                continue
            with self._lock:
                free = self.concurrency - len(self._active)
            if self.max_runs is not None:
                free = min(free, self.max_runs - started)
            claims = []
            if free > 0:
                try:
                    claims = self.store.claim(self.id, free, self.lease, self.queues)
                except Exception as exc:  # noqa: BLE001 - database unreachable: keep trying, slowly
                    self.stats["claim_errors"] += 1
                    self.log("claim_failed", {"error": first_line(exc)})
                    self._idle(self.poll)
                    continue
            for claim in claims:
                started += 1
                self.stats["claimed"] += 1
                drive = self.take(claim)
                future = pool.submit(self._drive, claim)
                with self._lock:
                    if drive in self._active:  # (not yet finished: a slot may already be done with it)
                        self._active[drive] = future
            if claims and len(claims) == free:
                continue  # there may be more: claim again before idling
            self._idle(self._idle_timeout(free))

    def _idle_timeout(self, free: int) -> float:
        if free <= 0:
            return self.poll
        try:
            due = self.store.next_due(self.queues)
        except Exception:  # noqa: BLE001
            return self.poll
        if due is None or due <= 0:  # nothing, or due but taken by others / held back by a limit
            return self.poll
        return min(self.poll, due + 0.01)

    def _idle(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not self._signalled and not self.stopping.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            if self.wake.wait(min(0.25, left)):
                self.wake.clear()
                return

    # ------------------------------------------------------------------ one claimed run
    def _drive(self, claim) -> None:
        run_id, fence, prev = claim["id"], claim["fence"], claim["prev_status"]
        self._local.drive = (run_id, fence)
        self.log("claimed", {"run": run_id, "fence": fence, "from": prev})
        outcome, detail, delay = None, None, 0.0
        try:
            row = claim.get("row") or self.store.get_run(run_id)  # the claim returns the row it took
            if row.get("fence") != fence:
                raise LeaseLost(f"run {run_id} was claimed again before it started here")
            # resume() continues the run from the state it was claimed in; a worker's lease (not a
            # process id) decides who holds it, and the event names the worker it was taken from.
            # (a queued run continues as a due one: the audit log then records which worker took it)
            row["status"] = "waiting" if prev == "queued" else prev
            row["available_at"] = claim.get("due_at")  # as it was due (the claim cleared it in the store)
            if prev == "running":
                row["owner"] = claim.get("prev_owner")
            if row.get("cancel_requested") and row["status"] not in FINAL:
                outcome = self._cancel(row)  # asked while its previous worker held it
            elif prev == "paused" and self._remind(row, fence):
                outcome = "reminded"
            else:
                result = lifecycle.resume(self.engine, row, claimed=True)
                outcome = result.status
                if outcome == "running" and run_id in self.cancel_wanted:  # halted at a checkpoint to cancel
                    outcome = self._cancel(self.store.get_run(run_id))
                elif outcome == "running" and self.stopping.is_set():  # halted at a checkpoint to stop
                    outcome = "stopped"
                elif outcome in ("waiting", "paused") and (run_id in self.cancel_wanted
                                                           or self.store.cancel_requests([run_id])):
                    outcome = self._cancel(self.store.get_run(run_id))  # asked just before it parked
                elif outcome in ("succeeded", "failed"):
                    self._note_unseen_cancel(run_id)  # asked, but it ended before a poll saw it
        except LeaseLost as exc:
            outcome, detail = "lost", str(exc)
            self.mark_lost(run_id, fence, "commit refused")
        except RunConflict as exc:  # e.g. a child run leased by another worker: try again shortly
            outcome, detail, delay = "conflict", str(exc), 1.0
        except UsageError as exc:  # e.g. a review that is not due yet by this host's clock
            outcome, detail, delay = "deferred", str(exc), 1.0
        except Exception as exc:  # noqa: BLE001 - a definition that no longer loads, a store error …
            outcome, detail, delay = "error", f"{type(exc).__name__}: {first_line(exc)}", 10.0
        finally:
            self._local.drive = None
            with self._lock:
                self.cancel_wanted.pop(run_id, None)
        if delay:  # the same run refused again and again (a tool this process cannot import …): back off
            with self._lock:
                n = self._setbacks[run_id] = self._setbacks.get(run_id, 0) + 1
            delay = min(delay * 2 ** (n - 1), MAX_SETBACK_DELAY)
            detail = f"{detail} (time {n} here; claimable again in {delay:g}s)"
        elif self._setbacks:
            with self._lock:
                self._setbacks.pop(run_id, None)
        self._finish(run_id, claim, outcome, detail, delay)

    def _cancel(self, row) -> str:
        """Cancel a run this worker holds as its ``cancel_requested`` says (compensating by default)."""
        request = row.get("cancel_requested") or {}
        self.log("cancelling", {"run": row["id"], "by": request.get("by")})
        with self._lock:
            self.cancel_wanted.pop(row["id"], None)
        result = cancelling.cancel(self.engine, row, compensate=request.get("compensate", True),
                               by=request.get("by"), holder=True)
        return result.status

    def _note_unseen_cancel(self, run_id) -> None:
        """``run_id`` ended (succeeded or failed) with a cancel request still pending: append a
        ``cancel_request_unseen`` event to its log and clear the request, so it does not look honoured."""
        request = self.store.cancel_request_at_end(run_id)  # what the commit that ended it returned
        if not request:
            return
        try:
            row = self.store.get_run(run_id, exact=True)
            r = lifecycle.context_of(self.engine, row)
            r.emit("cancel_request_unseen", None, None, by=request.get("by"), requested_at=request.get("at"),
                   outcome=row["status"], note=f"the run {row['status']} before worker {self.id} saw the cancel request; "
                                               "nothing was cancelled or undone")
            # committed as the run's end again (its status as it is): the store-wide ledger records
            # the head after this note, as it did the end's (new-user finding: `audit verify --all`
            # reported such a run as PROBLEMS, its head past the one the ledger recorded)
            r.commit(status=row["status"], cancel_requested=None)
            self.log("cancel_request_unseen", {"run": run_id, "by": request.get("by"), "outcome": row["status"]})
        except Exception as exc:  # noqa: BLE001 - the run's outcome stands; the request stays recorded
            self.log("cancel_note_failed", {"run": run_id, "error": first_line(exc)})

    def _remind(self, row, fence) -> bool:
        """A paused review whose reminder (not its deadline) came due: notify again with a new token
        and park it again, due at its deadline. False when it is the deadline that came."""
        pending = (row.get("cursor") or {}).get("pending") or {}
        now = self.engine.clock.time()
        if pending.get("deadline") is not None and pending["deadline"] <= now:
            return False
        if not (pending.get("remind_at") and pending["remind_at"] <= now and not pending.get("reminded")):
            return False
        lifecycle.remind(self.engine, row)  # committed under this worker's token
        pending = dict(pending, reminded=True)
        self.store.release(row["id"], fence, status="paused", available_at=review_due_at(pending))
        self.drop(row["id"])
        return True

    def _finish(self, root, claim, outcome, detail, delay) -> None:
        drive = (root, claim["fence"])
        with self._lock:  # only what this claim holds: a later claim of the same run books its own
            mine = [(rid, entry[0]) for rid, entry in self._held.items() if entry[1] == drive]
            for rid, _ in mine:
                del self._held[rid]
            for rid in [rid for rid, entry in self._lost.items() if entry[1] == drive]:
                del self._lost[rid]
            touched = (drive, root) in self._touched
            self._touched = {t for t in self._touched if t[0] != drive}
            self._active.pop(drive, None)
        for rid, fence in mine:  # still running under our lease: give it back
            status, wait = None, delay
            if rid == root and not touched and claim["prev_status"] != "running":
                # claimed but never started here (e.g. not due yet by this host's clock): as it was
                status, wait = claim["prev_status"], max(delay, 1.0)
            try:
                self.store.release(rid, fence, status=status, delay=wait)
            except Exception as exc:  # noqa: BLE001 - the lease then just expires
                self.log("release_failed", {"run": rid, "error": first_line(exc)})
        self.stats[outcome] += 1
        if outcome in FINAL or outcome in ("waiting", "paused", "reminded"):
            self.stats["done"] += 1
        fields = {"run": root, "fence": claim["fence"], "outcome": outcome}
        if detail:
            fields["detail"] = detail
        self.log("finished" if outcome not in ("error", "conflict", "deferred") else outcome, fields)
        self.wake.set()

    def _release_all(self, why) -> None:
        with self._lock:
            left = [(rid, entry[0]) for rid, entry in self._held.items()]
            self._held.clear()
        for rid, fence in left:
            try:
                self.store.release(rid, fence)
            except Exception:  # noqa: BLE001
                pass

    # ------------------------------------------------------------------ heartbeat and wake-ups
    def _heartbeat_loop(self) -> None:
        while not (self.stopping.is_set() and not self._active):
            time.sleep(self.heartbeat_every)
            self.beat()

    def beat(self) -> None:
        """One heartbeat: give back strays, renew the leases held (a run not renewed is lost,
        unless this worker's own commit let it go), note cancel requests, report the worker."""
        with self._lock:
            held = {rid: entry[0] for rid, entry in self._held.items()}
            # held on behalf of no run being driven (cannot happen, but never renew forever)
            strays = [(rid, entry[0]) for rid, entry in self._held.items() if entry[1] not in self._active]
            for rid, _ in strays:
                del self._held[rid]
                held.pop(rid, None)
        for rid, fence in strays:
            self.log("released_stray", {"run": rid, "fence": fence})
            try:
                self.store.release(rid, fence)
            except Exception:  # noqa: BLE001
                pass
        try:
            renewed = self.store.renew(self.id, held, self.lease)
            for rid, fence in held.items():
                if rid not in renewed and self.fence_of(rid) == fence and not self._let_go(rid, fence):
                    self.mark_lost(rid, fence, "heartbeat found the lease gone")
            wanted = self.store.cancel_requests(renewed)
            if wanted:
                with self._lock:
                    self.cancel_wanted.update(wanted)
            self.store.worker_heartbeat(self.id, status="stopping" if self.stopping.is_set() else "running",
                                        runs_done=self.stats["done"])
        except Exception as exc:  # noqa: BLE001 - leases may lapse; the commits then refuse
            self.stats["heartbeat_errors"] += 1
            self.log("heartbeat_failed", {"error": first_line(exc)})

    def _let_go(self, run_id, fence) -> bool:
        """Whether a held run the heartbeat did not renew was let go by this worker's own commit
        (it parked or ended the run under this token; its slot drops it next) rather than lost
        (stress finding: a run that had just succeeded was logged and counted as a lost lease)."""
        try:
            row = self.store.get_run(run_id, exact=True)
        except Exception:  # noqa: BLE001 - cannot tell: lost, as before
            return False
        return row.get("fence") == fence and row.get("status") != "running"

    def poll_cancels(self) -> dict:
        """One look for cancel requests of the runs this worker holds (``{run id: request}``); those
        found halt their runs at the next checkpoint (:meth:`halt`). Errors are counted, not raised."""
        with self._lock:
            held = list(self._held)
        if not held:
            return {}
        try:
            wanted = self.store.cancel_requests(held)
        except Exception as exc:  # noqa: BLE001 - the next poll (or the heartbeat) tries again
            self.stats["cancel_poll_errors"] += 1
            self.log("cancel_poll_failed", {"error": first_line(exc)})
            return {}
        if wanted:
            with self._lock:
                self.cancel_wanted.update({rid: req for rid, req in wanted.items() if rid in self._held})
        return wanted

    def _cancel_poll_loop(self) -> None:
        while not (self.stopping.is_set() and not self._active):
            time.sleep(self.cancel_poll_every)
            self.poll_cancels()

    def _listen_loop(self) -> None:
        import psycopg

        backoff = 1.0
        while not self.stopping.is_set():
            try:
                with psycopg.connect(self.store.listen_dsn(), autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {self.store.NOTIFY_CHANNEL}")
                    self._listening = True
                    backoff = 1.0
                    while not self.stopping.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if self.queues is None or note.payload in self.queues:
                                self.wake.set()
            except Exception as exc:  # noqa: BLE001 - polling covers the gap
                self._listening = False
                self.log("listen_failed", {"error": first_line(exc), "retry_s": backoff})
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 30.0)


__all__ = ["Worker", "LeasedStore", "enqueue", "text_logger", "json_logger", "DEFAULT_LEASE", "DEFAULT_POLL",
           "DEFAULT_CANCEL_POLL"]
