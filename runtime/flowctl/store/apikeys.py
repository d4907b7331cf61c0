"""API keys of ``flowctl serve``: created once, stored hashed, scoped, revocable.

A key is printed once, when it is created, as ``fck_<key id>_<secret>``: the key id (12 hex
digits) is public and names the row; the secret is 32 random bytes (:func:`secrets.token_bytes`),
urlsafe base64. The store keeps only ``sha256(secret)`` (hex). A presented key is looked up by its
id and its secret's digest compared with :func:`hmac.compare_digest` (constant time).

Why SHA-256 and not scrypt or PBKDF2: those slow down guessing a *low-entropy* secret (a password).
A 256-bit random secret cannot be guessed whatever the hash costs, so a slow KDF would only add
milliseconds to every request (the gate check's latency budget is a few milliseconds) without
making a stolen table any more useful.

Scopes (:data:`SCOPES`): ``gate`` (ask the gate), ``runs:read``, ``runs:write`` (submit, cancel),
``reviews`` (list and decide), ``invoke:<tool>`` (have flowctl call a contract's tool), ``admin``
(every scope). Names are 1-32 characters of ``a-z 0-9 _ -``; a revoked key stays listed (with when
it was revoked) and its name is not reused.

Storage: the table ``flowctl_api_keys`` in the run store (SQLite or PostgreSQL), created on first
use (``CREATE TABLE IF NOT EXISTS``; it needs no schema version: no other table changes), or a
dict on a :class:`~flowctl.store.memory.MemoryStore` (keys then live as long as the process).
Shapes: a key row ``{key_id, name, scopes: [str], created_at, created_by, revoked_at}``; times
epoch seconds. Errors: :class:`~flowctl.errors.UsageError` (bad name or scope, a name in use, no
such key), :class:`~flowctl.errors.StoreError` (the database failed).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import threading
import time

from flowctl.errors import StoreError, UsageError, first_line

#: Fixed scopes; ``invoke:<tool>`` names one contract id.
SCOPES = ("gate", "runs:read", "runs:write", "reviews", "admin")
PREFIX = "fck_"
_NAME = re.compile(r"^[a-z0-9_-]{1,32}$")
_TOOL = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_KEY = re.compile(r"^fck_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")


def check_scope(scope: str) -> str:
    """``scope`` if it is one of :data:`SCOPES` or ``invoke:<contract id>``; raises UsageError."""
    if scope in SCOPES or (scope.startswith("invoke:") and _TOOL.match(scope[len("invoke:"):])):
        return scope
    raise UsageError(f"unknown scope {scope!r}", hint="scopes: " + ", ".join(SCOPES) + ", invoke:<tool>")


def allows(scopes, needed: str) -> bool:
    """Whether a key with ``scopes`` may do what ``needed`` names (``admin`` may do everything)."""
    return "admin" in scopes or needed in scopes


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def new_key() -> tuple:
    """``(key id, secret, printed key)`` for a new key."""
    key_id = secrets.token_hex(6)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii").rstrip("=")
    return key_id, secret, f"{PREFIX}{key_id}_{secret}"


def parse_key(presented: str):
    """``(key id, secret)`` of a presented key, or None when it is not shaped like one."""
    m = _KEY.match(presented or "")
    return (m.group(1), m.group(2)) if m else None


class _Keys:
    """What both stores share: validation, creation, verification. Subclasses keep the rows."""

    def create(self, name: str, scopes, *, by: str | None = None) -> tuple:
        """Create key ``name`` with ``scopes``: ``(row, printed key)``; the key is never shown again."""
        if not _NAME.match(name or ""):
            raise UsageError(f"key name {name!r} must be 1-32 characters of a-z, 0-9, _ and -")
        if name == "access":  # a key's default session is its name: this one is the service log's own
            raise UsageError("key name 'access' is reserved: it is the service log's session of refusals",
                             hint="choose another name")
        scopes = sorted({check_scope(s) for s in scopes})
        if not scopes:
            raise UsageError("a key needs at least one --scope", hint="e.g. --scope gate")
        key_id, secret, printed = new_key()
        row = {"key_id": key_id, "name": name, "scopes": scopes, "created_at": time.time(),
               "created_by": by, "revoked_at": None}
        self._insert(dict(row, secret_hash=digest(secret)))
        return row, printed

    def verify(self, presented: str):
        """The live key row ``presented`` is, or None (malformed, unknown, wrong secret, revoked)."""
        parsed = parse_key(presented)
        if parsed is None:
            return None
        row = self._by_id(parsed[0])
        if row is None:
            hmac.compare_digest(digest(parsed[1]), "0" * 64)  # the same work whether the id exists or not
            return None
        ok = hmac.compare_digest(digest(parsed[1]), row["secret_hash"])
        if not ok or row.get("revoked_at") is not None:
            return None
        return {k: v for k, v in row.items() if k != "secret_hash"}

    def any_live(self) -> bool:
        return any(r["revoked_at"] is None for r in self.list())


class MemoryKeys(_Keys):
    """Keys of an in-memory store (they live as long as the process)."""

    def __init__(self):
        self._rows: dict = {}
        self._lock = threading.Lock()

    def _insert(self, row):
        with self._lock:
            if any(r["name"] == row["name"] for r in self._rows.values()):
                raise UsageError(f"a key named {row['name']!r} exists", hint="revoked names are not reused")
            self._rows[row["key_id"]] = row

    def _by_id(self, key_id):
        return self._rows.get(key_id)

    def list(self) -> list:
        return sorted(({k: v for k, v in r.items() if k != "secret_hash"} for r in self._rows.values()),
                      key=lambda r: r["name"])

    def revoke(self, name: str) -> dict:
        with self._lock:
            for r in self._rows.values():
                if r["name"] == name:
                    if r["revoked_at"] is None:
                        r["revoked_at"] = time.time()
                    return {k: v for k, v in r.items() if k != "secret_hash"}
        raise UsageError(f"no key named {name!r}", hint="flowctl keys list")


_COLUMNS = ("key_id", "name", "secret_hash", "scopes", "created_at", "created_by", "revoked_at")
_BY_ID_SQL = f"SELECT {', '.join(_COLUMNS)} FROM flowctl_api_keys WHERE key_id = ?"


def _table(sa):
    meta = sa.MetaData()
    return sa.Table("flowctl_api_keys", meta,
                    sa.Column("key_id", sa.String(12), primary_key=True),
                    sa.Column("name", sa.String(32), nullable=False, unique=True),
                    sa.Column("secret_hash", sa.String(64), nullable=False),
                    sa.Column("scopes", sa.Text, nullable=False),
                    sa.Column("created_at", sa.Float, nullable=False),
                    sa.Column("created_by", sa.String(200)),
                    sa.Column("revoked_at", sa.Float))


class SqlKeys(_Keys):
    """Keys in the SQL store's ``flowctl_api_keys`` table (created on first use)."""

    def __init__(self, store):
        self.store = store
        self.sa = sa = store.sa
        self.t = _table(sa)
        try:
            with store.engine.begin() as conn:
                self.t.metadata.create_all(conn, checkfirst=True)
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"cannot create the key table in {store.safe_url}: {exc.orig}") from None
        self._by_id_sql = sa.select(self.t).where(self.t.c.key_id == sa.bindparam("k"))  # once: every request reads it
        self._idle: list = []  # SQLite: connections for key lookups, not in use
        self._lock = threading.Lock()

    def _row(self, r) -> dict:
        out = dict(r)
        out["scopes"] = json.loads(out["scopes"])
        return out

    def _insert(self, row):
        sa = self.sa
        try:
            with self.store._begin() as conn:
                if conn.execute(sa.select(self.t.c.key_id).where(self.t.c.name == row["name"])).first():
                    raise UsageError(f"a key named {row['name']!r} exists", hint="revoked names are not reused")
                conn.execute(self.t.insert().values(**dict(row, scopes=json.dumps(row["scopes"]))))
        except sa.exc.IntegrityError:
            raise UsageError(f"a key named {row['name']!r} exists") from None

    def _by_id(self, key_id):
        """The row of ``key_id`` or None; the database's failure is a :class:`StoreError` (every
        request reads this: a driver's own error would reach the server as a bug, a 500)."""
        try:
            if not self.store.pg:  # see _by_id_sqlite
                return self._by_id_sqlite(key_id)
            with self.store.engine.connect() as conn:
                r = conn.execute(self._by_id_sql, {"k": key_id}).mappings().first()
        except (self.sa.exc.DBAPIError, self.store.engine.dialect.dbapi.Error) as exc:
            cause = getattr(exc, "orig", None) or exc
            raise StoreError(f"cannot read the API keys of {self.store.safe_url}: {type(cause).__name__}: "
                             f"{first_line(cause)}", hint="the request was not served; retry when the store is back") from None
        return None if r is None else self._row(r)

    def _by_id_sqlite(self, key_id):
        """The row read on a DBAPI connection of the keys' own (a few kept idle), in autocommit: a
        SQLAlchemy connection on the SQLite store begins with ``BEGIN IMMEDIATE`` (its write lock),
        so every request's key lookup used to queue behind the gate checks' writes, and a checkout
        from SQLAlchemy's pool (its events, the rollback on return) cost ten times the SELECT. A
        plain SELECT reads the last committed state (WAL), so a revocation is seen by the next request."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            proxied = self.store.engine.raw_connection()  # the pool's connect hooks (pragmas) ran
            proxied.detach()  # ours from now on
            conn = proxied.dbapi_connection
        try:
            r = conn.execute(_BY_ID_SQL, (key_id,)).fetchone()
        except BaseException:
            conn.close()  # it may be broken: the next lookup opens another
            raise
        with self._lock:
            keep = len(self._idle) < _IDLE
            if keep:
                self._idle.append(conn)
        if not keep:
            conn.close()
        return None if r is None else self._row(dict(zip(_COLUMNS, r)))

    def list(self) -> list:
        t = self.t
        with self.store.engine.connect() as conn:
            rows = conn.execute(self.sa.select(t).order_by(t.c.name)).mappings().all()
        return [{k: v for k, v in self._row(r).items() if k != "secret_hash"} for r in rows]

    def revoke(self, name: str) -> dict:
        t = self.t
        with self.store._begin() as conn:
            conn.execute(t.update().where(t.c.name == name, t.c.revoked_at.is_(None)).values(revoked_at=time.time()))
            r = conn.execute(self.sa.select(t).where(t.c.name == name)).mappings().first()
        if r is None:
            raise UsageError(f"no key named {name!r}", hint="flowctl keys list")
        return {k: v for k, v in self._row(r).items() if k != "secret_hash"}


#: idle connections the SQLite key lookups keep
_IDLE = 4


def keys_of(store):
    """The key table of ``store``: :class:`SqlKeys` for an SQL store, else one :class:`MemoryKeys`
    kept on the store object (the same one for every caller in the process)."""
    if getattr(store, "engine", None) is not None and getattr(store, "sa", None) is not None:
        return SqlKeys(store)
    found = store.__dict__.get("_api_keys")
    if found is None:
        found = store.__dict__["_api_keys"] = MemoryKeys()
    return found


__all__ = ["SCOPES", "MemoryKeys", "SqlKeys", "allows", "check_scope", "keys_of", "parse_key"]
