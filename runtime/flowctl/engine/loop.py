"""The step loop and the error layers: :class:`Runner` drives one run until it ends or parks.

One step: the checkpoint flags first (a sibling's stop, a worker's halt, a cancel to finish, a
handler's action to finish, an operator's pause request that the last commit handed back:
:mod:`flowctl.engine.pause`), then enter the state (:meth:`Runner.enter`: limits, visits, path),
run its handler (:data:`flowctl.engine.states.HANDLERS`) and, when it returned a response, take a
transition (:func:`flowctl.engine.transitions.advance`). An error goes through the layers: the
state's ``on_error``, the flow's ``on_error``, then the default (compensate and fail); limit
errors skip the handlers. A handler's action is kept in ``cursor.after_compensation`` and carried
out after compensating, so a crash in between resumes it.
"""
from __future__ import annotations

from flowctl.engine import saga, spans
from flowctl.engine.calls import run_fallback
from flowctl.engine.cancel import finish_cancel, stopped_by_sibling
from flowctl.engine.context import DONE, PARKED, RunContext
from flowctl.engine import lean as lean_steps
from flowctl.engine.lean import PATH_KEPT, enter
from flowctl.engine.pause import pause_here
from flowctl.engine.result import RunResult
from flowctl.engine.states import HANDLERS
from flowctl.engine.transitions import advance
from flowctl.errors import (FlowctlError, MaxStepsExceeded, RunTimeout, StepError, error_record, handler_names,
                            run_error)
from flowctl.expr.expressions import RECORDER, Recorder
from flowctl.expr.scope import apply_set

LIMIT_ERRORS = (MaxStepsExceeded, RunTimeout)


class Runner(RunContext):
    """A :class:`~flowctl.engine.context.RunContext` that drives its run (:meth:`drive`)."""

    def drive(self) -> RunResult:
        """Step until the run ends, parks, or a checkpoint flag stops it; the run as it then stands."""
        factory = getattr(self.engine, "recorder_factory", None)
        recorder = factory(self) if factory is not None else Recorder(self.clock)
        token = RECORDER.set(recorder)
        self.recorder = recorder
        halt = getattr(self.engine, "halt", None)  # a worker's checkpoint flag (flowctl.workers.worker.Worker.halt)
        c = self.cursor
        states = self.project.states
        spans.begin(self)
        try:
            while not c.done:
                if self.stop is not None and self.stop.is_set():
                    stopped_by_sibling(self)
                    break
                if halt is not None and halt(self.id):
                    if self.deferred:  # what the next step's commit would have carried
                        self.commit()
                    break  # stays running, its last checkpoint committed: the worker cancels or releases it
                if c.cancelling:  # a cancel owned the run and its process stopped
                    finish_cancel(self)
                    break
                if c.after_compensation:
                    if self.finish_handler(c.after_compensation) is PARKED:  # a fallback waits for its gate review
                        break
                    continue
                if self.pause_request is not None:  # handed back by the last commit (flowctl.engine.pause)
                    self.pause_now()
                    break
                state = states[c.state]
                if (self.step(state) if self.span is None else self.traced_step(state)) is PARKED:
                    break
        finally:
            RECORDER.reset(token)
            self.recorder = None
            if self.span is not None:
                spans.finish(self)
        return self.result()

    def pause_now(self) -> None:
        """Park the run ``paused`` as the request the last commit handed back asks
        (:func:`flowctl.engine.pause.pause_here`): at the step loop's checkpoint, or after a failed
        attempt's commit (:mod:`flowctl.engine.retry`, which so needs no import of the pause module)."""
        pause_here(self, self.pause_request)

    def traced_step(self, state):
        """:meth:`step` inside its OpenTelemetry span (tracing on): outcome ok, parked or failed."""
        span = spans.step(self, state)
        before = self.cursor.error
        try:
            result = self.step(state)
        except BaseException as exc:
            spans.end_step(self, span, "crashed", error=exc)
            raise
        error = self.cursor.error
        failed = error is not None and error is not before
        spans.end_step(self, span, "parked" if result is PARKED else "failed" if failed else "ok",
                       error=error if failed else None)
        return result

    def step(self, state):
        """One step of ``state``: enter, handle, transition; errors through the layers. ``PARKED``
        when the run parked, else None."""
        try:
            lean = lean_steps.lean_step(self, state)
            if lean is not None:
                return lean_steps.run(self, lean)
            if not self.cursor.entered:
                self.enter(state)
            handler = HANDLERS.get(state.type)
            if handler is None:
                raise StepError(f"state type '{state.type}' ({state.id}) is not supported by this engine")
            response = handler(self, state)
            if response is PARKED:
                return PARKED
            if response is not DONE:
                advance(self, state, response)
        except LIMIT_ERRORS as exc:
            self.fail_with(state, exc)
        except Exception as exc:  # noqa: BLE001 - every error goes through the layers
            if isinstance(exc, FlowctlError) and not isinstance(exc, StepError):
                raise
            try:
                self.handle_error(state, exc)
            except Exception as during:  # noqa: BLE001 - a handler failed (e.g. its set): fail the run
                if isinstance(during, FlowctlError) and not isinstance(during, StepError):
                    raise
                self.emit("handler_failed", state.id, self.cursor.attempt, error=type(during).__name__,
                          message=str(during))
                self.fail_with(state, during)
        return None

    def enter(self, state) -> None:
        """Count the step and the visit (raising ``MaxStepsExceeded`` / ``RunTimeout`` over the
        flow's limits), append to the path, record ``state_entered``."""
        enter(self, state.id, state.type, self.flow.limits)

    # ------------------------------------------------------------------ error layers
    def handle_error(self, state, exc, *, skip_state_layer: bool = False) -> None:
        """Find the first ``on_error`` handler (the state's, then the flow's) matching ``exc`` and
        keep its action; none: the default (compensate, fail)."""
        c = self.cursor
        err = error_record(exc, state.id, c.attempt)
        c.error = err
        names = handler_names(exc)
        layers = [] if skip_state_layer else [("state", state.on_error)]
        layers.append(("flow", self.flow.on_error))
        for layer, handlers in layers:
            for index, h in enumerate(handlers):
                if "*" in h.errors or any(n in h.errors for n in names):
                    self.emit("error_caught", state.id, c.attempt, error=err, layer=layer, handler=index,
                              line=h.line())
                    self.run_handler(state, h, err)
                    return
        self.emit("error_caught", state.id, c.attempt, error=err, layer="default", handler=None)
        self.fail_with(state, exc, err=err)

    def fail_with(self, state, exc, *, err=None) -> None:
        """Compensate, then fail the run with ``exc`` (kept as ``after_compensation``; committed)."""
        err = err or error_record(exc, state.id, self.cursor.attempt)
        self.cursor.error = err
        self.cursor.after_compensation = {"fail": err, "compensate": True}
        self.commit()

    def run_handler(self, state, h, err) -> None:
        """Apply handler ``h``'s ``set`` and keep its action (goto, fallback or fail); committed."""
        c = self.cursor
        if h.set:
            c.context = apply_set(c.context, h.set, self.scope(), h.where("set"), check=self.check_size)
        if h.goto:
            action = {"goto": h.goto, "compensate": bool(h.compensate)}
        elif h.fallback:
            action = {"fallback": h.fallback, "state": state.id, "compensate": bool(h.compensate)}
        elif h.fail:
            action = {"fail": run_error(h.fail, err["message"], state.id), "compensate": h.compensate is not False}
        else:
            action = {"fail": err, "compensate": h.compensate is not False}
        c.after_compensation = action
        self.commit()

    def finish_handler(self, action: dict):
        """Carry out a handler's action, compensating first if asked (resumable after a crash);
        ``PARKED`` when a fallback tool waits for its gate review (it runs on resume)."""
        if action.get("compensate"):
            saga.compensate(self, reason="handler")
        c = self.cursor
        c.after_compensation = None
        if "goto" in action:
            self.goto(action["goto"])
        elif "fallback" in action:
            state = self.project.states[action["state"]]
            try:
                response = run_fallback(self, state, action["fallback"])
                if response is PARKED:  # compensated already: the fallback alone runs on resume
                    c.after_compensation = dict(action, compensate=False)
                    self.commit()
                    return PARKED
                advance(self, state, response)
            except LIMIT_ERRORS as exc:
                self.fail_with(state, exc)
            except Exception as exc:  # noqa: BLE001
                if isinstance(exc, FlowctlError) and not isinstance(exc, StepError):
                    raise
                self.handle_error(state, exc, skip_state_layer=True)
        else:
            self.finish_failed(action["fail"])
        return None


__all__ = ["Runner", "PATH_KEPT", "LIMIT_ERRORS"]
