"""The read path of the SQL store on the DBAPI alone (``sqlite3`` / ``psycopg``), without SQLAlchemy.

The read commands (``flowctl trace``, ``runs``, ``stats``, ``reviews``, ``audit log`` /
``verify`` / ``head``) start in a fraction of the time importing SQLAlchemy takes (issue 17,
target 7). :class:`SqlReader` offers the reads of :class:`flowctl.store.protocol.Store` —
``get_run``, ``list_runs``, ``events``, ``events_page``, ``steps``, ``stats_rows``, ``stats_figures``,
``load_definition``, ``now``, ``keyring`` — with the same shapes as
:class:`~flowctl.store.core.SqlStore`, and writes nothing. :func:`open_reader` gives one only for
a store at this flowctl's schema version; anything else (an older store to upgrade, an address with
options) is left to :func:`flowctl.store.sql.open_store`.

:class:`DbapiReads` holds the queries both share (batched events, the runs and facts of ``flowctl
stats``: :func:`run_facts`, :func:`run_figures`); :class:`~flowctl.store.core.SqlStore` runs them on its pool's DBAPI connection.
"""
from __future__ import annotations

import contextlib
import json

from flowctl.errors import RunNotFound, StoreError, first_line
from flowctl.store.records import JSON_STEP, check_run_id, event_dict, loads, prefix_bounds, run_dict, stored_events
from flowctl.store.url import safe_url

def run_facts(store, runs: list, summaries: dict | None = None, read_many=None) -> list:
    """``[(run_id, fact)]`` of ``runs`` (dicts with ``id``, ``status``, ``last_seq``), each run's in
    ``seq`` order: from its summary in ``summaries`` (run id -> ``(last_seq, text)``) when that
    describes the run as it stands (ended, same ``last_seq``), else from its events read through
    the store (:func:`flowctl.store.summary.facts_of`); ``read_many(run_ids)`` (run id -> facts),
    when given, reads those runs' events in a few queries instead of one run at a time."""
    from flowctl.store.events import iter_events
    from flowctl.store.records import FINAL
    from flowctl.store.summary import facts_of, read_summaries, read_summary

    summaries = summaries or {}
    current = [r for r in runs if r["status"] in FINAL and summaries.get(r["id"], (None,))[0] == r.get("last_seq")]
    # the common case in one decode: every current summary is a JSON list, so their texts joined are one
    joined = read_summaries("[" + ",".join(summaries[r["id"]][1] for r in current) + "]") if current else None
    kept = {}
    if joined is not None and len(joined) == len(current):
        kept = {r["id"]: facts for r, facts in zip(current, joined)}
    current_ids = {r["id"] for r in current}
    for rid in current_ids - set(kept):  # a summary that did not decode with the others
        facts = read_summary(summaries[rid][1])
        if facts is not None:
            kept[rid] = facts
    missing = [r["id"] for r in runs if r["id"] not in kept]
    if missing and read_many is not None:
        kept.update(read_many(missing))
    out = []
    for r in runs:
        rid = r["id"]
        facts = kept.get(rid)
        if facts is None:
            facts = facts_of(iter_events(store, rid))
        out.extend((rid, f) for f in facts)
    return out


def run_figures(store, runs: list, kept: dict | None = None, read_many=None) -> list:
    """``[(run_id, figures)]`` of ``runs`` (dicts with ``id``, ``status``, ``last_seq``), in their
    order (:func:`flowctl.store.summary.figures_of`): ``kept`` (run id -> ``(last_seq, figures
    text, facts text)``, the texts as a summary holds them: figures NULL before schema 12) is used
    for a run it describes as it stands (ended, same ``last_seq``), its figures text decoded (the
    figures of every such run in one decode) or, without one, folded from its facts; the other runs'
    figures are folded from :func:`run_facts`."""
    from flowctl.store.records import FINAL
    from flowctl.store.summary import figures_of, read_figures, read_summary

    kept = kept or {}
    current = [r["id"] for r in runs if r["status"] in FINAL and kept.get(r["id"], (None,))[0] == r.get("last_seq")]
    found: dict = {}
    stored = [rid for rid in current if kept[rid][1] is not None]
    if stored:  # the common case in one decode: every figures text is a JSON list, so their texts joined are one
        try:
            joined = json.loads("[" + ",".join(kept[rid][1] for rid in stored) + "]")
        except ValueError:
            joined = None
        if joined is not None and len(joined) == len(stored):
            found = {rid: value for rid, value in zip(stored, joined) if read_figures(value)}
    for rid in current:
        if rid in found:
            continue
        facts = read_summary(kept[rid][2]) if kept[rid][2] is not None else None
        if facts is None and kept[rid][1] is not None:  # figures that did not decode with the others
            try:
                value = json.loads(kept[rid][1])
            except ValueError:
                value = None
            if read_figures(value):
                found[rid] = value
                continue
        if facts is not None:
            found[rid] = figures_of(facts)
    rest = [r for r in runs if r["id"] not in found]
    if rest:
        read: dict = {r["id"]: [] for r in rest}
        for rid, fact in run_facts(store, rest, None, read_many):
            read[rid].append(fact)
        found.update((rid, figures_of(facts)) for rid, facts in read.items())
    return [(r["id"], found[r["id"]]) for r in runs]


_SCAN = json.JSONDecoder().scan_once


def _data(text):
    """An event's data parsed from its stored text as :func:`flowctl.store.records.event_dict`
    parses it (``{"corrupt": True}`` when it is not JSON), by the decoder's scanner itself: the
    stored text is compact JSON, so :func:`json.loads`' whitespace handling is skipped."""
    if text is None:
        return None
    try:
        value, end = _SCAN(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError):
        pass
    return event_dict({"data": text})["data"]  # whitespace around it, or not JSON


def _rows(cur) -> list:
    """The cursor's remaining rows as dicts by column name."""
    names = [c[0] for c in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


class DbapiReads:
    """Queries on a DBAPI cursor, for a class with ``pg`` (bool), ``_cursor()`` (a context
    manager giving a cursor) and ``_dbapi_error`` (the driver's ``Error`` class)."""

    def summary_of(self, run_id: str):
        """``(last_seq, facts text)`` of the summary stored for ``run_id``, or None."""
        p = "%s" if self.pg else "?"
        with self._cursor() as cur:
            cur.execute(f"SELECT last_seq, facts FROM flowctl_run_summaries WHERE run_id = {p}", (run_id,))
            found = cur.fetchone()
        return (found[0], found[1]) if found else None

    def events_page(self, run_id: str, after_seq: int, limit: int) -> list:
        """At most ``limit`` events of ``run_id`` with ``seq > after_seq``, in ``seq`` order (dicts
        as ``events`` returns them): one primary-key range. A packed row is keyed by the ``seq`` of
        its last event, so the rows with ``seq > after_seq`` are exactly those holding such events
        (of the first, the events after ``after_seq``); ``limit`` rows give at least ``limit``
        events. See :func:`flowctl.store.events.iter_events`."""
        p = "%s" if self.pg else "?"
        with self._cursor() as cur:
            cur.execute(f"SELECT seq, ts, type, state, attempt, data, prev_hash, hash, fence, n_events FROM flowctl_events "
                        f"WHERE run_id = {p} AND seq > {p} ORDER BY seq LIMIT {p}", (run_id, int(after_seq), int(limit)))
            rows = cur.fetchall()
        out = []
        after = int(after_seq)
        for seq, ts, typ, state, attempt, text, prev, h, fence, n in rows:
            if len(out) >= limit:  # the rows after hold only events past this page: not unpacked
                break
            if n is None:  # one row per event (schema 6 and before)
                out.append({"run_id": run_id, "seq": seq, "ts": ts, "type": typ, "state": state, "attempt": attempt,
                            "data": _data(text), "prev_hash": prev, "hash": h, "fence": fence, "data_json": text})
            else:
                out.extend(stored_events(run_id, (seq, ts, typ, state, attempt, text, prev, h, fence, n), after))
        return out[:limit] if len(out) > limit else out

    def stats_rows(self, limit: int = 1000, since: float | None = None, flow: str | None = None,
                   top_level: bool = True) -> tuple:
        """See :meth:`flowctl.store.protocol.Store.stats_rows`: one query for the runs (the newest
        of an index; ``since`` is a prefix of that order) and their summaries (schema 9, a primary
        key each); only runs without a current summary — not ended, redriven, ended before schema
        8 — have their events read (:func:`run_facts`)."""
        p = "%s" if self.pg else "?"
        where, params = [], []
        if top_level:
            where.append("r.parent_id IS NULL")
        if flow:
            where.append(f"r.flow = {p}")
            params.append(flow)
        if since is not None:
            where.append(f"r.created_at >= {p}")
            params.append(float(since))
        params.append(int(limit))
        sql = ("SELECT r.id, r.status, r.steps, r.created_at, r.flow, r.last_seq, s.last_seq, s.facts "
               "FROM flowctl_runs r LEFT JOIN flowctl_run_summaries s ON s.run_id = r.id"
               + (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY r.created_at DESC, r.id DESC LIMIT {p}")
        with self._cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
        runs = [{"id": i, "status": st, "steps": n, "created_at": at, "flow": fl, "last_seq": seq}
                for i, st, n, at, fl, seq, _, _ in rows]
        summaries = {r[0]: (r[6], r[7]) for r in rows if r[7] is not None}
        return runs, run_facts(self, runs, summaries, self._facts_from_events)

    def stats_figures(self, limit: int = 1000, since: float | None = None, flow: str | None = None,
                      top_level: bool = True) -> tuple:
        """See :meth:`flowctl.store.protocol.Store.stats_figures`: the query of :meth:`stats_rows`
        reading each summary's figures (schema 12) instead of its facts — the facts only of a
        summary without figures — then :func:`run_figures`."""
        p = "%s" if self.pg else "?"
        where, params = [], []
        if top_level:
            where.append("r.parent_id IS NULL")
        if flow:
            where.append(f"r.flow = {p}")
            params.append(flow)
        if since is not None:
            where.append(f"r.created_at >= {p}")
            params.append(float(since))
        params.append(int(limit))
        sql = ("SELECT r.id, r.status, r.steps, r.created_at, r.flow, r.last_seq, s.last_seq, s.figures, "
               "CASE WHEN s.figures IS NULL THEN s.facts END "
               "FROM flowctl_runs r LEFT JOIN flowctl_run_summaries s ON s.run_id = r.id"
               + (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY r.created_at DESC, r.id DESC LIMIT {p}")
        with self._cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
        runs = [{"id": i, "status": st, "steps": n, "created_at": at, "flow": fl, "last_seq": seq}
                for i, st, n, at, fl, seq, _, _, _ in rows]
        kept = {r[0]: (r[6], r[7], r[8]) for r in rows if r[6] is not None}
        return runs, run_figures(self, runs, kept, self._facts_from_events)

    def _facts_from_events(self, run_ids: list, chunk: int = 200) -> dict:
        """Run id -> the facts of its events, for runs without a current summary (not ended,
        redriven, ended before schema 8): their event rows ``chunk`` runs per query, unpacked."""
        from flowctl.store.summary import facts_of

        p = "%s" if self.pg else "?"
        out = {}
        for lo in range(0, len(run_ids), chunk):
            ids = run_ids[lo:lo + chunk]
            with self._cursor() as cur:
                cur.execute("SELECT run_id, seq, ts, type, state, attempt, data, prev_hash, hash, fence, n_events "
                            f"FROM flowctl_events WHERE run_id IN ({', '.join([p] * len(ids))}) ORDER BY run_id, seq", ids)
                rows = cur.fetchall()
            events: dict = {rid: [] for rid in ids}
            for row in rows:
                events[row[0]].extend(stored_events(row[0], tuple(row[1:])))
            out.update((rid, facts_of(evs)) for rid, evs in events.items())
        return out


class SqlReader(DbapiReads):
    """A SQL store opened for reading through one DBAPI connection (autocommit: every query sees
    the store as committed when it starts). Writes nothing; raises :class:`StoreError` when the
    database fails, :class:`RunNotFound` for an unknown run."""

    durable = True

    def __init__(self, url: str, conn, pg: bool, dbapi_error):
        self.url = url
        self.safe_url = safe_url(url)
        self.pg = pg
        self._conn = conn
        self._dbapi_error = dbapi_error

    @contextlib.contextmanager
    def _cursor(self):
        cur = self._conn.cursor()
        try:
            yield cur
        except self._dbapi_error as exc:
            raise StoreError(f"cannot read {self.safe_url}: {type(exc).__name__}: {first_line(exc)}") from None
        finally:
            cur.close()

    def close(self) -> None:
        self._conn.close()

    def keyring(self, *, create: bool = False):
        """The store's :class:`~flowctl.store.keyring.Keyring` (see :meth:`SqlStore.keyring`); a
        reader never generates a key file."""
        found = getattr(self, "_keyring", None)
        if found is None:
            from flowctl.store.keyring import keyring_for

            found = self._keyring = keyring_for(self.url, create=False)
        return found

    def now(self) -> float:
        """The database clock, epoch seconds (the clock leases are measured with)."""
        sql = ("SELECT CAST(EXTRACT(EPOCH FROM now()) AS DOUBLE PRECISION)" if self.pg
               else "SELECT (julianday('now') - 2440587.5) * 86400.0")
        with self._cursor() as cur:
            cur.execute(sql)
            return float(cur.fetchone()[0])

    def schema_version(self) -> int | None:
        """``flowctl_meta.schema_version``, or None (no such table or row)."""
        try:
            with self._cursor() as cur:
                cur.execute("SELECT value FROM flowctl_meta WHERE key = 'schema_version'")
                row = cur.fetchone()
        except StoreError:
            return None
        return None if row is None else int(row[0])

    def load_definition(self, digest: str) -> dict:
        p = "%s" if self.pg else "?"
        with self._cursor() as cur:
            cur.execute(f"SELECT files FROM flowctl_definitions WHERE digest = {p}", (digest,))
            row = cur.fetchone()
        if row is None:
            raise StoreError(f"definition {digest[:12]} is not in the store")
        return {k: v.encode("utf-8", "surrogateescape") for k, v in json.loads(row[0]).items()}

    def get_run(self, run_id: str, *, exact: bool = False) -> dict:
        """The run with this id, or (unless ``exact``) with this unique id prefix (4 characters or
        more; an index range in code-point order). Raises :class:`RunNotFound`."""
        check_run_id(run_id)
        p = "%s" if self.pg else "?"
        col = 'id COLLATE "C"' if self.pg else "id"
        with self._cursor() as cur:
            cur.execute(f"SELECT * FROM flowctl_runs WHERE id = {p}", (run_id,))
            rows = _rows(cur)
            if not rows and len(run_id) >= 4 and not exact:
                cur.execute(f"SELECT * FROM flowctl_runs WHERE {col} >= {p} AND {col} < {p} ORDER BY {col} LIMIT 2",
                            prefix_bounds(run_id))
                rows = _rows(cur)
                if len(rows) > 1:
                    raise RunNotFound(f"run id prefix '{run_id}' matches several runs",
                                      hint="give more characters: " + ", ".join(r["id"] for r in rows))
        if not rows:
            raise RunNotFound(f"no run '{run_id}' in {self.safe_url}", hint="list runs with: flowctl runs")
        return run_dict(rows[0], self)

    def list_runs(self, status: str | None = None, flow: str | None = None, limit: int = 50,
                  parent_id: str | None = None, top_level: bool = False, *, due_by: float | None = None) -> list:
        """See :meth:`flowctl.store.history.HistoryMethods.list_runs` (the same query, the same indexes)."""
        p = "%s" if self.pg else "?"
        where, params = [], []
        if top_level:
            where.append("parent_id IS NULL")
        for column, value in (("status", status), ("flow", flow), ("parent_id", parent_id)):
            if value:
                where.append(f"{column} = {p}")
                params.append(value)
        if due_by is not None:
            where.append(f"available_at <= {p}")
            params.append(float(due_by))
        sql = "SELECT * FROM flowctl_runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY created_at DESC, id DESC"
        if limit:
            sql += f" LIMIT {p}"
            params.append(int(limit))
        with self._cursor() as cur:
            cur.execute(sql, params)
            return [run_dict(r, self) for r in _rows(cur)]

    def worker_ids(self) -> set:
        """The ids of the workers the store has recorded (live or not)."""
        with self._cursor() as cur:
            cur.execute("SELECT id FROM flowctl_workers")
            return {row[0] for row in cur.fetchall()}

    def events(self, run_id: str) -> list:
        """The run's events in ``seq`` order (all of them: for a long run, use
        :func:`flowctl.store.events.iter_events`)."""
        from flowctl.store.events import iter_events

        return list(iter_events(self, run_id))

    def steps(self, run_id: str) -> list:
        p = "%s" if self.pg else "?"
        with self._cursor() as cur:
            cur.execute(f"SELECT * FROM flowctl_steps WHERE run_id = {p} ORDER BY step_no, attempt", (run_id,))
            return [{k: (loads(v) if k in JSON_STEP else v) for k, v in r.items()} for r in _rows(cur)]


def open_reader(url: str, schema_version: int) -> SqlReader | None:
    """A :class:`SqlReader` on ``url`` (a normalised store URL: ``sqlite:///PATH`` of an existing
    file, or ``postgresql+psycopg://…``) if the store there is at ``schema_version``; None when it
    is not (no tables yet, an older store to upgrade, a newer one) or the address has options
    (``?…``) only SQLAlchemy's URL parsing knows: :func:`flowctl.store.sql.open_store` opens those.
    Raises :class:`StoreError` when the database cannot be reached."""
    if "?" in url:
        return None
    try:
        if url.startswith("sqlite:///"):
            import sqlite3

            conn = sqlite3.connect(url[len("sqlite:///"):], timeout=30, isolation_level=None, check_same_thread=False)
            reader = SqlReader(url, conn, False, sqlite3.Error)
        elif url.startswith("postgresql+psycopg://"):
            import psycopg

            conn = psycopg.connect("postgresql://" + url[len("postgresql+psycopg://"):], autocommit=True)
            reader = SqlReader(url, conn, True, psycopg.Error)
        else:
            return None
    except Exception as exc:  # noqa: BLE001 - connection refused, missing driver and the like
        raise StoreError(f"cannot open store {safe_url(url)}: {first_line(exc)}") from None
    if reader.schema_version() != schema_version:
        reader.close()
        return None
    return reader
