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
import re
import secrets
import time
import zlib
from pathlib import Path

from flowctl.errors import UsageError
from flowctl.store.audit import ChainCheck
from flowctl.store.records import stored_events

FORMAT = "flowctl-prune-1"
SUFFIX = ".jsonl.gz"
#: the names :func:`archive_name` gives
NAME = re.compile(r"prune-[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}\.jsonl\.gz")


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


#: The bounds of reading an archive: one line (a run or a stored row) and the whole file,
#: decompressed. A file past either is refused with a problem naming it (a gzip bomb, not
#: something flowctl prune writes: an event's data is at most 1 MiB).
MAX_LINE = 64 << 20
MAX_TOTAL = 16 << 30


def _valid_row(row) -> bool:
    """Whether ``row`` has the shape of a stored row ``[seq, ts, type, state, attempt, data,
    prev_hash, hash, n_events]``."""
    if not (isinstance(row, list) and len(row) == 9):
        return False
    seq, ts, typ, state, attempt, data, prev, digest, n = row
    return (type(seq) is int and type(ts) in (int, float) and isinstance(typ, str)
            and (state is None or isinstance(state, str)) and (attempt is None or type(attempt) is int)
            and (data is None or isinstance(data, str)) and isinstance(prev, str) and isinstance(digest, str)
            and (n is None or type(n) is int))


class ArchiveReader:
    """Streams one archive (never held whole): :meth:`items` yields ``("run", run line)`` and
    ``("row", row tuple)`` in file order, each line read with a bound (:data:`MAX_LINE`, and
    :data:`MAX_TOTAL` for the file). ``problems`` say, with the line number, where the file is not
    what flowctl wrote (not gzip, not JSON, too long, cut short, a line edited); reading stops at
    the first."""

    def __init__(self, path: Path, *, max_line: int | None = None, max_total: int | None = None):
        self.path = Path(path)
        self.max_line = MAX_LINE if max_line is None else max_line
        self.max_total = MAX_TOTAL if max_total is None else max_total
        self.problems: list[str] = []
        self.header = None

    def items(self, run_id: str | None = None):
        """The runs and rows of the file; with ``run_id``, only that run's (the rows of the
        others are counted and hashed, not parsed)."""
        sha, lines, total, manifest, wanted, number = hashlib.sha256(), 0, 0, None, None, 0
        problems = self.problems
        try:
            with gzip.open(self.path, "rb") as f:
                while raw := f.readline(self.max_line + 1):
                    number += 1
                    total += len(raw)
                    if len(raw) > self.max_line:
                        problems.append(f"line {number} is longer than {self.max_line} bytes (not what flowctl "
                                        "prune writes)")
                        return
                    if total > self.max_total:
                        problems.append(f"it decompresses to more than {self.max_total} bytes (at line {number})")
                        return
                    if manifest is not None:
                        problems.append(f"line {number} follows the manifest (lines added)")
                        return
                    if wanted is False and raw.startswith(b'{"row":'):
                        sha.update(raw)
                        lines += 1
                        continue
                    try:
                        obj = json.loads(raw)
                    except ValueError:
                        problems.append(f"line {number} is not JSON")
                        return
                    if isinstance(obj, dict) and "manifest" in obj:
                        manifest = obj["manifest"] if isinstance(obj["manifest"], dict) else {}
                        continue
                    sha.update(raw)
                    lines += 1
                    if number == 1:
                        if not (isinstance(obj, dict) and obj.get("archive") == FORMAT):
                            problems.append(f"it is not a flowctl prune archive ({FORMAT})")
                            return
                        self.header = obj
                    elif isinstance(obj, dict) and isinstance(obj.get("run"), dict):
                        wanted = run_id is None or str(obj["run"].get("id")) == run_id
                        if wanted:
                            yield "run", obj["run"]
                    elif isinstance(obj, dict) and _valid_row(obj.get("row")) and wanted is not None:
                        if wanted:
                            yield "row", tuple(obj["row"])
                    else:
                        problems.append(f"line {number} is neither a run nor a row")
                        return
        except (OSError, EOFError, zlib.error) as exc:
            problems.append(f"it cannot be read whole ({type(exc).__name__}: {exc})")
            return
        if manifest is None:
            problems.append("it has no manifest (the file was cut short)")
        elif manifest.get("lines") != lines or manifest.get("sha256") != sha.hexdigest():
            problems.append("its lines are not those its manifest counts and hashes (edited, added or removed)")


def row_events(run_id: str, row: tuple) -> list:
    """The events of one archived row (as the store reads them back)."""
    return stored_events(run_id, row[:5] + (row[5], row[6], row[7], None, row[8]))


def _range_of(rng) -> tuple | None:
    if (isinstance(rng, list) and len(rng) == 4 and type(rng[0]) is int and type(rng[1]) is int
            and 1 <= rng[0] <= rng[1] and isinstance(rng[2], str) and isinstance(rng[3], str)):
        return tuple(rng)
    return None


class RangesCheck:
    """Checks one archived run from its rows, fed one at a time (:meth:`add_row`, in file order):
    every range's events are all there, in order, chained from the range's ``prev_hash`` and
    ending at its ``hash``, each row hashing to its own text. ``events``: how many were fed."""

    def __init__(self, run_id: str, info: dict):
        self.run_id, self.problems, self.events = run_id, [], 0
        raw = info.get("ranges") if isinstance(info.get("ranges"), list) else []
        if not raw:
            self.problems.append("the archive lists no range for it")
        self.ranges = []
        for rng in raw:
            if _range_of(rng) is None:
                self.problems.append(f"a range of the archive is malformed ({rng!r})")
            else:
                self.ranges.append(tuple(rng))
        self.ranges.sort()
        self._at, self._check = 0, None

    def _close(self) -> None:
        first, last, prev_hash, head = self.ranges[self._at]
        check = self._check or self._open()
        found = check.finish()
        if check.expected_seq - 1 != last:
            found.append(f"events {check.expected_seq}-{last} are missing from the archive")
        elif check.count and check.prev != head:
            found.append(f"event {last} does not end with the head the store keeps ({head[:12]})")
        self.problems += found
        self._at, self._check = self._at + 1, None

    def _open(self) -> ChainCheck:
        first, _last, prev_hash, _head = self.ranges[self._at]
        check = ChainCheck()
        check.prev, check.expected_seq = prev_hash, first
        return check

    def add_row(self, row: tuple) -> None:
        self.events += row[8] if row[8] is not None else 1
        while self._at < len(self.ranges) and row[0] > self.ranges[self._at][1]:
            self._close()
        if self._at == len(self.ranges) or row[0] < self.ranges[self._at][0]:
            self.problems.append(f"the row of event {row[0]} is in none of its ranges")
            return
        if self._check is None:
            self._check = self._open()
        for ev in row_events(self.run_id, row):
            self._check.add(ev)

    def finish(self) -> list[str]:
        while self._at < len(self.ranges):
            self._close()
        return self.problems


def verify_archive(target, run_id: str | None = None) -> tuple[list, list]:
    """Check ``target`` (a file or a folder of archives) alone, streaming each file: ``(checked,
    problems)`` where ``checked`` is ``[(file name, run id, events, ranges)]`` and each problem is
    ``(file name, run id or None, text)``. ``run_id``: only that run (an exact id). Raises
    :class:`UsageError` when ``target`` holds no archive."""
    checked, problems = [], []
    for path in archive_files(target):
        reader, check = ArchiveReader(path), None

        def done(check):
            problems.extend((path.name, check.run_id, p) for p in check.finish())
            checked.append((path.name, check.run_id, check.events, check.ranges))

        for kind, value in reader.items(run_id):
            if kind == "run":
                if check is not None:
                    done(check)
                check = RangesCheck(str(value.get("id")), value)
            else:
                check.add_row(value)
        if check is not None:
            done(check)
        problems += [(path.name, None, p) for p in reader.problems]
    return checked, problems


def is_archive_name(name) -> bool:
    """Whether ``name`` is one :func:`archive_name` gives (no folder in it)."""
    return isinstance(name, str) and NAME.fullmatch(name) is not None


def default_folder(root: Path) -> Path:
    """Where ``flowctl prune`` archives without ``--archive``: ``.flowctl/archive/`` of the project."""
    return Path(root) / ".flowctl" / "archive"
