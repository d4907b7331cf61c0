"""SQLAlchemy statements compiled once and run on the DBAPI cursor of an open transaction.

Through SQLAlchemy Core every ``conn.execute`` of even a cached statement pays for its cache key,
parameter processing, execution context and event dispatch: for the gate check's count and two
INSERTs that was most of the check (issue 19's bench: 3 of every 4 samples of the gate's thread
in ``admit_sql`` and the service-log append were SQLAlchemy's). :class:`Compiled` keeps the SQL
text SQLAlchemy produced for the store's dialect and the order of its parameters, and runs it on
the driver's cursor inside the same transaction (:func:`cursor_of`): the same SQL, none of the
per-call machinery. Used only for statements whose parameters are plain values (no type
processing: strings, numbers, None), which is what the gate's rows hold.
"""
from __future__ import annotations


class Compiled:
    """``Compiled(stmt, dialect, column_keys=None)``: ``stmt`` compiled for ``dialect``.
    :meth:`execute` runs it with ``values`` (a dict by bound-parameter name) on a DBAPI cursor."""

    __slots__ = ("sql", "names", "constants", "positional")

    def __init__(self, stmt, dialect, column_keys=None):
        try:  # an IN list's members rendered as parameters of their own (needs every bind to have a value or None)
            compiled = stmt.compile(dialect=dialect, column_keys=column_keys,
                                    compile_kwargs={"render_postcompile": True})
            values = compiled.construct_params()
        except Exception:  # noqa: BLE001 - a bind without a value (an INSERT's columns): no IN list to render
            compiled = stmt.compile(dialect=dialect, column_keys=column_keys)
            values = {name: bind.value for name, bind in compiled.binds.items()
                      if not bind.callable and not bind.required}
        self.sql = str(compiled)
        self.positional = compiled.positiontup is not None
        self.names = tuple(compiled.positiontup) if self.positional else tuple(set(compiled.binds) | set(values))
        #: the values fixed when compiling (a literal LIMIT, an IN list's members; None for the ones
        #: the caller passes)
        self.constants = {name: value for name, value in values.items() if name in self.names}

    def params(self, values: dict):
        if self.positional:
            constants = self.constants
            return [values[n] if n in values else constants[n] for n in self.names]
        out = dict(self.constants)
        out.update((n, values[n]) for n in self.names if n in values)
        return out

    def execute(self, cursor, values: dict):
        cursor.execute(self.sql, self.params(values))
        return cursor


def cursor_of(conn):
    """A DBAPI cursor in the open transaction of ``conn``: a SQLAlchemy connection (what runs on
    the cursor commits or rolls back with it), or a DBAPI connection itself."""
    held = getattr(conn, "connection", None)  # SQLAlchemy's; a DBAPI connection has none
    return (conn if held is None else held.dbapi_connection).cursor()


def cached(store, key, build):
    """The :class:`Compiled` kept on ``store`` under ``key``, made by ``build()`` (a statement, or
    ``(statement, column_keys)``) the first time."""
    cache = store.__dict__.setdefault("_compiled", {})
    found = cache.get(key)
    if found is None:
        made = build()
        stmt, keys = made if isinstance(made, tuple) else (made, None)
        found = cache[key] = Compiled(stmt, store.engine.dialect, keys)
    return found


__all__ = ["Compiled", "cached", "cursor_of"]
