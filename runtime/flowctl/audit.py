"""The audit log's hash chain and redaction.

Every event of a run carries ``prev_hash`` and ``hash``::

    hash = sha256(f"{prev_hash}\\n{seq}\\n{ts!r}\\n{type}\\n{state!r}\\n{attempt!r}\\n{data_json}")

where ``data_json`` is the event's data exactly as stored (UTF-8 JSON text, serialised once when
the event is recorded) and ``prev_hash`` of the first event is ``""``. Verifying therefore hashes
the stored bytes themselves, not a re-serialisation. The run row also keeps the last ``seq`` and
``hash``, written in the same transaction, so deleting events at the tail is detected too.

:func:`verify_chain` returns a list of problems (empty when the log is intact).
"""
from __future__ import annotations

import hashlib
import json

REDACTED = "***redacted***"


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def _c_encoder():
    """The C encoder behind ``_ENCODER``, built once (``JSONEncoder.encode`` builds it on every
    call). Used only if it is there and gives exactly ``_ENCODER``'s text on a sample."""
    try:
        from json.encoder import c_make_encoder, encode_basestring

        enc = c_make_encoder(None, str, encode_basestring, None, ":", ",", False, False, True)
        sample = {"a": [1, 2.5, None, True, "é\n"], "b": {"c": float("nan")}, "d": object}
        if "".join(enc(sample, 0)) == _ENCODER.encode(sample):
            return enc
    except Exception:  # noqa: BLE001 - no C accelerator, or another signature: the plain encoder
        pass
    return None


_C_ENCODER = _c_encoder()


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
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


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
    for ev in events:
        if ev.get("data_json") is None:
            ev["data_json"] = encode_data(ev.get("data"))
        ev["prev_hash"] = prev_hash
        prev_hash = ev["hash"] = event_hash(prev_hash, ev)
    return prev_hash


def verify_chain(events: list[dict], last_seq: int | None = None, last_hash: str | None = None) -> list[str]:
    """Problems found in ``events`` (dicts with seq, ts, type, state, attempt, data, prev_hash, hash),
    in ``seq`` order. ``last_seq``/``last_hash`` are the run row's record of the chain's end."""
    problems = []
    prev = ""
    expected_seq = 1
    for ev in events:
        if ev["seq"] != expected_seq:
            problems.append(f"event {expected_seq} is missing (next stored is {ev['seq']})")
            expected_seq = ev["seq"]
        if ev.get("prev_hash", "") != prev:
            problems.append(f"event {ev['seq']} does not follow event {ev['seq'] - 1} (prev_hash differs)")
        if event_hash(ev.get("prev_hash", ""), ev) != ev.get("hash"):
            problems.append(f"event {ev['seq']} ({ev['type']}) was modified (hash differs)")
        prev = ev.get("hash", "")
        expected_seq += 1
    if last_seq is not None and last_seq != expected_seq - 1:
        problems.append(f"the run records {last_seq} events but {expected_seq - 1} are stored (events deleted or added)")
    if last_hash is not None and events and last_hash != prev:
        problems.append("the run's last hash does not match the last stored event")
    return problems


FINAL_EVENTS = {"succeeded": "run_succeeded", "failed": "run_failed", "cancelled": "run_cancelled"}


def verify_run(row: dict, events: list[dict]) -> list[str]:
    """:func:`verify_chain` plus the run row against its log: the log starts with ``run_started``
    for this flow and input, and a finished run's status and output match its last events.

    The chain is not keyed: someone who can write the store could rebuild both the events and the
    run row consistently. Ship the last hash elsewhere (a ticket, a log) to detect that too.
    """
    problems = verify_chain(events, row.get("last_seq"), row.get("last_hash"))
    if not events:
        return problems + ["the run has no events (run_started is missing)"]
    first = events[0]
    if first["type"] != "run_started":
        problems.append(f"the first event is {first['type']}, not run_started")
    else:
        data = first.get("data") or {}
        if data.get("flow") != row.get("flow"):
            problems.append(f"the run row says flow {row.get('flow')!r}, run_started says {data.get('flow')!r}")
        if not _same_but_redacted(data.get("input"), row.get("input")):
            problems.append("the run row's input differs from the input recorded in run_started")
    expected = FINAL_EVENTS.get(row.get("status"))
    if expected:
        finals = [e for e in events if e["type"] in FINAL_EVENTS.values()]
        if not finals or finals[-1]["type"] != expected:
            problems.append(f"the run row says {row.get('status')}, but the log does not end that way")
        elif (expected == "run_succeeded" and not (finals[-1].get("data") or {}).get("truncated")  # too big to log
              and not _same_but_redacted((finals[-1].get("data") or {}).get("output"), row.get("output"))):
            problems.append("the run row's output differs from the output recorded in run_succeeded")
    return problems


def _same_but_redacted(recorded, actual) -> bool:
    """``recorded`` (from the log, sensitive fields redacted) is ``actual`` with some values redacted."""
    if recorded == REDACTED:
        return True
    if isinstance(recorded, dict) and isinstance(actual, dict):
        return recorded.keys() == actual.keys() and all(_same_but_redacted(recorded[k], actual[k]) for k in recorded)
    if isinstance(recorded, list) and isinstance(actual, list):
        return len(recorded) == len(actual) and all(_same_but_redacted(r, a) for r, a in zip(recorded, actual))
    if isinstance(recorded, str) and isinstance(actual, str) and REDACTED in recorded + actual:
        # redacted by value inside text (flowctl.sensitive), on either side: a finished run's row is
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
