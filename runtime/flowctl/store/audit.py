"""The audit log's hash chain and redaction.

Events are stored in one of two formats, and a run's chain may hold both (a run begun before
store schema 7 and continued after it):

* **one row per event** (schema 1 to 6, and events sealed by :func:`seal`): every event carries
  ``prev_hash`` and ``hash``::

      hash = sha256(f"{prev_hash}\\n{seq}\\n{ts!r}\\n{type}\\n{state!r}\\n{attempt!r}\\n{data_json}")

* **one packed row per commit** (schema 7; :func:`seal_commit`, what the engine writes): the
  commit's events as one text, :func:`pack_text`, hashed once (:func:`pack_hash`)::

      text = "[" + ",\\n".join(f"[{seq},{ts!r},{json(type)},{json(state)},{json(attempt)},{data_json}]") + "]"
      hash = sha256(f"flowctl-pack-1\\n{prev_hash}\\n{text}")

  (``json(x)``: the JSON text of a string, or ``null``). Each event read from such a row has
  the row's ``prev_hash`` and ``hash`` and ``packed: [first seq, last seq]`` of its commit.

``data_json`` is the event's data exactly as stored (UTF-8 JSON text, serialised once when the
event is recorded) and ``prev_hash`` of the first event is ``""``. Verifying therefore hashes
the stored bytes themselves, not a re-serialisation: a packed row is read back only if its text
is exactly what :func:`pack_text` gives for the events in it (:func:`unpack`). The run row also
keeps the last ``seq`` and ``hash``, written in the same transaction, so deleting events at the
tail is detected too.

:func:`verify_chain` returns a list of problems (empty when the log is intact). Each check also
exists as a class fed one event at a time (:class:`ChainCheck`, :class:`RunCheck`,
:class:`StepsCheck`, :class:`HeadCheck`), so a long run's log is verified in batches
(:func:`flowctl.store.events.iter_events`), never held whole.
"""
from __future__ import annotations

import hashlib
import json

REDACTED = "***redacted***"


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _c_encoder(sort_keys: bool = False):
    """The C encoder behind ``_ENCODER`` (``_CANONICAL`` when ``sort_keys``), built once
    (``JSONEncoder.encode`` builds it on every call). Used only if it is there and gives exactly
    that encoder's text on a sample."""
    plain = _CANONICAL if sort_keys else _ENCODER
    try:
        from json.encoder import c_make_encoder, encode_basestring

        enc = c_make_encoder(None, str, encode_basestring, None, ":", ",", sort_keys, False, True)
        sample = {"b": [1, 2.5, None, True, "é\n", 1e300], "a": {"c": float("nan")}, "d": object}
        if "".join(enc(sample, 0)) == plain.encode(sample) and "".join(enc("x", 0)) == plain.encode("x"):
            return enc
    except Exception:  # noqa: BLE001 - no C accelerator, or another signature: the plain encoder
        pass
    return None


_C_CANONICAL = _c_encoder(sort_keys=True)


def canonical(obj) -> str:
    """The text every hash is taken over: compact JSON, keys sorted, UTF-8 as is, non-JSON values as
    text (``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)``,
    through a C encoder built once)."""
    if _C_CANONICAL is not None:
        try:
            return "".join(_C_CANONICAL(obj, 0))
        except RecursionError:
            pass  # circular or too deep: the plain encoder says which, as json.dumps would
    return _CANONICAL.encode(obj)


_C_ENCODER = _c_encoder()


def utf8_safe(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate (say from a tool's exception message) is kept
    as its JSON escape ``\\udXXX``, so the write that stores it cannot fail (breaker finding: the run
    could then never end); any other text is returned as it is."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def encode_data(data) -> str:
    """The stored form of an event's data: compact JSON, UTF-8, non-JSON values as text. Text that
    UTF-8 cannot hold (a lone surrogate, say from an exception message) is kept as ``\\udXXX``."""
    text = None
    if _C_ENCODER is not None:
        try:
            text = "".join(_C_ENCODER(data, 0))
        except RecursionError:
            pass  # a circular structure: the plain encoder names it (ValueError)
    if text is None:
        text = _ENCODER.encode(data)
    return utf8_safe(text)


def event_hash(prev_hash: str, event: dict) -> str:
    """Hash of ``event`` (seq, ts, type, state, attempt, and data_json or data) chained to ``prev_hash``."""
    data_json = event.get("data_json")
    if data_json is None:
        data_json = encode_data(event.get("data"))
    text = (f"{prev_hash}\n{event['seq']}\n{event['ts']!r}\n{event['type']}\n{event.get('state')!r}\n"
            f"{event.get('attempt')!r}\n{data_json}")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(events: list, prev_hash: str) -> str:
    """Chain ``events`` (in ``seq`` order) after ``prev_hash``: each gets ``data_json`` (if it has
    none yet), ``prev_hash`` and ``hash``. Returns the last hash (``prev_hash`` when empty)."""
    sha256 = hashlib.sha256
    for ev in events:  # event_hash, inlined: this runs for every event a run records
        data_json = ev.get("data_json")
        if data_json is None:
            data_json = ev["data_json"] = encode_data(ev.get("data"))
        ev["prev_hash"] = prev_hash
        text = (f"{prev_hash}\n{ev['seq']}\n{ev['ts']!r}\n{ev['type']}\n{ev.get('state')!r}\n"
                f"{ev.get('attempt')!r}\n{data_json}")
        prev_hash = ev["hash"] = sha256(text.encode("utf-8")).hexdigest()
    return prev_hash


# ---------------------------------------------------------------------- packed rows (schema 7)
PACK_VERSION = "flowctl-pack-1"
_JSTR = json.encoder.encode_basestring  # a str's JSON text, non-ASCII kept (C where available)


_NAMES: dict = {}  # (type, state) -> their JSON texts joined: a run has few of them


def _line_head(seq, ts, type_, state, attempt) -> str:
    """The text of one packed event up to its data: ``[seq,ts,type,state,attempt,``."""
    names = _NAMES.get((type_, state))
    if names is None:
        names = f"{_JSTR(type_)},{'null' if state is None else _JSTR(state)}"
        if len(_NAMES) < 4096:
            _NAMES[(type_, state)] = names
    return f"[{seq},{ts!r},{names},{'null' if attempt is None else int(attempt)},"


def pack_text(events: list) -> str:
    """The stored text of a commit's ``events`` (each with ``data_json``, or ``data`` to encode):
    a JSON array of ``[seq, ts, type, state, attempt, data]``, one event a line. The one
    definition of the bytes :func:`pack_hash` hashes."""
    parts = []
    for ev in events:
        data_json = ev.get("data_json")
        if data_json is None:
            data_json = ev["data_json"] = encode_data(ev.get("data"))
        parts.append(f"{_line_head(ev['seq'], ev['ts'], ev['type'], ev.get('state'), ev.get('attempt'))}{data_json}]")
    return "[" + ",\n".join(parts) + "]"


def pack_hash(prev_hash: str, text: str) -> str:
    """The hash of a packed row (sha256 hex) whose text is ``text``, chained to ``prev_hash``."""
    return hashlib.sha256(f"{PACK_VERSION}\n{prev_hash}\n{text}".encode("utf-8")).hexdigest()


def seal_commit(events: list, prev_hash: str) -> str:
    """Chain one commit's ``events`` (in ``seq`` order) after ``prev_hash`` as one packed row:
    each event gets ``data_json`` (if it has none yet), the row's ``prev_hash`` and ``hash`` and
    ``packed`` (``[first seq, last seq]``); the last one also ``packed_json``, the row's text, for
    the store to write as is. Returns the row's hash (``prev_hash`` when ``events`` is empty)."""
    if not events:
        return prev_hash
    text = pack_text(events)
    digest = pack_hash(prev_hash, text)
    span = [events[0]["seq"], events[-1]["seq"]]
    for ev in events:
        ev["prev_hash"] = prev_hash
        ev["hash"] = digest
        ev["packed"] = span
    events[-1]["packed_json"] = text
    return digest


_SCAN = json.JSONDecoder().scan_once


def unpack(text, prev_hash: str, digest: str, last_seq: int) -> list | None:
    """The events of a packed row (``data``, ``ts`` … as :func:`seal_commit` left them, without
    ``run_id`` and ``fence``), or None when ``text`` is not exactly what :func:`pack_text` writes
    for events ending at ``last_seq`` (edited in the store: verifying reports it)."""
    if not isinstance(text, str) or len(text) < 2 or text[0] != "[" or text[-1] != "]":
        return None
    lines = text[1:-1].split(",\n")
    span = None
    out = []
    try:
        for line in lines:
            value, end = _SCAN(line, 0)
            if end != len(line) or value.__class__ is not list or len(value) != 6:
                return None
            seq, ts, type_, state, attempt, data = value
            if (seq.__class__ is not int or ts.__class__ not in (float, int) or type_.__class__ is not str
                    or not (state is None or state.__class__ is str) or not (attempt is None or attempt.__class__ is int)):
                return None
            head = _line_head(seq, ts, type_, state, attempt)
            if not line.startswith(head):
                return None
            out.append({"seq": seq, "ts": ts, "type": type_, "state": state, "attempt": attempt, "data": data,
                        "data_json": line[len(head):-1], "prev_hash": prev_hash, "hash": digest, "packed": None})
    except (StopIteration, ValueError, TypeError):
        return None
    if not out or out[-1]["seq"] != last_seq:
        return None
    span = [out[0]["seq"], last_seq]
    for ev in out:
        ev["packed"] = span
    return out


class ChainCheck:
    """:func:`verify_chain` one event at a time (a long run's log is never held whole): call
    :meth:`add` with each event in ``seq`` order, then :meth:`finish`. Events of a packed row
    (``packed: [first, last]``) are kept until its last one, then the row is hashed again from
    them (:func:`pack_text`: the stored text itself, see :func:`unpack`). The indexed columns of
    a row (``ts``, ``type``, ``state``, ``attempt``: what :mod:`flowctl.store.query` selects rows
    by) must agree with what is hashed: a row of one event hashes them itself; a packed row's are
    compared with its last event by the reader (``row_differs``, see
    :func:`flowctl.store.records.packed_row_differs`) and reported here."""

    __slots__ = ("problems", "prev", "expected_seq", "count", "row")

    def __init__(self):
        self.problems: list = []
        self.prev = ""
        self.expected_seq = 1
        self.count = 0  # events seen
        self.row: list = []  # the events of the packed row being read

    def add(self, ev: dict) -> None:
        problems = self.problems
        if ev["seq"] != self.expected_seq:
            problems.append(f"event {self.expected_seq} is missing (next stored is {ev['seq']})")
            self.expected_seq = ev["seq"]
        span = ev.get("packed")
        row = self.row
        if row and (span != row[0].get("packed") or ev.get("hash") != row[0].get("hash")):
            self._row_done()  # its row ended before its last event: reported as modified
        prev_hash = ev.get("prev_hash", "")
        if not self.row and prev_hash != self.prev:
            problems.append(f"event {ev['seq']} does not follow event {ev['seq'] - 1} (prev_hash differs)")
        if span is None:
            if event_hash(prev_hash, ev) != ev.get("hash"):
                problems.append(f"event {ev['seq']} ({ev['type']}) was modified (hash differs)")
            self.prev = ev.get("hash", "")
        else:
            self.row.append(ev)
            if ev["seq"] >= span[-1]:  # the row's last event: it carries the row's columns if they differ
                differs = ev.get("row_differs")
                if differs:
                    problems.append(f"event {ev['seq']}: the stored row's " + ", ".join(
                        f"{k} column ({stored!r}, hashed {expected!r})" for k, (stored, expected) in differs.items())
                        + " disagrees with its hashed content (edited in the store)")
                self._row_done()
        self.expected_seq += 1
        self.count += 1

    def _row_done(self) -> None:
        row, self.row = self.row, []
        first, last = row[0], row[-1]
        span = first.get("packed") or [first["seq"], last["seq"]]
        whole = (span[0] == first["seq"] and span[1] == last["seq"] and len(row) == span[1] - span[0] + 1
                 and all(ev.get("data_json") is not None for ev in row))
        if not whole or pack_hash(first.get("prev_hash", ""), pack_text(row)) != last.get("hash"):
            what = (f"event {first['seq']} ({first['type']})" if len(row) == 1 and span[0] == span[1] else
                    f"the commit of events {span[0]}-{span[1]} ({first['type']} … {last['type']})")
            self.problems.append(f"{what} was modified (hash differs)")
        self.prev = last.get("hash", "")

    def finish(self, last_seq: int | None = None, last_hash: str | None = None) -> list[str]:
        """The problems found, with the run row's record of the chain's end (``last_seq``, ``last_hash``)."""
        if self.row:
            self._row_done()
        problems = list(self.problems)
        if last_seq is not None and last_seq != self.expected_seq - 1:
            problems.append(f"the run records {last_seq} events but {self.expected_seq - 1} are stored "
                            "(events deleted or added)")
        if last_hash is not None and self.count and last_hash != self.prev:
            problems.append("the run's last hash does not match the last stored event")
        return problems


def verify_chain(events, last_seq: int | None = None, last_hash: str | None = None) -> list[str]:
    """Problems found in ``events`` (an iterable of dicts with seq, ts, type, state, attempt, data,
    prev_hash, hash), in ``seq`` order. ``last_seq``/``last_hash`` are the run row's record of the
    chain's end."""
    check = ChainCheck()
    for ev in events:
        check.add(ev)
    return check.finish(last_seq, last_hash)


SEAL_VERSION = "flowctl-run-seal-2"


def row_identity(row: dict) -> str:
    """What a run row says the run *is* (sha256 hex): the definition digest it is pinned to, its
    flow, its parent, its input, params and output, as a reader of the store gets them back (an
    encrypted value by its plaintext). Part of :func:`run_seal`, so a swapped digest, an edited
    input or a forged child output is refused like an edited checkpoint."""
    def plain(value):
        return getattr(value, "plain", value)

    text = _sorted_json([row.get("digest"), row.get("flow"), row.get("parent_id"), plain(row.get("input")),
                         plain(row.get("params")), plain(row.get("output"))])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def run_seal(run_id: str, last_seq: int, last_hash: str, status: str, error, cursor_json: str,
             identity: str = "") -> str:
    """The seal of a run row (sha256 hex), written by every commit in the same statement as the row::

        sha256(f"flowctl-run-seal-2\\n{id}\\n{last_seq}\\n{last_hash}\\n{status}\\n{error_json}\\n{identity}\\n{cursor_json}")

    ``identity`` is :func:`row_identity` of the row (digest, flow, parent, input, params, output);
    ``error_json`` is :func:`canonical` of the error (``""`` for none); ``cursor_json`` is the
    checkpoint as stored, :func:`encode_data` of it (the commit hands the same text to the store,
    so sealing costs one sha256 per step, no second encoding). ``last_hash`` ties the row to the head of the
    event chain, so the checkpoint a resume continues from is bound to the log that led to it.
    Unkeyed, like the chain: see :func:`verify_run`."""
    text = (f"{SEAL_VERSION}\n{run_id}\n{last_seq}\n{last_hash}\n{status}\n"
            f"{'' if error is None else _sorted_json(error)}\n{identity}\n{cursor_json}")
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _sorted_json(value) -> str:
    """:func:`canonical`, also for keys that do not sort together (1 and "a"): as stored, all text."""
    try:
        return canonical(value)
    except TypeError:
        return canonical(json.loads(encode_data(value)))


#: statuses a run row may show while its seal (written by its last commit) says another: a worker's
#: claim makes a due run ``running`` in SQL, and its own first commit seals it again
_CLAIMED_FROM = ("queued", "waiting", "paused", "running")


def seal_problem(row: dict) -> str | None:
    """Why ``row`` (a run as the store returns it) is not the one its last commit sealed, or None.

    The seal must match the row's own status, or — for a ``running`` row a worker claimed
    (``lease_until`` set) — the status it had before the claim; a ``waiting`` row may have been
    sealed ``queued`` (a worker continues a queued run as a due one). A row without a seal is
    accepted only when the run has ended (rows finished before store schema 4)."""
    if "seal" not in row:
        return None  # a store without seals (memory)
    sealed = row.get("seal")
    if not sealed:
        if row.get("status") in FINAL_EVENTS:
            return None
        return "the run row has no seal (its status, checkpoint or error was written outside flowctl)"
    statuses = [row.get("status")]
    if row.get("status") == "waiting":
        statuses.append("queued")
    if row.get("status") == "running" and row.get("lease_until") is not None:
        statuses.extend(s for s in _CLAIMED_FROM if s != "running")
    cursor_json = encode_data(row.get("cursor"))  # the stored text: encode_data of it gives it back
    identity = row_identity(row)
    for status in statuses:
        if run_seal(row["id"], row.get("last_seq"), row.get("last_hash"), status, row.get("error"),
                    cursor_json, identity) == sealed:
            return None
    return ("the run row's status, checkpoint, error, input, params, output or definition digest is not "
            "what its last commit sealed (edited in the store)")


class StepsCheck:
    """:func:`verify_steps` one event at a time: only the ``tool_invoked`` / ``tool_succeeded``
    events of a (state, attempt, tool) some step record has are kept."""

    def __init__(self, steps: list):
        self.steps = steps
        self.keys = {(s.get("state"), s.get("attempt"), s.get("tool")) for s in steps}
        self.invoked: dict = {}
        self.outputs: dict = {}

    def add(self, ev: dict) -> None:
        t = ev["type"]
        if t != "tool_invoked" and t != "tool_succeeded" or not self.keys:
            return
        d = ev.get("data") or {}
        key = (ev.get("state"), ev.get("attempt"), d.get("tool"))
        if key not in self.keys:
            return
        if t == "tool_invoked":
            self.invoked.setdefault(key, []).append((d.get("idempotency_key"), d.get("input")))
        else:
            self.outputs.setdefault(key, []).append(d.get("output"))

    def finish(self) -> list[str]:
        problems = []
        for s in self.steps:
            label = f"step record {s.get('step_no')}#{s.get('attempt')} ({s.get('state')})"
            key = (s.get("state"), s.get("attempt"), s.get("tool"))
            if not any(_recorded_as(k, s.get("idempotency_key")) and _recorded_as(i, s.get("input"))
                       for k, i in self.invoked.get(key, ())):
                problems.append(f"{label} has no matching tool_invoked event (added or edited in the store)")
            elif s.get("status") == "succeeded" and s.get("output") not in (None, {}) and not any(
                    _recorded_as(o, s.get("output")) for o in self.outputs.get(key, ())):
                problems.append(f"{label} has an output no tool_succeeded event recorded (edited in the store)")
        return problems


def verify_steps(steps: list, events) -> list[str]:
    """Problems of the step records (``flowctl_steps``) against the hash-chained log: every step
    row must have its ``tool_invoked`` event (same state, attempt, tool, idempotency key and input),
    and a ``succeeded`` row's output must be the output its ``tool_succeeded`` event recorded.
    Values the log redacted (whole or inside a text) match whatever the step row holds there.
    ``events``: any iterable of the run's events in ``seq`` order (see :class:`StepsCheck`)."""
    check = StepsCheck(steps)
    for ev in events:
        check.add(ev)
    return check.finish()


def _recorded_as(recorded, actual) -> bool:
    """:func:`_same_but_redacted`, also where the log redacted a value inside a text."""
    if isinstance(recorded, str) and REDACTED in recorded:
        return True
    if isinstance(recorded, dict) and isinstance(actual, dict):
        return recorded.keys() == actual.keys() and all(_recorded_as(recorded[k], actual[k]) for k in recorded)
    if isinstance(recorded, list) and isinstance(actual, list):
        return len(recorded) == len(actual) and all(_recorded_as(r, a) for r, a in zip(recorded, actual))
    return _same_but_redacted(recorded, actual)


class HeadCheck:
    """:func:`verify_head` one event at a time: ``head`` is ``SEQ:HASH`` as ``flowctl audit head``
    printed it."""

    def __init__(self, head: str):
        seq_text, _, self.expected = head.partition(":")
        self.malformed = not seq_text.isdigit() or len(self.expected) != 64
        self.head = head
        self.seq = int(seq_text) if not self.malformed else None
        self.found = False
        self.hash = None

    def add(self, ev: dict) -> None:
        if not self.found and ev["seq"] == self.seq:
            self.found, self.hash = True, ev.get("hash")

    def finish(self) -> list[str]:
        if self.malformed:
            return [f"--expect-head {self.head!r} is not SEQ:HASH as flowctl audit head prints it"]
        if not self.found:
            return [f"event {self.seq} of the anchored head is not in the store (the log was cut)"]
        if self.hash != self.expected:
            return [f"event {self.seq} no longer has the anchored hash: the log up to it was rewritten"]
        return []


def verify_head(events, head: str) -> list[str]:
    """``head`` is ``SEQ:HASH`` as ``flowctl audit head`` printed it: the stored event ``SEQ`` must
    still have hash ``HASH`` (so events 1..SEQ are exactly those that existed then). ``events``:
    any iterable of the run's events."""
    check = HeadCheck(head)
    if not check.malformed:
        for ev in events:
            check.add(ev)
            if check.found:
                break
    return check.finish()


FINAL_EVENTS = {"succeeded": "run_succeeded", "failed": "run_failed", "cancelled": "run_cancelled"}
_FINAL_TYPES = frozenset(FINAL_EVENTS.values())


class RunCheck:
    """:func:`verify_run` one event at a time: the chain (:class:`ChainCheck`), and of the log
    only its first event and its last ``run_*`` final event are kept."""

    def __init__(self, row: dict, chain=None):
        self.row = row
        self.chain = chain or ChainCheck()  # or a flowctl.store.prune.PrunedChain (``pruned`` true)
        self.first = None
        self.last_final = None

    def add(self, ev: dict) -> None:
        self.chain.add(ev)
        if self.first is None:
            self.first = ev
        if ev["type"] in _FINAL_TYPES:
            self.last_final = ev

    def finish(self) -> list[str]:
        row = self.row
        problems = self.chain.finish(row.get("last_seq"), row.get("last_hash"))
        first, pruned = self.first, getattr(self.chain, "pruned", False)
        if first is None and pruned:
            return problems  # all its events were pruned: the chain's head is what is checked
        if first is None:
            return problems + ["the run has no events (run_started is missing)"]
        if pruned and first["seq"] > 1:
            pass  # run_started was pruned (its archive holds it)
        elif first["type"] != "run_started":
            problems.append(f"the first event is {first['type']}, not run_started")
        else:
            data = first.get("data") or {}
            if data.get("flow") != row.get("flow"):
                problems.append(f"the run row says flow {row.get('flow')!r}, run_started says {data.get('flow')!r}")
            if not _same_but_redacted(data.get("input"), row.get("input")):
                problems.append("the run row's input differs from the input recorded in run_started")
            if data.get("digest") is not None and data.get("digest") != row.get("digest"):
                problems.append(f"the run row is pinned to definition {str(row.get('digest'))[:12]}, but run_started "
                                f"recorded {str(data.get('digest'))[:12]}")
        expected = FINAL_EVENTS.get(row.get("status"))
        if expected:
            last = self.last_final
            if last is None and pruned:
                pass  # its final event was pruned
            elif last is None or last["type"] != expected:
                problems.append(f"the run row says {row.get('status')}, but the log does not end that way")
            elif (expected == "run_succeeded" and not (last.get("data") or {}).get("truncated")  # too big to log
                  and not _same_but_redacted((last.get("data") or {}).get("output"), row.get("output"))):
                problems.append("the run row's output differs from the output recorded in run_succeeded")
        return problems


def verify_run(row: dict, events) -> list[str]:
    """:func:`verify_chain` plus the run row against its log: the log starts with ``run_started``
    for this flow and input, and a finished run's status and output match its last events.
    ``events``: any iterable of the run's events in ``seq`` order (see :class:`RunCheck`).

    The chain is not keyed: someone who can write the store could rebuild both the events and the
    run row consistently. Ship the last hash elsewhere (a ticket, a log) to detect that too.
    """
    check = RunCheck(row)
    for ev in events:
        check.add(ev)
    return check.finish()


def _same_but_redacted(recorded, actual) -> bool:
    """``recorded`` (from the log, sensitive fields redacted) is ``actual`` with some values redacted."""
    if recorded == REDACTED:
        return True
    if isinstance(recorded, dict) and isinstance(actual, dict):
        return recorded.keys() == actual.keys() and all(_same_but_redacted(recorded[k], actual[k]) for k in recorded)
    if isinstance(recorded, list) and isinstance(actual, list):
        return len(recorded) == len(actual) and all(_same_but_redacted(r, a) for r, a in zip(recorded, actual))
    if isinstance(recorded, str) and isinstance(actual, str) and REDACTED in recorded + actual:
        # redacted by value inside text (flowctl.engine.sensitive), on either side: a finished run's row is
        # redacted with every value the run learnt, its first event with those known at the start
        return _fits(recorded, actual) or _fits(actual, recorded)
    if actual == REDACTED:
        return True
    return canonical(recorded) == canonical(actual)


def _fits(pattern_text: str, text: str) -> bool:
    import re

    return re.fullmatch("(?s:.+?)".join(re.escape(p) for p in pattern_text.split(REDACTED)), text) is not None


def redact(value, fields):
    """Copy of ``value`` with every key named in ``fields`` replaced (any depth). ``fields`` may
    hold dotted paths (``card.number``) or plain names (matched at any depth)."""
    if not fields:
        return value
    plain = {f for f in fields if "." not in f}
    dotted = [f.split(".") for f in fields if "." in f]

    def walk(v, path):
        if isinstance(v, dict):
            out = {}
            for k, item in v.items():
                p = path + [k]
                if k in plain or any(d == p for d in dotted):
                    out[k] = REDACTED
                else:
                    out[k] = walk(item, p)
            return out
        if isinstance(v, list):
            return [walk(x, path) for x in v]
        return v

    return walk(value, [])
