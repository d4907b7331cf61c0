"""Retention: ``flowctl prune`` moves finished runs' old events to an archive (issue 21, item 6).

What is pruned: of each run whose status is final (succeeded, failed, cancelled; a running,
waiting, paused or queued run is never touched, nor a child run whose parent has not ended), the stored event rows older than the cutoff
(a row's ``ts`` is its last event's), read in ``seq`` order up to the first row that is not:

* without ``keep_types``, all of them (a prefix of the run's chain);
* with ``keep_types`` (patterns, ``*`` a wildcard; :data:`DEFAULT_KEEP` by default), only the
  rows none of whose events is of a kept type: the *process events*. Events are stored one row
  per commit (schema 7) and a row is hashed whole, so a row is pruned or kept **whole**: a commit
  that holds a kept event (a policy decision, say) keeps its process events too, and every row
  left in the store still hashes to its own text. This is the choice of this module: never a row
  rewritten, never a kept event that cannot be verified from the store alone.

Of a failed run, the rows holding :data:`REDRIVE_GUARD` events always stay (redrive reads them).

Each run of pruned rows (a *range*: consecutive rows, events ``first_seq``..``last_seq``) is
recorded in ``flowctl_pruned`` (schema 8) with the chain's hash before it, the hash of its last
row and the archive's name and sha256. The chain is unkeyed, so those two hashes prove nothing of
the range: ``flowctl audit verify RUN`` (:class:`RunAudit`) checks each range against the archive
file with its sha256, its rows put back in the log; a range whose archive is not found is stepped
over (:class:`PrunedChain`) and said *not checked*, and an anchored head past it fails.
``audit verify --archive`` checks the archived rows alone (:mod:`flowctl.store.archive`).

Order of work, so that no prune leaves a half-written store: (1) read the plan; (2) write the
archive whole and fsync it; (3) in one transaction, for each run re-read its row (locked on
PostgreSQL; SQLite writers are serialised), skip it if it is no longer final or has new events,
delete its ranges (each must delete exactly the rows archived, else the whole transaction is
rolled back) and insert its ``flowctl_pruned`` rows. Interrupted before (3) commits, the store is
as it was (the archive is then an extra copy; prune again).
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from flowctl.errors import StoreError, UsageError
from flowctl.store.records import FINAL, PACKED, stored_events

#: The event types ``--keep-types default`` keeps: what a run decided and undid, and its life.
DEFAULT_KEEP = ("run_*", "policy_decided", "review_*", "compensation_*")


#: Kept of a failed run whatever ``keep`` says: ``flowctl redrive`` refuses to continue a run whose
#: failure compensated side effects, and it learns that from these events.
REDRIVE_GUARD = ("compensation_started", "run_redriven")


def keep_patterns(text: str | None) -> tuple | None:
    """``--keep-types`` text (``T,T,...``; ``default`` stands for :data:`DEFAULT_KEEP`) as a tuple
    of patterns, or None when not given. Raises :class:`UsageError` for an empty or malformed list."""
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if part == "default":
            out.extend(DEFAULT_KEEP)
        elif part and all(c.isalnum() or c in "_*" for c in part):
            out.append(part)
        else:
            raise UsageError(f"--keep-types: {part!r} is not an event type or pattern",
                             hint="e.g. --keep-types default or --keep-types run_*,policy_decided,compensation_*")
    return tuple(dict.fromkeys(out))


def _kept(events: list, patterns: tuple) -> bool:
    return any(fnmatch.fnmatchcase(ev["type"], p) for ev in events for p in patterns)


@dataclass
class RunPlan:
    """What a prune removes of one run: its rows (tuples as archived) and their ranges
    ``[first_seq, last_seq, prev_hash, hash]``."""

    id: str
    flow: str
    status: str
    last_seq: int
    last_hash: str
    rows: list = field(default_factory=list)
    ranges: list = field(default_factory=list)

    @property
    def events(self) -> int:
        return sum(r[8] if r[8] is not None else 1 for r in self.rows)

    def info(self) -> dict:
        return {"id": self.id, "flow": self.flow, "status": self.status, "last_seq": self.last_seq,
                "last_hash": self.last_hash, "ranges": self.ranges}


def _row_events(run_id: str, row: tuple) -> list:
    seq, ts, typ, state, attempt, data, prev, digest, n = row
    return stored_events(run_id, (seq, ts, typ, state, attempt, data, prev, digest, None, n))


def plan_run(store, run: dict, cutoff: float, keep: tuple | None) -> RunPlan | None:
    """The :class:`RunPlan` of one finished ``run`` (a row dict), or None when nothing of it is
    older than ``cutoff`` (epoch seconds)."""
    sa, t = store.sa, store.t
    e = t.events
    plan = RunPlan(run["id"], run["flow"], run["status"], run["last_seq"], run["last_hash"])
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(e.c.seq, e.c.ts, e.c.type, e.c.state, e.c.attempt, e.c.data, e.c.prev_hash,
                                      e.c.hash, e.c.n_events).where(e.c.run_id == run["id"]).order_by(e.c.seq)).all()
    patterns = (keep or ()) + (REDRIVE_GUARD if run["status"] == "failed" else ())
    open_range = None
    for row in rows:
        row = tuple(row)
        first_seq = row[0] - (row[8] or 1) + 1  # a row is keyed by its last event's seq
        if row[1] >= cutoff:
            break
        if patterns and _kept(_row_events(run["id"], row), patterns):
            open_range = None
            continue
        plan.rows.append(row)
        if open_range is not None and open_range[1] == first_seq - 1:
            open_range[1], open_range[3] = row[0], row[7]
        else:
            open_range = [first_seq, row[0], row[6], row[7]]
            plan.ranges.append(open_range)
    return plan if plan.rows else None


def finished_runs(store, cutoff: float, run_ids=None) -> list:
    """Finished runs created before ``cutoff`` (only those could hold older events), but not a
    child run whose parent has not ended (the parent may still read its log): dicts of id, flow,
    status, last_seq, last_hash, oldest first."""
    sa, r = store.sa, store.t.runs
    final = tuple(sorted(FINAL))
    parent = r.alias("parent")
    open_parent = sa.exists().where(parent.c.id == r.c.parent_id, parent.c.status.notin_(final))
    q = (sa.select(r.c.id, r.c.flow, r.c.status, r.c.last_seq, r.c.last_hash)
         .where(r.c.status.in_(final), r.c.created_at < cutoff, ~open_parent).order_by(r.c.created_at, r.c.id))
    if run_ids:
        q = q.where(r.c.id.in_(list(run_ids)))
    with store.engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(q)]


def _sql_store(store):
    if getattr(store, "durable", False) is not True or not hasattr(store, "pg") or not hasattr(store, "_begin"):
        raise UsageError("flowctl prune needs a SQL store (SQLite or PostgreSQL); this one is "
                         f"{type(store).__name__}", hint="pass --db sqlite:///… or postgresql://…")
    return store


@dataclass
class PruneResult:
    """What :func:`prune` did: ``runs`` planned (:class:`RunPlan`), ``skipped`` ids (changed since
    planned: left whole), the archive's ``path`` and ``sha256`` (None for a dry run)."""

    runs: list
    skipped: list
    path: object = None
    sha256: str | None = None

    @property
    def rows(self) -> int:
        return sum(len(p.rows) for p in self.runs if p.id not in self.skipped)

    @property
    def events(self) -> int:
        return sum(p.events for p in self.runs if p.id not in self.skipped)


def prune(store, cutoff: float, folder, *, keep: tuple | None = None, dry_run: bool = False,
          now: float, run_ids=None, before_delete=None) -> PruneResult:
    """Prune every finished run's rows older than ``cutoff`` (epoch seconds) into one new archive
    in ``folder`` (a ``Path``; created if missing), then delete them from ``store`` in one
    transaction (see the module docstring). ``keep``: see :func:`keep_patterns`. ``dry_run``: only
    the plan. ``before_delete``: called between the archive and the delete (tests inject a crash
    there). Raises :class:`UsageError` for a store that is not SQL or an archive that cannot be
    written, :class:`StoreError` when the
    store fails or changed under the prune (nothing deleted then)."""
    from flowctl.store.archive import ArchiveWriter

    store = _sql_store(store)
    plans = [p for run in finished_runs(store, cutoff, run_ids) if (p := plan_run(store, run, cutoff, keep))]
    result = PruneResult(plans, [])
    if dry_run or not plans:
        return result
    try:
        writer = ArchiveWriter(folder, {"created_at": now, "cutoff": cutoff,
                                        "keep_types": list(keep) if keep else None}, now)
        try:
            for p in plans:
                writer.run(p.info())
                for row in p.rows:
                    writer.row(row)
            result.path, result.sha256 = writer.close()
        except BaseException:
            writer.abort()
            raise
    except OSError as exc:
        raise UsageError(f"--archive: cannot write the archive in {folder}: {exc.strerror or exc}",
                         hint="give a folder you can write to (--archive DIR); nothing was pruned") from None
    if before_delete is not None:
        before_delete(result)
    result.skipped = _delete(store, plans, result.path.name, result.sha256, now)
    return result


def _delete(store, plans: list, archive: str, digest: str, now: float) -> list:
    """Delete the planned ranges and record them (and a ``prune`` row of the ledger per run,
    :mod:`flowctl.store.ledger`), in one transaction; returns the ids skipped."""
    from flowctl.store.ledger import sa_append

    sa, t = store.sa, store.t
    r, e, p = t.runs, t.events, t.pruned
    skipped = []
    with store._begin() as conn:
        for plan in plans:
            q = sa.select(r.c.status, r.c.last_seq).where(r.c.id == plan.id)
            row = conn.execute(q.with_for_update() if store.pg else q).first()
            if row is None or row[0] not in FINAL or row[1] != plan.last_seq:
                skipped.append(plan.id)  # resumed, redriven or deleted since it was read: left as it is
                continue
            for first, last, prev_hash, head in plan.ranges:
                rows = [x for x in plan.rows if first <= x[0] <= last]
                gone = conn.execute(e.delete().where(e.c.run_id == plan.id, e.c.seq >= first, e.c.seq <= last)).rowcount
                if gone != len(rows):
                    raise StoreError(f"run {plan.id}: {gone} event rows in {first}-{last}, {len(rows)} archived "
                                     "(the store changed during the prune); nothing was deleted",
                                     hint="run flowctl prune again")
                conn.execute(p.insert().values(run_id=plan.id, first_seq=first, last_seq=last, prev_hash=prev_hash,
                                               hash=head, n_rows=len(rows),
                                               n_events=sum(x[8] if x[8] is not None else 1 for x in rows),
                                               archive=archive, archive_sha256=digest, pruned_at=now))
            sa_append(conn, store.pg, plan.id, "prune")  # the ledger of runs: what was pruned, when
    return skipped


def pruned_ranges(store, run_id: str) -> list:
    """The ranges pruned of ``run_id``, by ``first_seq``: dicts ``{first_seq, last_seq, prev_hash,
    hash, n_rows, n_events, archive, archive_sha256, pruned_at}``; ``[]`` for a store without
    them (memory). Works on a :class:`~flowctl.store.core.SqlStore` and on the DBAPI reader."""
    cols = "first_seq, last_seq, prev_hash, hash, n_rows, n_events, archive, archive_sha256, pruned_at"
    reader = getattr(store, "_reader", None) or store
    if hasattr(reader, "_cursor"):
        mark = "%s" if reader.pg else "?"
        with reader._cursor() as cur:
            cur.execute(f"SELECT {cols} FROM flowctl_pruned WHERE run_id = {mark} ORDER BY first_seq", (run_id,))
            rows = cur.fetchall()
    elif hasattr(store, "_begin"):
        sa, pt = store.sa, store.t.pruned
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(*[pt.c[c] for c in cols.split(", ")]).where(pt.c.run_id == run_id)
                                .order_by(pt.c.first_seq)).all()
    else:
        return []
    return [dict(zip(cols.split(", "), row)) for row in rows]


class PrunedChain:
    """A :class:`~flowctl.store.audit.ChainCheck` for a run with pruned ranges: fed the events left
    in the store, it steps over each range (its ``prev_hash`` must be the chain's hash there; the
    chain goes on from its ``hash``). Has ChainCheck's ``add``, ``finish``, ``count``, ``prev``."""

    def __init__(self, ranges: list):
        from flowctl.store.audit import ChainCheck

        self.chain = ChainCheck()
        self.ranges = sorted(ranges, key=lambda x: x["first_seq"])
        self.pruned = bool(self.ranges)
        self._next = 0
        self.problems: list = []

    def __getattr__(self, name):
        return getattr(self.__dict__["chain"], name)

    def _step_over(self, seq: int) -> None:
        chain, ranges = self.chain, self.ranges
        while self._next < len(ranges) and ranges[self._next]["first_seq"] <= seq:
            rng = ranges[self._next]
            self._next += 1
            if chain.row:
                chain._row_done()
            if chain.expected_seq != rng["first_seq"]:
                self.problems.append(f"event {chain.expected_seq} is missing (next is the pruned range from "
                                     f"{rng['first_seq']})")
            if rng["prev_hash"] != chain.prev:
                self.problems.append(f"the events {rng['first_seq']}-{rng['last_seq']} pruned into {rng['archive']} "
                                     f"do not follow event {rng['first_seq'] - 1} (prev_hash differs)")
            chain.prev, chain.expected_seq = rng["hash"], rng["last_seq"] + 1

    def add(self, ev: dict) -> None:
        self._step_over(ev["seq"])
        self.chain.add(ev)

    def finish(self, last_seq=None, last_hash=None) -> list[str]:
        self._step_over(float("inf"))
        problems = self.problems + self.chain.finish(last_seq, last_hash)
        if last_hash is not None and not self.chain.count and self.ranges and last_hash != self.chain.prev:
            problems.append("the run's last hash does not match the head of its pruned events")
        return problems


HEX64 = re.compile(r"[0-9a-f]{64}")


def range_problems(row: dict, ranges: list) -> list[str]:
    """What is wrong with the ``flowctl_pruned`` record of run ``row`` whatever the archives say:
    a range out of the chain (before event 1, past the run's last event, overlapping another), a
    hash or archive sha256 that is not 64 hex digits, an archive name prune does not write.
    (A range of a run that has not ended is checked by :class:`RunAudit`, which reads the log.)"""
    from flowctl.store.archive import is_archive_name

    problems, end = [], 0
    for rng in sorted(ranges, key=lambda x: x["first_seq"]):
        what = f"the pruned range {rng['first_seq']}-{rng['last_seq']}"
        if not 1 <= rng["first_seq"] <= rng["last_seq"] <= (row.get("last_seq") or 0):
            problems.append(f"{what} is outside the run's events 1-{row.get('last_seq')}")
        if rng["first_seq"] <= end:
            problems.append(f"{what} overlaps the pruned range that ends at {end}")
        end = max(end, rng["last_seq"])
        if not HEX64.fullmatch(rng["archive_sha256"] or ""):
            problems.append(f"{what} records no valid archive sha256 ({rng['archive_sha256']!r})")
        if not is_archive_name(rng["archive"]):
            problems.append(f"{what} names an archive flowctl prune does not write ({rng['archive']!r})")
        if not HEX64.fullmatch(rng["hash"] or "") or not (rng["prev_hash"] == "" or HEX64.fullmatch(rng["prev_hash"])):
            problems.append(f"{what} records a hash that is not 64 hex digits")
    return problems


@dataclass
class AuditResult:
    """What :class:`RunAudit` found: ``problems`` (empty: intact), ``notes`` (what was not checked
    and why), ``events`` checked, ``steps`` step records checked of ``all_steps``, ``archived``
    ranges put back from their archives, ``unchecked`` ranges (dicts of :func:`pruned_ranges`)."""

    problems: list
    notes: list
    events: int
    steps: int
    all_steps: int
    archived: int
    unchecked: list


class RunAudit:
    """``flowctl audit verify RUN``'s checks of one run (the CLI and the console's run page share
    it), fed one event at a time: iterate :meth:`events` over the store's events (in ``seq``
    order; archived ranges are put back in their place, each archive streamed), then
    :meth:`finish`.

    Each pruned range is checked against the archive file whose bytes have its recorded sha256:
    looked for in ``archive`` (``--archive FILE|DIR``: every range must be there), else by its
    name in ``folder`` (the project's default archive folder; None: not looked for). A range not
    found is stepped over by its two hashes (:class:`PrunedChain`) and said *not checked*; an
    ``expect_head`` (``SEQ:HASH``) at or past such a range fails, since the unkeyed chain through
    it cannot be proved without its archive."""

    def __init__(self, store, row: dict, steps: list, *, archive=None, folder=None, expect_head=None):
        from flowctl.store.archive import archive_files, is_archive_name
        from flowctl.store.audit import HeadCheck

        self.row, self.all_steps, self.archive = row, steps, archive
        self.ranges = pruned_ranges(store, row["id"])
        self.problems = range_problems(row, self.ranges)
        self.notes: list = []
        self.sources: list = []  # (range, path) checked against their archive
        self.left: list = []  # ranges stepped over
        bad = bool(self.problems)
        files = {}
        if archive is not None and self.ranges:
            files = {p: None for p in archive_files(archive)}
        for rng in self.ranges:
            path = None
            if bad:
                pass  # a malformed record is reported as such, its archives are not read
            elif archive is not None:
                for p in files:
                    files[p] = files[p] or _sha256(p)
                    if files[p] == rng["archive_sha256"]:
                        path = p
                        break
                else:
                    self.problems.append(self._missing(rng, any(p.name == rng["archive"] for p in files), archive))
            elif folder is not None and is_archive_name(rng["archive"]) and (folder / rng["archive"]).is_file():
                if _sha256(folder / rng["archive"]) == rng["archive_sha256"]:
                    path = folder / rng["archive"]
                else:
                    self.problems.append(self._missing(rng, True, folder))
            else:
                self.notes.append(f"not checked: events {rng['first_seq']}-{rng['last_seq']} (pruned into "
                                  f"{rng['archive']}; not found — check them with --archive DIR)")
            if path is None:
                self.left.append(rng)
            else:
                self.sources.append((rng, path))
        from flowctl.store.audit import RunCheck, StepsCheck

        self.chain = PrunedChain(self.left) if self.left else None
        self.run_check, self.steps_check = RunCheck(row, self.chain), StepsCheck(steps)
        self.head = HeadCheck(expect_head) if expect_head else None
        self.seen = {"tool_invoked": set(), "tool_succeeded": set()}
        self.redriven = 0  # the seq of the last run_redriven event
        self.readers: list = []

    @staticmethod
    def _missing(rng: dict, named: bool, where) -> str:
        span = f"events {rng['first_seq']}-{rng['last_seq']}"
        if named:
            return (f"archive {rng['archive']} is not the file the {span} were pruned into (its sha256 differs; "
                    f"flowctl audit verify --archive FILE says what changed)")
        return f"{span} (pruned into {rng['archive']}) are not in {where}"

    def _feed(self, ev: dict) -> dict:
        self.run_check.add(ev)
        self.steps_check.add(ev)
        if self.head is not None and not self.head.malformed:
            self.head.add(ev)
        t = ev["type"]
        if t in self.seen:
            self.seen[t].add((ev.get("state"), ev.get("attempt"), (ev.get("data") or {}).get("tool")))
        elif t == "run_redriven":
            self.redriven = ev["seq"]
        return ev

    def _archived(self):
        """``(first_seq, events iterator)`` of each range checked against its archive, one
        streamed reader per file (a file's rows come in ``seq`` order)."""
        from flowctl.store.archive import ArchiveReader, row_events

        streams = {}
        for rng, path in sorted(self.sources, key=lambda x: x[0]["first_seq"]):
            if path not in streams:
                reader = ArchiveReader(path)
                self.readers.append(reader)
                streams[path] = [reader.items(self.row["id"]), None]

            def events(rng=rng, stream=streams[path]):
                while True:
                    if stream[1] is None:
                        kind, value = next(stream[0], ("end", None))
                        if kind == "end":
                            return
                        if kind == "run":
                            continue
                        stream[1] = value
                    if stream[1][0] > rng["last_seq"]:
                        return
                    row, stream[1] = stream[1], None
                    if row[0] >= rng["first_seq"]:
                        yield from row_events(self.row["id"], row)

            yield rng["first_seq"], events()

    def events(self, stored):
        """The run's events in ``seq`` order (``stored``: the store's; archived ones put back),
        each fed to the checks before it is given."""
        pending = list(self._archived())
        for ev in stored:
            while pending and pending[0][0] < ev["seq"]:
                yield from map(self._feed, pending.pop(0)[1])
            yield self._feed(ev)
        for _first, evs in pending:
            yield from map(self._feed, evs)

    def finish(self, extra=()) -> AuditResult:
        """The result; ``extra``: problems the caller found (the definition snapshot's), None skipped."""
        from flowctl.store.audit import seal_problem

        problems = list(self.problems)
        for reader in self.readers:
            problems += [f"archive {reader.path.name}: {p}" for p in reader.problems]
        if self.row.get("status") not in FINAL:
            problems += [f"events {r['first_seq']}-{r['last_seq']} are recorded as pruned, but the run has not "
                         "ended (prune never touches such a run: the record is forged)"
                         for r in self.ranges if r["last_seq"] >= self.redriven]
        steps = self.steps_check
        if self.left:  # step records whose events left the store are checked with their archive
            steps.steps = [s for s in self.all_steps if _in_store(s, self.seen)]
            if len(steps.steps) < len(self.all_steps):
                self.notes.append(f"{len(self.all_steps) - len(steps.steps)} step records not checked "
                                  "(their events are archived)")
        problems += self.run_check.finish() + steps.finish()
        sealed = seal_problem(self.row)
        problems += [p for p in (sealed, *extra) if p]
        head = self.head
        if head is not None:
            blind = [r for r in self.left if not head.malformed and r["first_seq"] <= head.seq]
            if blind:
                problems += [f"the anchored head {head.seq} is proved through events {r['first_seq']}-{r['last_seq']}, "
                             f"pruned into {r['archive']} and not checked: the archive is needed (--archive DIR)"
                             for r in blind]
            else:
                problems += head.finish()
        return AuditResult(problems, self.notes, self.run_check.chain.count, len(steps.steps), len(self.all_steps),
                           len(self.sources), self.left)


def _sha256(path) -> str:
    """The file's sha256 hex, or ``"unreadable"`` (matches no recorded sha256: reported as differing)."""
    from flowctl.store.archive import file_sha256

    try:
        return file_sha256(path)
    except OSError:
        return "unreadable"


def _in_store(step: dict, seen: dict) -> bool:
    """Whether the events a step record is checked against were all read (not pruned away)."""
    key = (step.get("state"), step.get("attempt"), step.get("tool"))
    return key in seen["tool_invoked"] and (step.get("status") != "succeeded" or step.get("output") in (None, {})
                                            or key in seen["tool_succeeded"])
