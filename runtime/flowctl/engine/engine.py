"""The interpreter: ``Engine(project, store).run(flow, input) -> RunResult``.

One step: enter state -> (task) build input -> validate against the state's and the contract's
``input_schema`` -> policy gate -> commit a ``started`` record (side effects only) -> invoke the
tool with its idempotency key and timeout -> validate output -> verify (side effects) -> record
-> pick the transition (first match in file order) -> apply ``set`` -> checkpoint (one
transaction with the step's events).

Errors pass through layers in order (as ASL Retry then Catch): the state's ``retry``, the state's
``on_error``, the flow's ``on_error``, then the default: compensate completed side effects newest
first and fail the run with the error's code. In each ``on_error`` list the first matching rule
wins. Limit errors (``MaxStepsExceeded``, ``RunTimeout``) skip the handlers: they compensate and
fail. A ``fail`` state ends the run without compensating.

Runs are durable: a run that is waiting (a timer or a retry delay longer than
``max_inline_wait`` seconds), paused for review, or whose process died, continues with
:meth:`Engine.resume`; :meth:`Engine.recover` continues every such run that is due. A resumed run
uses the definition snapshot it started with.

The per-run machinery: :mod:`flowctl.engine.lifecycle` (start, resume, recover), the step loop
:mod:`flowctl.engine.loop`, the state handlers :mod:`flowctl.engine.states`, cancel
:mod:`flowctl.engine.cancel`; this module is the public face.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from flowctl.check.topology import flow_graph
from flowctl.definition.kinds import no_flow
from flowctl.definition.loader import load_files
from flowctl.definition.model import files_digest
from flowctl.engine import cancel as cancelling
from flowctl.engine import pause as pausing
from flowctl.engine import lifecycle
from flowctl.engine.clock import SystemClock
from flowctl.engine.context import process_owner
from flowctl.engine.flowfiles import (flow_files, missing_parts, refuse_unchecked, refuse_unknown_profile,
                                      started_flows, tool_refs)
from flowctl.engine.launchers import QueueLauncher, ThreadLauncher
from flowctl.engine.result import EXIT_CODES, RunResult, new_run_id
from flowctl.engine.tools import resolve
from flowctl.gate.policy import function_aliases
from flowctl.errors import (DefinitionError, LeaseLost, ProjectError, RecordTampered, RunConflict, RunNotFound,
                            StoreError, UsageError)
from flowctl.store.sql import FINAL

#: old names (``flowctl.engine.engine._child_flows``) for callers outside the engine
_child_flows = started_flows
_missing_parts = missing_parts


class Engine:
    """Runs flows of one project against one store.

    ``clock``: a :class:`~flowctl.engine.clock.SystemClock` (default) or ``FakeClock``.
    ``max_inline_wait``: seconds a run may sleep in process (waits, retry delays) before it is
    parked as ``waiting`` instead. ``listener``: called with each audit event dict as it is
    recorded (live progress; one that raises is dropped, the run goes on). ``check``: refuse to run a flow whose files have validation errors.
    ``tool_resolver``: ``fn(contract, kind) -> callable or None`` consulted before importing a
    contract's ``entrypoint``/``verify``/``compensate`` (``kind``) — how ``flowctl test`` mocks
    tools and replay feeds recorded outputs; ``None`` from it means "use the real one".
    """

    def __init__(self, project, store, *, clock=None, max_inline_wait: float = 10.0, listener=None,
                 owner: str | None = None, check: bool = True, tool_resolver=None):
        self.project = project
        self.store = store
        self.clock = clock or SystemClock()
        self.max_inline_wait = max_inline_wait
        self.listener = listener
        self.owner = owner or process_owner()  # host:pid:start (flowctl.engine.context.process_owner)
        self.check = check
        self.tool_resolver = tool_resolver
        #: ``fn(runner) -> flowctl.expr.expressions.Recorder``: where uuid()/now() values come from
        #: (replay passes recorded ones); None draws fresh values.
        self.recorder_factory = None
        #: who runs the child runs of parallel/map/subflow states (:mod:`flowctl.engine.launchers`):
        #: threads of this process, or (a worker's) queued runs any worker may claim
        self.launcher = ThreadLauncher()
        #: who continues a fan-out already queued for workers, whichever process resumes its parent
        self.queue_launcher = QueueLauncher()
        #: fold a move into a ``succeed`` state into that state's (final) commit: one commit fewer per
        #: run. A worker sets it (:class:`flowctl.workers.worker.Worker`); ``flowctl run`` keeps one
        #: commit per move, so a run's stored record (its packed rows' hashes) is the one it always was
        self.fold_final = False
        self._projects: dict = {}
        self._checked: set = set()
        self._caches: dict = {}

    def step_caches(self, project, flow) -> tuple:
        """``(plans, lean, guards, tool_fns)``: the caches of the step that every run of ``flow`` in
        ``project`` (a definition, pinned by its digest) shares in this engine, so that a worker's
        thousandth run of a flow does not work out again what its first did — the step plans
        (:class:`flowctl.engine.calls.StepPlan`, keyed ``(state id, contract ref)``, and the
        transitions per state id), the lean steps (:mod:`flowctl.engine.lean`), the gate's view of
        each contract (:func:`flowctl.engine.gatecall.guarded`) and the resolved tool functions.
        Everything in them follows from the definition and this engine's tool resolver alone; a
        run's own data never goes in. Safe to share between the threads of a worker: each value is
        made whole before it is stored, and two threads making the same one store equal values."""
        key = (id(project), flow.id)
        found = self._caches.get(key)
        if found is None or found[0] is not project:  # the project kept: its id cannot be reused meanwhile
            shared = self._caches.get((id(project), None))
            if shared is None or shared[0] is not project:
                shared = self._caches[(id(project), None)] = (project, {}, {})  # guards, tool functions
            found = self._caches[key] = (project, ({}, {}, shared[1], shared[2]))
        return found[1]

    @property
    def distribute_children(self) -> bool:
        """Whether fan-out children become queued runs for workers (the launcher queues them)."""
        return self.launcher.queued

    @distribute_children.setter
    def distribute_children(self, value: bool) -> None:
        self.launcher = self.queue_launcher if value else ThreadLauncher()

    # ----------------------------------------------------------------------------- public API
    def run(self, flow_id: str, input: Any = None, *, params: dict | None = None, run_id: str | None = None) -> RunResult:
        """Start a run of ``flow_id`` on ``input`` and drive it until it ends, pauses or parks.

        Raises :class:`UsageError` for an unknown flow, invalid input (checked against the flow's
        ``input_schema``), or a flow whose definition files have errors.
        """
        flow = self._flow(flow_id)
        self._check_flow(flow)
        return lifecycle.start(self, self.project, flow, {} if input is None else input, params or {}, run_id)

    def resume(self, run_id: str, *, token: str | None = None, decision: str | None = None,
               data: Any = None, by: str | None = None) -> RunResult:
        """Continue a run: decide its pending review (``token``, ``decision``, ``data``, ``by``), or
        continue a due wait, or take over a run whose process died. A finished run is returned
        as it stands. Raises :class:`RunNotFound`, :class:`UsageError` (refused review)."""
        row = self.store.get_run(run_id)
        return lifecycle.resume(self, row, token=token, decision=decision, data=data, by=by)

    def recover(self) -> list:
        """Continue every run that is due: orphaned ``running`` runs (owner process gone),
        ``waiting`` runs whose time has come, and paused reviews whose timeout passed."""
        return lifecycle.recover(self)

    def fire_due_reviews(self) -> list:
        """Fire review timeouts and reminders that came due while no process was running."""
        return lifecycle.fire_due_reviews(self)

    def check_decision(self, run_id: str, decision: str, data: Any = None) -> Any:
        """Check a decision on the run's pending review before taking it; records nothing. Returns
        the data it would record; raises :class:`UsageError` (no review pending, decision not
        offered) or :class:`ReviewDataInvalid` (the review's ``data_schema`` rejects the data)."""
        return lifecycle.check_decision(self, self.store.get_run(run_id), decision, data)

    def reissue_token(self, run_id: str, *, by: str | None = None) -> str:
        """A new one-time token for a run paused for review (the old one stops working); for when
        the printed or notified token was lost. Raises :class:`UsageError` if no review is pending."""
        return lifecycle.reissue_token(self, self.store.get_run(run_id), by=by)

    def cancel(self, run_id: str, *, compensate: bool = True, by: str | None = None) -> RunResult:
        """Stop a run that has not finished; undo its completed side effects unless told not to.

        The cancel owns the run by one conditional commit before it undoes anything; when another
        command committed first it looks again (up to 3 times). Raises :class:`UsageError` when the
        run has ended or a live process executes it, :class:`RunConflict` when others kept winning."""
        for attempt in range(3):
            row = self.store.get_run(run_id)
            try:
                return cancelling.cancel(self, row, compensate=compensate, by=by)
            except RunConflict as exc:  # another command owned the run first (nothing was undone): look again
                if isinstance(exc, LeaseLost) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def pause(self, run_id: str, *, reason: str, by: str | None = None) -> dict:
        """Ask a run to pause at its next checkpoint (see :func:`flowctl.engine.pause.request`):
        ``{run_id, status, request, new}``. ``resume`` continues it. Raises :class:`RunNotFound`,
        :class:`UsageError` (ended, already paused, no reason)."""
        return pausing.request(self, self.store.get_run(run_id), by=by, reason=reason)

    # ----------------------------------------------------------------------------- helpers
    def tool_function(self, contract, kind: str, tools_folder: str):
        """The callable behind ``contract.<kind>`` (entrypoint, verify or compensate)."""
        if self.tool_resolver is not None:
            found = self.tool_resolver(contract, kind)
            if found is not None:
                return found
        return resolve(getattr(contract, kind), tools_folder, self.project.tool_packages)

    def _flow(self, flow_id: str):
        flow = self.project.flows.get(flow_id)
        if flow is None:
            if ("flow", flow_id) in self.project.broken:
                where = _flow_file_error(self.project, flow_id)
                raise DefinitionError(f"flow '{flow_id}' has errors and cannot run" + (f": {where}" if where else ""),
                                      hint="run: flowctl validate")
            raise no_flow(flow_id, self.project.flows)
        return flow

    def _check_flow(self, flow) -> None:
        """Refuse a flow whose own files (flow, its states, their contracts, policies) have errors
        (validated unless this definition of it passed before: :func:`~flowctl.engine.flowfiles.refuse_unchecked`)."""
        if not self.check or flow.id in self._checked:
            return
        refuse_unchecked(self.project, flow)
        refuse_unknown_profile(self.project, flow)
        self._resolve_tools(flow)
        self._checked.add(flow.id)
        for child in started_flows(self.project, flow):  # the flows its parallel/map/subflow states start
            self._check_flow(self.project.flows[child])

    def _resolve_tools(self, flow) -> None:
        """Import every tool function the flow's states name (entrypoint, verify, compensate of each
        tool, fallback and notify) before a run is created: a module that does not import, or code
        the project may not run, is a :class:`UsageError` (exit 2) with nothing started or stored."""
        folder = str(self.project.orchestration / "tools")
        for sid in sorted(flow_graph(self.project, flow)):
            state = self.project.states.get(sid)
            refs = tool_refs(state) if state else []
            for ref in refs:
                contract = self.project.resolve_tool(ref) if isinstance(ref, str) and ref else None
                for kind in ("entrypoint", "verify", "compensate", "snapshot"):
                    name = getattr(contract, kind, None) if contract is not None else None
                    if isinstance(name, str) and ":" in name:
                        fn = self.tool_function(contract, kind, folder)
                        if kind != "entrypoint":
                            self._refuse_gated_helper(contract, kind, fn, folder)

    def _refuse_gated_helper(self, contract, kind: str, fn, folder: str) -> None:
        """FC705 at run time, by identity: a verify/compensate/snapshot that *is* a gated tool's
        function under another name would run it without the gate."""
        aliases = function_aliases(self, self.project, fn, folder)
        if aliases:
            raise ProjectError(f"{kind} of {contract.ref} ({getattr(contract, kind)}) is the function of "
                               f"{', '.join(aliases)}, a gated tool: it would run without the gate",
                               hint=f"give {kind} its own function (see FC705 in flowctl validate)")

    def project_for(self, digest: str):
        """The project a run started with (its stored snapshot); the live one if digests match (the
        whole live one when this engine holds only one flow's files). Raises :class:`RecordTampered` when the stored files do not hash to ``digest``."""
        if digest == self.project.digest():  # a project of one flow's files answers for the whole one
            return self.project.whole() if hasattr(self.project, "whole") else self.project
        found = self._projects.get(digest)
        if found is None:
            files = self.store.load_definition(digest)
            if files_digest(files) != digest:  # the snapshot was edited in the store
                raise RecordTampered(f"the definition snapshot {digest[:12]} in the store does not hash to its "
                                     "digest: it was changed after the run started; the run is not continued",
                                     hint="restore the store from a backup; flowctl audit verify RUN checks a run")
            found = self._projects[digest] = load_files(files, self.project.root)
        return found



def _flow_file_error(project, flow_id: str) -> str | None:
    """``file:line:col: message`` of the first error that kept flow ``flow_id``'s file from loading
    (new-user finding: ``flowctl run`` named no place when the flow file itself was broken)."""
    for d in project.diagnostics:
        if d.severity == "error" and "/transitions/" in f"/{d.file}" and Path(d.file).stem.split(".")[0] == flow_id:
            return f"{d.location}: {d.message}"
    return None


__all__ = ["Engine", "RunResult", "RunNotFound", "StoreError", "FINAL", "EXIT_CODES", "new_run_id", "flow_files"]
