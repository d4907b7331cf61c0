"""What the run-related commands share: opening the project and store, parsing --input/--param,
printing a run's outcome, and the live progress listener."""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import click

from flowctl.errors import UsageError
from flowctl.testing.paths import one_line_path


def open_project(root):
    from flowctl.definition.loader import load_project

    return load_project(root)


def review_states(root, ids) -> dict:
    """State id -> state of the given ids (the states runs are paused at), reading only their files
    under ``project_root(root)``; an id whose file does not load is left out."""
    from flowctl.definition.partial import load_states

    return load_states(project_root(root), ids)


def open_flow_project(root, flow: str):
    """The project a run of ``flow`` needs: only the files it reaches
    (:func:`flowctl.definition.partial.load_for_flow`) when those load and validate cleanly (or this
    very definition of the flow did before: :func:`flowctl.engine.flowfiles.refuse_unchecked`), else
    the whole project (so a broken flow is refused exactly as a whole-project load refuses it)."""
    from flowctl.definition.partial import load_for_flow
    from flowctl.engine.flowfiles import refuse_broken, remember_checked, was_checked
    from flowctl.errors import ProjectError

    part = load_for_flow(root, flow)
    if part is not None:
        reached = [part.flows[fid] for fid in sorted(part.reached)]
        unchecked = [f for f in reached if not was_checked(part, f)]
        if unchecked:
            from flowctl.check.checks import validate

            diagnostics = validate(part)
            try:
                for f in unchecked:
                    refuse_broken(part, f, diagnostics)
                    remember_checked(part, f)
            except ProjectError:
                part = None
    return part if part is not None else open_project(root)


def open_store(db, project_root, *, create: bool = False, empty_ok: bool = False):
    """The run store for a command; read-only commands never create one (``create=False``).

    ``empty_ok``: a read-only command (runs, stats, reviews, policy check) on a project that has
    never run, with the default store not yet made, sees an empty store (nothing is created). A
    store named by ``--db`` or ``FLOWCTL_DB`` that does not exist stays an error (a typo, likely)."""
    from flowctl.store.sql import MemoryStore, normalise_url, open_store as _open

    url = db or os.environ.get("FLOWCTL_DB")
    if empty_ok and not url and not create:
        default = normalise_url(None, Path(project_root))
        if default.startswith("sqlite:///") and not Path(default[len("sqlite:///"):]).exists():
            return MemoryStore()
    return _open(url, Path(project_root), create=create)


def project_root(root) -> Path:
    """The project folder of a read command, without loading its definitions (a read command
    needs only where the default store is): ``root`` (or the current folder) when it holds
    ``orchestration/``, else :func:`flowctl.definition.loader.find_root`. Raises
    :class:`~flowctl.errors.ProjectError` when there is no project."""
    here = Path(root or os.getcwd()).resolve()
    if here.name != "orchestration" and (here / "orchestration").is_dir():
        return here  # what find_root gives, without importing the definition loader
    from flowctl.definition.root import find_root

    return find_root(root)


def unknown_flow(root, flow):
    """The :class:`~flowctl.errors.UsageError` ``no flow 'x'`` (did you mean) when ``flow`` (a
    ``--flow`` filter) is no flow file of the project, else None. Reads only the names of
    ``orchestration/transitions/`` (no definition is loaded)."""
    if not flow:
        return None
    folder = project_root(root) / "orchestration" / "transitions"
    names = sorted(p.stem for p in folder.glob("*") if p.suffix in (".yaml", ".yml", ".json")) if folder.is_dir() else []
    if flow in names:
        return None
    from flowctl.definition.kinds import no_flow

    return no_flow(flow, names)


def note_unknown_flow(root, flow) -> None:
    """On standard error, when ``flow`` (a ``--flow`` filter) is no flow file of the project:
    ``note: no flow 'x' in this project (did you mean 'y'?)``: an empty listing then says why."""
    err = unknown_flow(root, flow)
    if err is not None:
        click.echo(f"note: {err} in this project ({err.hint})", err=True)


def open_reader(db, project_root, *, empty_ok: bool = False):
    """The run store of a read command (trace, runs, stats, reviews, audit): a SQL store at this
    flowctl's schema is read through the DBAPI (:class:`flowctl.store.reader.SqlReader`, no
    SQLAlchemy); any other (memory, an older store to upgrade, a URL with options, a store that
    does not exist) as :func:`open_store` opens it (``create=False``; ``empty_ok`` as there)."""
    from flowctl.store.core import SCHEMA_VERSION
    from flowctl.store.reader import open_reader as _reader
    from flowctl.store.url import normalise_url

    url = normalise_url(db or os.environ.get("FLOWCTL_DB"), Path(project_root))
    exists = not url.startswith("sqlite:///") or Path(url[len("sqlite:///"):]).is_file()
    reader = _reader(url, SCHEMA_VERSION) if exists and url != "memory" else None
    return reader or open_store(db, project_root, empty_ok=empty_ok)


def fetch_run(root, db, run_id, *, with_children: bool = False):
    """``(run row, its events)`` from the store (read-only); with ``with_children`` also the lines
    of its child-run tree (:func:`child_tree`). For a long run, :func:`read_run_events` reads the
    events in batches instead of all at once."""
    with read_run_events(root, db, run_id, with_children=with_children) as found:
        row, events = found[0], list(found[1])
        return (row, events) if not with_children else (row, events, found[2])


@contextlib.contextmanager
def read_run_events(root, db, run_id, *, with_children: bool = False, steps: bool = False):
    """A context giving ``(run row, its events, child-run tree lines or None, step records or
    None, the store)`` of ``run_id`` (an id or a unique prefix) from the store, read-only; the events are
    an iterator read in batches while the context is open (:func:`flowctl.store.events.iter_events`),
    the store closed at its end."""
    from flowctl.store.events import iter_events

    store = open_reader(db, project_root(root))
    try:
        row = store.get_run(run_id)
        tree = child_tree(store, row["id"]) if with_children else None
        records = store.steps(row["id"]) if steps else None
        yield row, iter_events(store, row["id"]), tree, records, store
    finally:
        store.close()


def child_tree(store, run_id: str, depth: int = 1, limit: int = 200) -> list:
    """Lines describing the child runs of ``run_id`` (parallel/map/subflow), as an indented tree."""
    lines = []
    children = store.list_runs(parent_id=run_id, limit=limit)
    for child in sorted(children, key=lambda r: ((r.get("cursor") or {}).get("parent") or {}).get("index", 0)):
        info = (child.get("cursor") or {}).get("parent") or {}
        path = one_line_path((child.get("cursor") or {}).get("path", []))
        lines.append(f"{'  ' * depth}└ {child['flow']}#{info.get('index', '?')} {child['id']}: {child['status']}  {path}")
        if depth < 4:
            lines.extend(child_tree(store, child["id"], depth + 1, limit))
    if len(children) == limit:
        lines.append(f"{'  ' * depth}… (first {limit} shown)")
    return lines


def _events_for_json(events):
    """Events as ``--format json`` prints them: ISO times added, the stored JSON text dropped."""
    from flowctl.engine.clock import iso

    for ev in events:
        ev.pop("data_json", None)
        ev["time"] = iso(ev["ts"])
    return events


def open_engine(root, db, *, max_inline_wait="10s", progress=True, check=True, create=True, flow=None):
    """The engine of a command. ``flow``: the flow the command runs; only the files it reaches are
    loaded (:func:`open_flow_project`). Raises :class:`UsageError` for a bad ``--max-inline-wait``."""
    from flowctl.definition.durations import parse_duration
    from flowctl.engine.engine import Engine

    try:
        wait = parse_duration(max_inline_wait)
    except ValueError as exc:
        raise UsageError(f"--max-inline-wait: {exc}") from None
    project = open_project(root) if flow is None else open_flow_project(root, flow)
    store = open_store(db, project.root, create=create)
    listener = Progress() if progress else None
    return Engine(project, store, max_inline_wait=wait, listener=listener, check=check)


def tools_print_to_stderr(fmt: str):
    """While tools run, whatever they print goes to stderr when stdout carries machine output."""
    import contextlib

    return contextlib.redirect_stdout(sys.stderr) if fmt != "text" else contextlib.nullcontext()


#: bytes of an ``--input``/``--data``/``--params-file`` file (or characters of JSON text): 4x the
#: largest payload the store keeps (flowctl.engine.payload.MAX_PAYLOAD, 1 MiB), room for indentation and YAML
MAX_ARG_FILE = 4 << 20


def parse_json_arg(value, what: str):
    """``--input`` text: JSON, or ``@path`` to a JSON/YAML file, or ``@-`` for standard input
    (also a pipe or device: ``@/dev/stdin``, ``@<(cmd)``); at most :data:`MAX_ARG_FILE` bytes."""
    if value is None:
        return None
    if value.startswith("@"):
        if not value[1:]:
            raise UsageError(f"{what}: @ needs a file name", hint=f"{what} @input.json, @- (standard input), or JSON text")
        path = Path(value[1:])
        if path.is_dir():
            raise UsageError(f"{what}: {path} is a folder, not a file", hint=f"{what} @input.json, or JSON text")
        if value != "@-" and not path.exists():
            raise UsageError(f"{what}: no such file {path}")
        size = path.stat().st_size if path.is_file() else 0
        if size > MAX_ARG_FILE:  # refused by its size, before it is read
            raise UsageError(f"{what}: {path} is {size} bytes; the limit is {MAX_ARG_FILE}",
                             hint="a run's input is at most 1 MiB of JSON: pass a reference to the data, not the data")
        try:
            raw = _read_capped(path, what, value == "@-")
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{what}: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        if path.suffix in (".yaml", ".yml"):
            from flowctl.definition.yamlio import loads

            try:
                return loads(text, str(path))
            except ValueError as exc:
                raise UsageError(f"{what}: {exc}") from None
        source = "standard input" if value == "@-" else str(path)
    else:
        text, source = value, what
        if len(text) > MAX_ARG_FILE:
            raise UsageError(f"{what}: the JSON text is {len(text)} characters; the limit is {MAX_ARG_FILE}")
    if not text.strip():
        raise UsageError(f"{what}: {'the JSON text' if source == what else source} is empty", hint="pass JSON like '{\"order_id\": \"A-1\"}' or @file.json")
    try:
        value = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates,
                           parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what}: not valid JSON ({source}:{exc.lineno}:{exc.colno}: {exc.msg})",
                         hint="pass JSON like '{\"order_id\": \"A-1\"}' or @file.json") from None
    except RecursionError:
        raise UsageError(f"{what}: the JSON nests too deeply") from None
    except ValueError as exc:  # NaN/Infinity, duplicate keys, integers too long to convert
        raise UsageError(f"{what}: {exc}") from None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what}: the JSON holds a lone surrogate (\\ud800…), which is not text") from None
    return value


def _read_capped(path: Path, what: str, stdin: bool) -> bytes:
    """The bytes of a file, pipe or device (standard input for ``stdin``), refusing more than
    :data:`MAX_ARG_FILE` of them (a pipe has no size to check first)."""
    if stdin:
        data = sys.stdin.buffer.read(MAX_ARG_FILE + 1)
    else:
        with path.open("rb") as fh:
            data = fh.read(MAX_ARG_FILE + 1)
    if len(data) > MAX_ARG_FILE:
        where = "standard input" if stdin else path
        raise UsageError(f"{what}: {where} holds more than {MAX_ARG_FILE} bytes, the limit",
                         hint="a run's input is at most 1 MiB of JSON: pass a reference to the data, not the data")
    return data


def _finite_float(text):
    """A JSON number as a float; one too large for a float (``1e999``) is refused, not infinity."""
    import math

    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is too large for a number (at most about 1.8e308)")
    return value


def _no_constant(name):
    raise ValueError(f"{name} is not JSON (use null or a number)")


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in the JSON object")
        out[key] = value
    return out


def parse_params(pairs, params_file):
    params = {}
    if params_file:
        loaded = parse_json_arg("@" + params_file, "--params-file")
        if not isinstance(loaded, dict):
            raise UsageError("--params-file must hold a mapping")
        params.update(loaded)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--param {pair!r}: write KEY=VALUE")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
        except RecursionError:  # (breaker finding: an internal error)
            raise UsageError(f"--param {key}: the JSON nests too deeply") from None
    return params


def result_path(result) -> str:
    """A run result's path in one line, ``… `` first when the checkpoint kept only its tail."""
    return ("… " if (result.steps or 0) > len(result.path) else "") + one_line_path(result.path)


def _store_flag(db) -> str:
    """`` --db URL`` for the commands a result suggests (empty for the default store)."""
    import shlex

    return f" --db {shlex.quote(db)}" if db else ""


def print_result(result, *, fmt="text", db=None) -> int:
    """Print a run's outcome (text or JSON) and what to do next; return its exit code. ``db`` is the
    ``--db`` the run used: the suggested commands repeat it."""
    if fmt == "json":
        from dataclasses import asdict

        click.echo(json.dumps(asdict(result), indent=2, ensure_ascii=False, default=str))
        return result.exit_code
    colour = {"succeeded": "green", "failed": "red", "cancelled": "red"}.get(result.status, "yellow")
    click.echo(f"run {result.run_id} ({result.flow}): " + click.style(result.status, fg=colour, bold=True))
    if result.path:
        earlier = (result.steps or 0) - len(result.path)
        states = "state" if earlier == 1 else "states"
        if earlier <= 0:
            note = ""
        elif db == "memory":
            note = f"  ({earlier} earlier {states}; --db memory keeps no log to trace them)"
        else:
            note = f"  ({earlier} earlier {states}: flowctl trace {result.run_id}{_store_flag(db)})"
        click.echo("path: " + result_path(result) + note)
    if result.status == "succeeded":
        click.echo("output: " + json.dumps(result.output, ensure_ascii=False, sort_keys=True))
    if result.error and result.status == "cancelled" and result.error.get("type") == "Cancelled":
        e = result.error  # the reason it stopped, not an error of the command
        click.echo(f"cancelled at {e.get('state')}: {e.get('message')}")
    elif result.error:
        e = result.error
        code = f" [{e.get('code')}]" if e.get("code") != e.get("type") else ""
        click.echo(f"error: {e.get('type')}{code} at {e.get('state')}: {e.get('message')}")
    for r in result.residue:
        click.echo(click.style("residue: ", fg="red") + f"{r['tool']} in '{r['state']}' could not be undone: {r['error']}")
    if db == "memory" and result.status in ("paused", "waiting"):
        click.echo(f"{result.status}, but --db memory keeps nothing: this run ended with this process and cannot be "
                   "resumed (use the default store, or --db sqlite:///FILE, to resume it later)")
        return result.exit_code
    if result.status == "paused" and result.review:
        rv = result.review
        click.echo(f"paused for review at '{rv['state']}': " + json.dumps(rv.get("show"), ensure_ascii=False))
        if rv.get("token"):
            click.echo(f"resume with: flowctl resume {result.run_id}{_store_flag(db)} --token {rv['token']} --decision "
                       + "|".join(rv.get("decisions") or []))
    elif result.status == "paused" and result.paused_by:
        p = result.paused_by
        click.echo(f"paused at '{p['state']}' by {p.get('by') or 'a user'}: {p.get('reason')}; continue it with: "
                   f"flowctl resume {result.run_id}{_store_flag(db)}")
    elif result.status == "paused":
        click.echo(f"paused; see: flowctl reviews{_store_flag(db)}, then flowctl resume {result.run_id}{_store_flag(db)} "
                   "--token T --decision D")
    if result.status == "waiting" and result.available_at:
        from flowctl.engine.clock import iso

        click.echo(f"waiting until {iso(result.available_at)}; continue with: flowctl resume {result.run_id}{_store_flag(db)} "
                   f"(or flowctl recover{_store_flag(db)})")
    if result.status == "waiting" and result.children:
        click.echo(f"waiting on child runs; run {result.run_id} continues when they end:")
        _print_children(result.children, _store_flag(db), "  ")
    return result.exit_code


def _print_children(children, flag: str, indent: str) -> None:
    """What each unfinished child run waits for and how to continue it (nested children indented)."""
    from flowctl.engine.clock import iso

    for ch in children:
        rv = ch.get("review")
        head = f"{indent}child run {ch['run_id']} ({ch['flow']})"
        if ch["status"] == "paused" and rv:
            click.echo(f"{head} is paused for review at '{rv['state']}': " + json.dumps(rv.get("show"), ensure_ascii=False))
            decisions = "|".join(rv.get("decisions") or []) or "D"
            if rv.get("token"):
                click.echo(f"{indent}  resume it with: flowctl resume {ch['run_id']}{flag} --token {rv['token']} "
                           f"--decision {decisions}")
            else:
                click.echo(f"{indent}  see: flowctl reviews{flag}; a new token: flowctl reviews{flag} --reissue "
                           f"{ch['run_id']}, then flowctl resume {ch['run_id']}{flag} --token T --decision {decisions}")
        elif ch["status"] == "paused":
            click.echo(f"{head} is paused; see: flowctl reviews{flag}")
        elif ch.get("available_at") and not ch.get("children"):
            click.echo(f"{head} is waiting until {iso(ch['available_at'])}; continue with: flowctl recover{flag}")
        else:
            click.echo(f"{head} is {ch['status']}" + (" on its own child runs:" if ch.get("children") else ""))
        if ch.get("children"):
            _print_children(ch["children"], flag, indent + "  ")


class Progress:
    """Live progress on stderr: one line per state, tool outcome, retry and compensation."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        #: True while other runs' due review timeouts fire before this command's run: their lines
        #: name their run (new-user finding: they read as the start of the new run)
        self.others = False
        self._run = None

    kind = None  # the type of the state being run
    _unanswered = False  # the last verify raised or gave no bool (its verify_failed was shown)

    def _verify_said(self, d, happened: str) -> str:
        if d.get("happened"):
            return "verify says it " + happened
        said, self._unanswered = ("verify could not tell, so it counts as not happened" if self._unanswered
                                  else "verify says it had not happened"), False
        return said

    def _nth(self, ev) -> str:
        """An agent's tool calls are numbered by call (the N-th call of the visit), a task's by attempt."""
        return f"{'call' if self.kind == 'agent' else 'attempt'} {ev['attempt']}"

    @contextlib.contextmanager
    def naming_runs(self):
        """Within it, each line names the run it is about (other runs driven before the command's own)."""
        self.others = True
        try:
            yield
        finally:
            self.others = False

    def _out(self, text, **style):
        if self.others and self._run:
            text = f"[earlier run {self._run[:12]}] {text}"
        click.echo(click.style(text, **style) if self.tty else text, file=self.stream)

    def __call__(self, ev) -> None:
        t, d, s = ev["type"], ev["data"], ev["state"]
        self._run = ev.get("run_id")
        if t == "state_entered":
            self.kind = d.get("type")
            self._out(f"→ {s} ({d.get('type')}, step {d.get('step')})", bold=True)
        elif t == "verify_failed":  # (new-user finding: a verify that raised read as "verify says it had not happened")
            self._unanswered = True
            self._out(f"    verify of {d.get('tool')} could not answer: {d.get('error')}: {d.get('message')}", fg="red")
        elif t == "step_recovered" and d.get("after") == "timeout":  # (new-user finding: read as a crash)
            self._out(f"    {d.get('tool')} timed out; " + self._verify_said(d, f"had happened ({d.get('action')})"),
                      fg="yellow")
        elif t == "step_recovered":  # (new-user finding: a recovered call looked like a fresh "ok in 0ms")
            self._out(f"    {d.get('tool')} was in flight when its process stopped: "
                      + self._verify_said(d, "had happened (not called again)"), fg="yellow")
        elif t == "tool_succeeded":
            self._out(f"    {d.get('tool')} ok in {d.get('duration_ms', 0):.0f}ms ({self._nth(ev)})", fg="green")
        elif t == "tool_failed":
            at = f", raised at {d['at']}" if d.get("at") else ""
            self._out(f"    {d.get('tool')} failed: {d.get('error')}: {d.get('message')} ({self._nth(ev)}{at})", fg="red")
        elif t == "retry_scheduled":
            self._out(f"    retry in {d.get('delay_s'):.3g}s (attempt {d.get('next_attempt')})", fg="yellow")
        elif t == "policy_decided" and d.get("outcome") != "allow":
            self._out(f"    policy {d.get('outcome')}: {d.get('reason')}", fg="yellow")
        elif t == "fallback_used":
            self._out(f"    fallback {d.get('tool')}", fg="yellow")
        elif t == "error_caught":
            e = d.get("error") or {}
            self._out(f"    {e.get('type')} handled by {d.get('layer')} layer", fg="yellow")
        elif t.startswith("compensation_"):
            self._out(f"    {t.replace('_', ' ')}: {d.get('tool')} of '{s}'", fg="magenta")
        elif t == "review_requested":
            self._out(f"    review requested: {json.dumps(d.get('show'), ensure_ascii=False)}", fg="cyan")
