"""One module per state type, and the table the step loop dispatches on.

A handler is ``fn(ctx: RunContext, state) -> response | DONE | PARKED`` (see
:mod:`flowctl.engine.context`): the state's response (the loop then takes a transition), ``DONE``
(the handler moved the run or ended it) or ``PARKED`` (committed waiting or paused). Errors it
raises go through the error layers. Adding a state type: its model in
:mod:`flowctl.definition.model` (``STATE_MODELS``), one module here, one entry in ``HANDLERS``.
"""
from __future__ import annotations

from flowctl.engine.states import agent, choice, llm, map, parallel, pass_, review, subflow, task, terminal, wait

HANDLERS = {
    "task": task.run,
    "choice": choice.run,
    "pass": pass_.run,
    "review": review.run,
    "wait": wait.run,
    "parallel": parallel.run,
    "map": map.run,
    "subflow": subflow.run,
    "llm": llm.run,
    "agent": agent.run,
    "succeed": terminal.succeed,
    "fail": terminal.fail,
}

__all__ = ["HANDLERS"]
