"""Encryption at rest of the run-row fields a live run needs in plaintext (input, params, cursor).

Only runs whose flow (or a flow it starts, or the run that started it) uses a contract with
``sensitive`` fields are encrypted (see :mod:`flowctl.engine.sensitive`). A sealed field is stored as
text::

    fcenc1:<key id>:<urlsafe base64 of nonce (12 bytes) || AES-256-GCM ciphertext and tag>

with the run id and the column name as associated data, so a sealed value copied into another run
or column does not open. ``<key id>`` is the first 8 hex digits of the key's SHA-256. JSON text
never starts with ``fcenc1:``, so rows written before (or of runs without secrets) load as they
are: no schema change.

Keys (:func:`keyring_for`): ``FLOWCTL_SECRET_KEY`` holds one or more keys, each 32 bytes in
urlsafe base64 (a Fernet key: ``flowctl secrets keygen`` prints one), separated by commas or
whitespace. The first encrypts, every one decrypts (rotation: put the new key first, run
``flowctl secrets rotate``, then drop the old one). Without the variable, a SQLite file store
uses the key in ``<store>.key`` beside it, generated once with mode 0600; a PostgreSQL store
refuses (:class:`~flowctl.errors.SecretKeyError`): every worker must share one key. With the
variable set, a SQLite store's key file (if any) still decrypts.

``cryptography`` is imported on first use only (``flowctl validate`` never imports it).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import stat
from pathlib import Path

from flowctl.errors import SecretKeyError

PREFIX = "fcenc1:"
ENV = "FLOWCTL_SECRET_KEY"
NONCE_BYTES = 12


class Sealed(str):
    """A sealed field's stored text; ``plain`` is the value it seals (for the store's own look at a
    cursor being written, e.g. a review's due time)."""

    plain = None


def new_key() -> str:
    """A fresh key: 32 random bytes, urlsafe base64 (44 characters)."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")


def _parse_key(text: str, where: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4))
    except (ValueError, UnicodeEncodeError):
        raw = b""
    if len(raw) != 32:
        raise SecretKeyError(f"{where} holds a key that is not 32 bytes of urlsafe base64 ({len(text)} characters)",
                             hint="make one with: flowctl secrets keygen")
    return raw


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


class Keyring:
    """Keys in order: ``keys[0]`` seals, every key opens. ``source`` says where they came from."""

    def __init__(self, keys: list, source: str):
        if not keys:
            raise SecretKeyError(f"{source} holds no key", hint="make one with: flowctl secrets keygen")
        self.keys = list(keys)
        self.source = source
        self.ids = [key_id(k) for k in self.keys]
        self._ciphers: dict = {}
        self._digest_key = hmac.new(self.keys[0], b"flowctl idempotency key digest", hashlib.sha256).digest()

    def _cipher(self, i: int):
        found = self._ciphers.get(i)
        if found is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # lazily: validate never needs it

            found = self._ciphers[i] = AESGCM(self.keys[i])
        return found

    def seal(self, text: str, aad: str) -> str:
        """``text`` encrypted under the first key, bound to ``aad`` (``"<run id>/<column>"``)."""
        nonce = os.urandom(NONCE_BYTES)
        body = self._cipher(0).encrypt(nonce, text.encode("utf-8", "surrogatepass"), aad.encode("utf-8"))
        return f"{PREFIX}{self.ids[0]}:{base64.urlsafe_b64encode(nonce + body).decode('ascii')}"

    def open(self, sealed: str, aad: str) -> str:
        """The text :meth:`seal` sealed. Raises :class:`SecretKeyError` when no key opens it."""
        try:
            kid, body = sealed[len(PREFIX):].split(":", 1)
            blob = base64.urlsafe_b64decode(body.encode("ascii"))
        except ValueError:
            raise SecretKeyError(f"the sealed {aad} is damaged", hint="restore the store from a backup") from None
        if kid not in self.ids:
            raise SecretKeyError(f"no key in {self.source} opens {aad} (sealed with key {kid}; keys here: "
                                 f"{', '.join(self.ids)})",
                                 hint=f"add the key it was sealed with to {ENV} (keys separated by commas; the first encrypts)")
        from cryptography.exceptions import InvalidTag

        try:
            plain = self._cipher(self.ids.index(kid)).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad.encode("utf-8"))
        except (InvalidTag, ValueError):
            raise SecretKeyError(f"the sealed {aad} does not open with key {kid}: it was altered or moved from another run",
                                 hint="restore the store from a backup") from None
        return plain.decode("utf-8", "surrogatepass")

    def digest(self, text: str) -> str:
        """A keyed digest (HMAC-SHA256) of ``text``: equal texts give equal digests under one key,
        and a guessable secret (a card number) cannot be found from it without the key."""
        return "hmac:" + hmac.digest(self._digest_key, text.encode("utf-8", "surrogatepass"), "sha256").hex()

    def needs_rotation(self, sealed: str) -> bool:
        return not sealed.startswith(f"{PREFIX}{self.ids[0]}:")


_SPLIT = re.compile(r"[\s,]+")


def _key_file(url: str) -> Path | None:
    """``<db>.key`` beside a SQLite file store; None for PostgreSQL and in-memory SQLite."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):]
    if not path or path == ":memory:":
        return None
    return Path(path + ".key")


def _read_key_file(path: Path) -> bytes:
    try:
        st = path.stat()
        if st.st_mode & 0o077:
            raise SecretKeyError(f"key file {path} can be read by others (mode {stat.S_IMODE(st.st_mode):o})",
                                 hint=f"chmod 600 {path}")
        return _parse_key(path.read_text().strip(), f"key file {path}")
    except OSError as exc:
        raise SecretKeyError(f"cannot read key file {path}: {exc.strerror}") from None


def _create_key_file(path: Path) -> bytes:
    """Write a new key to ``path`` (mode 0600) unless another process just did; return the key."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(new_key() + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic: never a half-written key file, and the first writer wins
        except FileExistsError:
            pass
    except OSError as exc:
        raise SecretKeyError(f"cannot create key file {path}: {exc.strerror}",
                             hint=f"set {ENV}, or make the store's folder writable") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return _read_key_file(path)


def keyring_for(url: str, *, create: bool = True) -> Keyring:
    """The keys of the store at ``url`` (a normalised store URL; see the module docstring).
    ``create``: generate a SQLite store's key file when it has none. Raises
    :class:`SecretKeyError`."""
    env = os.environ.get(ENV, "").strip()
    path = _key_file(url)
    keys = [_parse_key(k, ENV) for k in _SPLIT.split(env) if k] if env else []
    if env:
        if path is not None and path.exists():
            extra = _read_key_file(path)
            if extra not in keys:
                keys.append(extra)  # opens what was sealed before the variable was set
        return Keyring(keys, ENV)
    if path is not None:
        if path.exists():
            return Keyring([_read_key_file(path)], f"key file {path}")
        if not create:
            raise SecretKeyError(f"a run in the store is sealed, but there is no key file {path} and {ENV} is not set",
                                 hint=f"restore {path.name} beside the store from a backup, or set {ENV} to the key")
        return Keyring([_create_key_file(path)], f"key file {path}")
    if url.startswith("sqlite"):  # an in-memory database lives no longer than this process
        return Keyring([os.urandom(32)], "an in-process key")
    raise SecretKeyError(f"{ENV} is not set: runs of flows with sensitive fields on a PostgreSQL store need it "
                         "(every worker must use the same key)",
                         hint=f"make one with: flowctl secrets keygen; then export {ENV}=<key> for every flowctl process")
