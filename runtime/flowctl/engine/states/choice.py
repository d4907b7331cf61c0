"""``type: choice``: the state does nothing; its transitions (first match in file order) decide."""
from __future__ import annotations


def run(ctx, state):
    """The response stays as it was: the transitions read the scope."""
    return ctx.cursor.response


__all__ = ["run"]
