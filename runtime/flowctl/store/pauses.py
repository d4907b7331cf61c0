"""Pause requests in the SQL store (schema 8): ``flowctl pause`` writes one, the step loop reads it.

A request is ``{by, reason, at}`` (``at``: epoch seconds, database clock) in the run's
``pause_requested`` column. It is written outside the run's event chain, as ``cancel_requested`` is,
and is not part of the run's seal; what the run's log says of it is the ``run_paused`` event the
engine records when it pauses (:mod:`flowctl.engine.pause`). Every per-step commit hands the column
back (``RETURNING``, :meth:`flowctl.store.core.SqlStore.commit`), so the loop never reads it itself.
"""
from __future__ import annotations

from flowctl.store.records import FINAL, dumps, loads


class PauseMethods:
    """Mixed into :class:`~flowctl.store.core.SqlStore`."""

    def request_pause(self, run_id: str, request: dict) -> tuple:
        """Record ``request`` (``{by, reason}``; the time is added) on ``run_id`` unless one stands
        already or the run ended: one conditioned UPDATE, so two requests at once keep the first.
        Returns ``(standing, new)``: the request that now stands (None: the run ended or is not
        there) and whether it is this one. Raises :class:`StoreError` when the database fails."""
        sa, r = self.sa, self.t.runs
        with self._begin() as conn:
            now = float(conn.execute(sa.select(self.now_expr)).scalar_one())
            wanted = dict(request, at=now)
            res = conn.execute(r.update().where(r.c.id == run_id, r.c.pause_requested.is_(None),
                                                r.c.status.notin_(sorted(FINAL)))
                               .values(pause_requested=dumps(wanted)))
            if res.rowcount == 1:
                return wanted, True
            found = conn.execute(sa.select(r.c.status, r.c.pause_requested).where(r.c.id == run_id)).first()
        if found is None or found[0] in FINAL:
            return None, False
        return loads(found[1]), False


__all__ = ["PauseMethods"]
