"""Review tokens: made here, shown once (in ``RunResult.review`` or to a notify tool), stored only
as their SHA-256 hex digest in the pending review (``token_hash``)."""
from __future__ import annotations

import hashlib
import secrets

#: after TOKEN_ATTEMPTS wrong tokens within TOKEN_WINDOW seconds a run refuses every token (the
#: right one too) until the oldest of them leaves the window; a reissued token resets it.
TOKEN_ATTEMPTS = 5
TOKEN_WINDOW = 900.0


def hash_token(token: str) -> str:
    """The stored form of ``token``: 64 hex digits."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple:
    """``(token, its hash)``: 32 URL-safe characters (192 random bits) and :func:`hash_token` of it."""
    token = secrets.token_urlsafe(24)
    return token, hash_token(token)


__all__ = ["TOKEN_ATTEMPTS", "TOKEN_WINDOW", "hash_token", "new_token"]
