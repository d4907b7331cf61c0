"""The sandbox ``flowctl test --contracts`` runs the shop tools in: a throwaway shop database.

``flowctl_sandbox(contract)`` is the hook flowctl looks for in a tool package (see
``flowctl.testing.contract_tests``): a context manager inside which the real tools act on a
temporary copy of a freshly seeded shop database — ``FLOWCTL_SHOP_DB`` points at the copy and is
restored afterwards, and the copy is deleted. Each example gets its own copy of the same seed, so
examples do not see each other's refunds or mails, nor what earlier runs did to your
``.flowctl/shop.db``.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from . import db

_template: Path | None = None


def _seeded() -> Path:
    """A seeded shop database, made once per process (seeding builds every table and row)."""
    global _template
    if _template is None or not _template.exists():
        folder = Path(tempfile.mkdtemp(prefix="flowctl-shop-seed-"))
        atexit.register(shutil.rmtree, folder, True)
        _template = db.seed(folder / "shop.db")
    return _template


@contextmanager
def flowctl_sandbox(contract=None):
    folder = Path(tempfile.mkdtemp(prefix="flowctl-shop-"))
    path = folder / "shop.db"
    shutil.copyfile(_seeded(), path)
    previous = os.environ.get("FLOWCTL_SHOP_DB")
    os.environ["FLOWCTL_SHOP_DB"] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop("FLOWCTL_SHOP_DB", None)
        else:
            os.environ["FLOWCTL_SHOP_DB"] = previous
        shutil.rmtree(folder, ignore_errors=True)
