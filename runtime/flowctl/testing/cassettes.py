"""Cassettes: a flow test's model replies, recorded from the real provider once, replayed with no network.

``flowctl test --record`` runs each case's llm and agent states that the case does not mock (and
whose profile is not ``fake``) against the provider of their model profile, and writes what came
back beside the case, in ``orchestration/tests/<flow>/cassettes/<case>.yaml``::

    # recorded by flowctl test --record from orchestration/tests/ticket_triage/refund.yaml
    case: ticket_triage/refund
    calls:
      - state: classify_ticket     # the llm or agent state
        visit: 1                   # its visit in the run (1-based)
        index: 0                   # the model call of that visit (0-based; re-asks and agent turns counted)
        attempt: 1                 # the state's retry attempt (1-based)
        digest: 9f86d0…            # sha256 of the messages sent, as flowctl records them (model_called.digest)
        provider: openai
        model: gpt-4o-mini
        reply: {text: '{"intent": "refund", "confidence": 0.9}', tool_calls: [], usage: {input_tokens: 41, output_tokens: 9}}
      - {state: resolve_refund, visit: 1, index: 0, attempt: 1, digest: …, error: ToolThrottled, message: …}

A later ``flowctl test`` (no ``--record``) answers those states from the cassette, keyed by
``(state, visit, index, attempt)``: a recorded error is raised again (so a retry goes as it went),
a reply is returned with its tool call ids. When the messages a call would send have another
digest than the recorded ones — the prompt, its template, the scope it renders or an earlier reply
changed — the case fails naming the state and saying to re-record (:class:`CassetteProblem`); a
recorded reply is never given to a prompt it was not the answer to. A call the cassette has no
entry for fails the case the same way.

Secrets: the digest is of the messages after the run's redaction (:mod:`flowctl.engine.sensitive`),
and the reply, its tool call arguments and an error's message are redacted the same way before
they are written, as in the ``model_called`` events: a sensitive value is never written in
plaintext. A reply that echoed one replays with ``***redacted***`` in its place.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from flowctl.engine import modelcall
from flowctl.errors import handler_names
from flowctl.models import ModelReply, ToolCallRequest, provider_for
from flowctl.testing.mocks import make_error

FOLDER = "cassettes"
#: errors of a provider that are recorded and raised again on replay (others end the recording)
REPLAYED_ERRORS = ("ToolThrottled", "ToolUnavailable", "ToolTimeout")
_KEYS = (("state", str), ("visit", int), ("index", int), ("attempt", int), ("digest", str))


class CassetteProblem(BaseException):
    """A case's cassette cannot answer a model call (a changed prompt, a call it has no reply for,
    a malformed file). Not an engine error: the case fails with it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def cassette_path(project, case) -> Path:
    """``orchestration/tests/<flow>/cassettes/<case file's stem>.yaml`` of ``case``."""
    source = project.root / case.file
    return source.parent / FOLDER / (source.name.rsplit(".", 1)[0] + ".yaml")


def _rel(project, path: Path) -> str:
    try:
        return path.relative_to(project.root).as_posix()
    except ValueError:
        return str(path)


def _inside(project, path: Path) -> bool:
    top = os.path.realpath(project.root)
    return os.path.realpath(path).startswith(top.rstrip(os.sep) + os.sep)


def load(project, case) -> dict | None:
    """``{(state, visit, index, attempt): entry}`` of ``case``'s cassette, or None when it has none.
    Raises :class:`CassetteProblem` for a file that is malformed or leads outside the project."""
    import yaml

    path = cassette_path(project, case)
    if not path.is_file():
        return None
    rel = _rel(project, path)
    if not _inside(project, path):
        raise CassetteProblem(f"{rel} leads outside the project; it is not read",
                              hint="make it a plain file (flowctl test --record writes one)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CassetteProblem(f"{rel}: cannot read the cassette: {exc}",
                              hint=f"re-record it: flowctl test --record {case.file}") from None
    calls = data.get("calls") if isinstance(data, dict) else None
    if not isinstance(calls, list):
        raise CassetteProblem(f"{rel}: a cassette is a mapping with a list of calls",
                              hint=f"re-record it: flowctl test --record {case.file}")
    out = {}
    for i, entry in enumerate(calls):
        bad = not isinstance(entry, dict) or any(not isinstance(entry.get(k), t) or isinstance(entry.get(k), bool)
                                                 for k, t in _KEYS)
        if not bad:
            bad = not (isinstance(entry.get("reply"), dict) or isinstance(entry.get("error"), str))
        if bad:
            raise CassetteProblem(f"{rel}: calls[{i}] needs state, visit, index, attempt, digest and a reply "
                                  "or an error", hint=f"re-record it: flowctl test --record {case.file}")
        out[tuple(entry[k] for k, _t in _KEYS[:4])] = entry
    return out


def save(project, case, calls: list) -> Path:
    """Write ``calls`` (entries as :class:`Tape` records them) as ``case``'s cassette, whole or
    not at all: a new temporary file (created exclusively, in the cassette's folder), flushed to
    disk and renamed over the cassette. Returns its path. No symbolic link is followed: raises
    :class:`CassetteProblem` when a folder on the way from the project root, or the cassette
    itself, is a link (or not a folder/file), and ``OSError`` when the disk refuses."""
    import yaml

    path = cassette_path(project, case)
    head = (f"# recorded by flowctl test --record from {case.file}; replayed by flowctl test with no network.\n"
            "# Re-record after changing a prompt: flowctl test --record " + case.file + "\n")
    text = head + yaml.safe_dump({"case": case.id, "calls": calls}, sort_keys=False, allow_unicode=True, width=120)
    parts = path.relative_to(project.root).parts
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise CassetteProblem(f"{_rel(project, path)} is not a path inside the project; nothing is written there")
    (_write_at if _DIR_FD else _write_by_path)(project, parts, text.encode("utf-8"))
    return path


#: the platform opens files relative to a folder's descriptor (POSIX): no link can be swapped in
#: between the checks and the write
_DIR_FD = ({os.open, os.mkdir, os.rename, os.unlink, os.stat} <= os.supports_dir_fd
           and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY"))


def _linked(project, parts, i: int) -> CassetteProblem:
    where = "/".join(parts[:i + 1])
    return CassetteProblem(f"{where} is a symbolic link or not a {'file' if i == len(parts) - 1 else 'folder'}; "
                           f"flowctl test --record does not write {'/'.join(parts)} through it",
                           hint="make orchestration/tests/<flow>/cassettes/ a plain folder and the cassette a plain "
                                "file (or remove them: --record creates them)")


def _fill(out: int, data: bytes) -> None:
    """``data`` into the new file of descriptor ``out`` (closed after), on disk before it returns."""
    with os.fdopen(out, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_at(project, parts, data: bytes) -> None:
    """``data`` to ``root/parts…``, walking the folders by descriptor with O_NOFOLLOW (creating
    missing ones), the file written to an O_EXCL temporary and renamed in the same folder."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(project.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                os.mkdir(part, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                inner = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _linked(project, parts, i) from None
                raise
            os.close(fd)
            fd = inner
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise _linked(project, parts, len(parts) - 1)
        for _ in range(100):
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            try:
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=fd)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary name", "/".join(parts[:-1]))
        try:
            _fill(out, data)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # rename's dir_fd support is replace's
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            raise
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)


def _write_by_path(project, parts, data: bytes) -> None:
    """:func:`_write_at` where folders cannot be opened by descriptor: each component checked with
    ``lstat`` first, the temporary from :func:`tempfile.mkstemp` (O_EXCL, O_NOFOLLOW where there is one)."""
    import tempfile

    here = Path(project.root)
    for i, part in enumerate(parts):
        here = here / part
        if here.is_symlink() or (here.exists() and not (here.is_file() if i == len(parts) - 1 else here.is_dir())):
            raise _linked(project, parts, i)
        if i < len(parts) - 1 and not here.exists():
            here.mkdir()
    out, tmp = tempfile.mkstemp(prefix=f".{parts[-1]}.", suffix=".tmp", dir=here.parent)
    try:
        _fill(out, data)
        os.replace(tmp, here)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Tape:
    """The engine's ``model_provider`` hook for one case (see :func:`flowctl.engine.modelcall.provider_of`):
    recording (``record=True``: the profile's real provider, each call kept in ``calls``) or
    playing ``entries`` (from :func:`load`; None: no cassette, so nothing is answered here).

    ``problem`` is the first :class:`CassetteProblem` raised (the engine may have seen it go by),
    ``problem_steps`` the number of events in ``seen`` before it; ``unrecorded`` says why a
    recording must not be written (an error that is not a provider's), as does ``unanswered`` (a
    call no attempt of which was answered: the provider was not reached, or refused)."""

    def __init__(self, project, case, *, record: bool = False, entries: dict | None = None, seen: list | None = None):
        self.project, self.case, self.record, self.entries, self.seen = project, case, record, entries, seen
        self.calls: list = []
        self.problem: CassetteProblem | None = None
        self.problem_steps: int | None = None
        self.unrecorded: str | None = None
        #: (state, visit, index) -> why: calls whose every attempt failed (a server down, a wrong key)
        self.unanswered: dict = {}

    @property
    def where(self) -> str:
        return _rel(self.project, cassette_path(self.project, self.case))

    def provider(self, ctx, state, profile):
        """The provider answering ``state`` (a state the case does not mock), or None (its profile's)."""
        if profile.provider == "fake":
            return None
        if self.record:
            return _Recorder(self, ctx, provider_for(profile), profile)
        if self.entries is None:
            return None
        return _Player(self, ctx)

    def fail(self, message: str, hint: str = "") -> CassetteProblem:
        problem = CassetteProblem(message, hint or f"re-record the cassette: flowctl test --record {self.case.file}")
        if self.problem is None:
            self.problem = problem
            if self.seen is not None:
                self.problem_steps = len(self.seen)
        return problem


def _key(ctx, req) -> tuple:
    return (req.state, req.visit, req.index, int(ctx.cursor.attempt or 1))


def _label(key) -> str:
    state, visit, index, attempt = key
    return f"model call {index + 1} of '{state}' (visit {visit}, attempt {attempt})"


class _Recorder:
    """The real provider, each answer (or provider error) kept on the tape, redacted."""

    def __init__(self, tape, ctx, inner, profile):
        self.tape, self.ctx, self.inner, self.profile = tape, ctx, inner, profile
        self.name = inner.name

    def _scrub(self, value):
        return self.ctx.secrets.scrub(value) if self.ctx.secrets is not None else value

    def complete(self, req):
        key = _key(self.ctx, req)
        entry = dict(zip(("state", "visit", "index", "attempt"), key), digest=modelcall.digest(self.ctx, req.messages),
                     provider=self.name, model=self.profile.model)
        try:
            reply = self.inner.complete(req)
        except Exception as exc:
            name = handler_names(exc)[0]
            if name in REPLAYED_ERRORS:
                self.tape.calls.append(dict(entry, error=name, message=self._scrub(str(exc))))
                self.tape.unanswered[key[:3]] = f"{_label(key)} got no answer ({name}: {self._scrub(str(exc))})"
            elif self.tape.unrecorded is None:
                self.tape.unrecorded = f"{_label(key)} raised {name}: {exc}"
            raise
        calls = []
        for t in reply.tool_calls:
            call = {"id": t.id, "name": t.name, "arguments": t.arguments}
            if t.arguments is None:
                call["arguments_text"] = t.arguments_text
            calls.append(call)
        self.tape.unanswered.pop(key[:3], None)
        entry["model"] = reply.model or self.profile.model
        entry["reply"] = self._scrub({"text": reply.text, "tool_calls": calls, "usage": dict(reply.usage),
                                      "stop": reply.stop})
        self.tape.calls.append(entry)
        return reply


class _Player:
    """The recorded answers, for the prompts they answered only."""

    def __init__(self, tape, ctx):
        self.tape, self.ctx = tape, ctx
        self.name = "cassette"

    def complete(self, req):
        key = _key(self.ctx, req)
        entry = self.tape.entries.get(key)
        if entry is None:
            raise self.tape.fail(f"{self.tape.where} has no reply for {_label(key)}: the run asks the model "
                                 "for more than it did when the cassette was recorded")
        self.name = entry.get("provider") or "cassette"
        now = modelcall.digest(self.ctx, req.messages)
        if now != entry["digest"]:
            raise self.tape.fail(f"the prompt of '{req.state}' changed since {self.tape.where} was recorded: "
                                 f"{_label(key)} sends messages of digest {now[:12]}, the recorded reply answered "
                                 f"{entry['digest'][:12]}; it is not used")
        if "reply" not in entry:
            raise make_error(entry["error"], entry.get("message"))
        r = entry["reply"]
        calls = [ToolCallRequest(str(t.get("id")), str(t.get("name")),
                                 t.get("arguments") if isinstance(t.get("arguments"), dict) else None,
                                 t.get("arguments_text") or "")
                 for t in (r.get("tool_calls") or ()) if isinstance(t, dict)]
        usage = r.get("usage") if isinstance(r.get("usage"), dict) else {}
        return ModelReply(str(r.get("text") or ""), calls,
                          {k: int(usage.get(k) or 0) for k in ("input_tokens", "output_tokens")},
                          {"cassette": self.tape.where, "call": list(key)}, entry.get("model"), r.get("stop"))


def tape_for(project, case, *, record: bool, seen: list) -> Tape:
    """The :class:`Tape` of ``case``: recording, or playing its cassette (if it has one). Raises
    :class:`CassetteProblem` for a cassette that cannot be read."""
    entries = None if record else load(project, case)
    return Tape(project, case, record=record, entries=entries, seen=seen)


__all__ = ["CassetteProblem", "Tape", "tape_for", "cassette_path", "load", "save", "FOLDER"]
