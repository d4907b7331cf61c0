"""The triage example's tools: a tiny shop (orders and refunds) in one SQLite file (:mod:`.shop`).

``flowctl_sandbox`` is the hook ``flowctl test --contracts`` looks for in a tool package: inside
it, the real tools act on a throwaway shop, so the contracts' examples run without touching yours.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager


@contextmanager
def flowctl_sandbox(contract=None):
    folder = tempfile.mkdtemp(prefix="support-sandbox-")
    previous = os.environ.get("SHOP_DB")
    os.environ["SHOP_DB"] = os.path.join(folder, "shop.sqlite")
    try:
        yield folder
    finally:
        if previous is None:
            os.environ.pop("SHOP_DB", None)
        else:
            os.environ["SHOP_DB"] = previous
        shutil.rmtree(folder, ignore_errors=True)
