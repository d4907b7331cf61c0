"""Old home of the run machinery, kept so code that imports it by its old names still works.

The machinery now lives in :mod:`flowctl.engine.lifecycle` (start, resume, recover, remind,
reissue), :mod:`flowctl.engine.cancel`, :mod:`flowctl.engine.loop` (:class:`Runner`, the step loop
and error layers) and :mod:`flowctl.engine.result`; nothing here is new.
"""
from __future__ import annotations

from flowctl.engine.cancel import cancel, finish_cancel
from flowctl.engine.lifecycle import fire_due_reviews, recover, reissue_token, remind, resume, start
from flowctl.engine.loop import LIMIT_ERRORS, PATH_KEPT, Runner
from flowctl.engine.result import result_from_row
from flowctl.engine.tokens import TOKEN_ATTEMPTS, TOKEN_WINDOW

__all__ = ["start", "resume", "recover", "cancel", "finish_cancel", "fire_due_reviews", "remind", "reissue_token",
           "Runner", "result_from_row", "PATH_KEPT", "LIMIT_ERRORS", "TOKEN_ATTEMPTS", "TOKEN_WINDOW"]
