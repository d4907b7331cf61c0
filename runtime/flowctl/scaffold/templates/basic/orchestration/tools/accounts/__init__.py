"""The sign-up example's tools: accounts and welcome mails in one SQLite file (:mod:`.store`).

``flowctl_sandbox`` is the hook ``flowctl test --contracts`` looks for in a tool package: inside
it, the real tools act on a throwaway database, so the contracts' examples run without touching
yours.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager


@contextmanager
def flowctl_sandbox(contract=None):
    folder = tempfile.mkdtemp(prefix="accounts-sandbox-")
    previous = os.environ.get("ACCOUNTS_DB")
    os.environ["ACCOUNTS_DB"] = os.path.join(folder, "accounts.sqlite")
    try:
        yield folder
    finally:
        if previous is None:
            os.environ.pop("ACCOUNTS_DB", None)
        else:
            os.environ["ACCOUNTS_DB"] = previous
        shutil.rmtree(folder, ignore_errors=True)
