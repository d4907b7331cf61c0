"""Prune archives: the event rows ``flowctl prune`` moves out of the store, and their checks.

An archive is one gzip-compressed JSON Lines file per prune, ``prune-<UTC time>-<6 hex>.jsonl.gz``,
written whole (to ``….partial``, flushed, fsynced, renamed, the folder fsynced) before anything is
deleted from the store. Its lines, in order:

* ``{"archive": "flowctl-prune-1", "created_at": <epoch s>, "cutoff": <epoch s>, "keep_types": [...] | null}``
* per run: ``{"run": {"id", "flow", "status", "last_seq", "last_hash", "ranges": [[first_seq, last_seq,
  prev_hash, hash], ...]}}``, then its rows, each ``{"row": [seq, ts, type, state, attempt, data,
  prev_hash, hash, n_events]}``: the stored row exactly (``data`` the stored text, a packed row's
  :func:`~flowctl.store.audit.pack_text`), in ``seq`` order;
* last, the manifest: ``{"manifest": {"runs": n, "rows": n, "events": n, "lines": n, "sha256": hex}}``
  (``lines`` and ``sha256``: of every line before it, each with its newline): a cut or edited file
  is reported as such.

A run's chain is checked from the archive alone (:func:`verify_archive`): each range's rows chain
from its ``prev_hash`` to its ``hash`` and hash to their own text, exactly as
:class:`~flowctl.store.audit.ChainCheck` checks them in the store.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import secrets
import time
from pathlib import Path

from flowctl.errors import UsageError
from flowctl.store.audit import ChainCheck
from flowctl.store.records import stored_events

FORMAT = "flowctl-prune-1"
SUFFIX = ".jsonl.gz"


def archive_name(now: float) -> str:
    """A new archive's file name: ``prune-20260101T000000Z-a1b2c3.jsonl.gz`` (UTC)."""
    return f"prune-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}-{secrets.token_hex(3)}{SUFFIX}"


class ArchiveWriter:
    """Writes one archive: :meth:`run` for each run, :meth:`row` for each of its rows, then
    :meth:`close` (manifest, fsync, rename). Until closed, only ``<name>.partial`` exists; on an
    error :meth:`abort` removes it."""

    def __init__(self, folder: Path, header: dict, now: float):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / archive_name(now)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self._raw = open(self.partial, "xb")
        self._gz = gzip.GzipFile(fileobj=self._raw, mode="wb", mtime=0)
        self._sha = hashlib.sha256()
        self.lines = self.runs = self.rows = self.events = 0
        self._line({"archive": FORMAT, **header})

    def _line(self, obj) -> None:
        data = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "surrogatepass")
        self._sha.update(data)
        self._gz.write(data)
        self.lines += 1

    def run(self, info: dict) -> None:
        self.runs += 1
        self._line({"run": info})

    def row(self, row: tuple) -> None:
        self.rows += 1
        self.events += row[8] if row[8] is not None else 1
        self._line({"row": list(row)})

    def close(self) -> tuple[Path, str]:
        """Finish the file; returns ``(path, sha256 hex of its bytes)``. Raises ``OSError``."""
        manifest = {"runs": self.runs, "rows": self.rows, "events": self.events, "lines": self.lines,
                    "sha256": self._sha.hexdigest()}
        self._gz.write((json.dumps({"manifest": manifest}, separators=(",", ":")) + "\n").encode("utf-8"))
        self._gz.close()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()
        os.replace(self.partial, self.path)
        _fsync_folder(self.path.parent)
        return self.path, file_sha256(self.path)

    def abort(self) -> None:
        try:
            self._gz.close()
            self._raw.close()
        finally:
            self.partial.unlink(missing_ok=True)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # a platform without directory handles (Windows): the rename is what it offers
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def archive_files(target) -> list[Path]:
    """The archives ``target`` names: a file, or every ``*.jsonl.gz`` of a folder (sorted). Raises
    :class:`UsageError` when there is none."""
    path = Path(target)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
        if not files:
            raise UsageError(f"--archive: {path} holds no prune archive (*{SUFFIX})",
                             hint="give the folder flowctl prune --archive wrote to, or one of its files")
        return files
    if not path.is_file():
        raise UsageError(f"--archive: no such file or folder {path}", hint="flowctl prune prints where it archived")
    return [path]


def read_archive(path: Path):
    """``(header, runs, problems)`` of one archive: ``runs`` maps a run id to ``{"info": the run
    line, "rows": [row tuples]}``; ``problems`` say where the file is not what flowctl wrote (not
    gzip, not JSON, cut short, a line edited). Holds the file's rows in memory."""
    header, runs, problems, current = None, {}, [], None
    sha, lines, manifest = hashlib.sha256(), 0, None
    try:
        with gzip.open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                if manifest is not None:
                    problems.append(f"line {number} follows the manifest (lines added)")
                    break
                try:
                    obj = json.loads(raw)
                except ValueError:
                    problems.append(f"line {number} is not JSON")
                    break
                if isinstance(obj, dict) and "manifest" in obj:
                    manifest = obj["manifest"] if isinstance(obj["manifest"], dict) else {}
                    continue
                sha.update(raw)
                lines += 1
                if number == 1:
                    header = obj if isinstance(obj, dict) and obj.get("archive") == FORMAT else None
                    if header is None:
                        problems.append(f"it is not a flowctl prune archive ({FORMAT})")
                        break
                elif isinstance(obj, dict) and isinstance(obj.get("run"), dict):
                    current = runs.setdefault(str(obj["run"].get("id")), {"info": obj["run"], "rows": []})
                elif isinstance(obj, dict) and isinstance(obj.get("row"), list) and len(obj["row"]) == 9 and current:
                    current["rows"].append(tuple(obj["row"]))
                else:
                    problems.append(f"line {number} is neither a run nor a row")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        problems.append(f"it cannot be read whole ({type(exc).__name__}: {exc})")
    if not problems:
        if manifest is None:
            problems.append("it has no manifest (the file was cut short)")
        elif manifest.get("lines") != lines or manifest.get("sha256") != sha.hexdigest():
            problems.append("its lines are not those its manifest counts and hashes (edited, added or removed)")
    return header, runs, problems


def range_events(run_id: str, rows: list, first: int, last: int) -> list:
    """The events of the archived ``rows`` in ``first``..``last`` (as the store reads them back)."""
    out = []
    for row in rows:
        if first <= row[0] <= last:
            out.extend(stored_events(run_id, row[:5] + (row[5], row[6], row[7], None, row[8])))
    return out


def verify_run_ranges(run_id: str, info: dict, rows: list) -> list[str]:
    """Problems of one archived run: every range's events are all there, in order, chained from
    the range's ``prev_hash`` and ending at its ``hash``, each row hashing to its own text."""
    problems = []
    ranges = info.get("ranges") if isinstance(info.get("ranges"), list) else []
    if not ranges:
        problems.append("the archive lists no range for it")
    for rng in ranges:
        if not (isinstance(rng, list) and len(rng) == 4):
            problems.append(f"a range of the archive is malformed ({rng!r})")
            continue
        first, last, prev_hash, head = rng
        check = ChainCheck()
        check.prev, check.expected_seq = prev_hash, first
        events = range_events(run_id, rows, first, last)
        for ev in events:
            check.add(ev)
        found = check.finish()
        if check.expected_seq - 1 != last:
            found.append(f"events {check.expected_seq}-{last} are missing from the archive")
        elif events and check.prev != head:
            found.append(f"event {last} does not end with the head the store keeps ({head[:12]})")
        problems += found
    return problems


def verify_archive(target, run_id: str | None = None) -> tuple[list, list]:
    """Check ``target`` (a file or a folder of archives) alone: ``(checked, problems)`` where
    ``checked`` is ``[(file name, run id, events, ranges)]`` and each problem is ``(file name,
    run id or None, text)``. ``run_id``: only that run (an exact id). Raises :class:`UsageError`
    when ``target`` holds no archive."""
    checked, problems = [], []
    for path in archive_files(target):
        _header, runs, file_problems = read_archive(path)
        problems += [(path.name, None, p) for p in file_problems]
        for rid, entry in runs.items():
            if run_id is not None and rid != run_id:
                continue
            found = verify_run_ranges(rid, entry["info"], entry["rows"])
            problems += [(path.name, rid, p) for p in found]
            events = sum(r[8] if r[8] is not None else 1 for r in entry["rows"])
            checked.append((path.name, rid, events, entry["info"].get("ranges") or []))
    return checked, problems


def archived_rows(target, run_id: str) -> dict:
    """The rows of ``run_id`` in the archives of ``target``, by the ``first_seq`` of their range:
    ``{first_seq: (file name, sha256 of the file, [rows])}``."""
    out = {}
    for path in archive_files(target):
        _header, runs, _problems = read_archive(path)
        entry = runs.get(run_id)
        if entry is None:
            continue
        digest = file_sha256(path)
        for rng in entry["info"].get("ranges") or []:
            if isinstance(rng, list) and len(rng) == 4:
                rows = [r for r in entry["rows"] if rng[0] <= r[0] <= rng[1]]
                out[rng[0]] = (path.name, digest, rows)
    return out


def merge_events(events, extra: list):
    """``events`` (an iterator in ``seq`` order, the store's) with the event lists of ``extra``
    (archived ranges, each in ``seq`` order) put in their place: one stream in ``seq`` order."""
    pending = sorted((lst for lst in extra if lst), key=lambda lst: lst[0]["seq"])
    for ev in events:
        while pending and pending[0][0]["seq"] < ev["seq"]:
            yield from pending.pop(0)
        yield ev
    for lst in pending:
        yield from lst
