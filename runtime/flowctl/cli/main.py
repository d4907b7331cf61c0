"""The ``flowctl`` command line: a thin layer over the library.

Each command parses its options here and calls ``flowctl.cli.commands.<name>.run(...)``, which returns
the exit code. :func:`flowctl.cli.invoke.call` is the one place that maps errors to exit codes: a
:class:`~flowctl.errors.UsageError` or :class:`~flowctl.errors.ProjectError` is exit 2, any other
flowctl error exit 1, and nothing ever prints a traceback unless ``FLOWCTL_DEBUG=1``.

Exit codes: 0 success, 1 failure (errors found, run failed), 2 unusable invocation,
3 run paused or waiting.
"""
from __future__ import annotations

import click

from flowctl.cli.options import root_db

from flowctl.cli.invoke import call as _call
from flowctl.cli.observe import LIMIT_MAX

SCHEMA_KINDS = ("state", "flow", "contract", "policy", "project", "models", "case")  # definition.kinds.SCHEMA_KINDS


def _login():
    """Who is at the keyboard, for the audit log when --by is not given (None if unknown)."""
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in this environment
        return None


class _Ordered(click.Group):
    """Lists commands in the order they are defined (the order of a workflow), not alphabetically."""

    def list_commands(self, ctx):
        return list(self.commands)


@click.group(cls=_Ordered, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="flowctl", prog_name="flowctl")
def main() -> None:
    """flowctl: run declarative workflows whose every side effect is declared, checked,
    recorded and undoable.

    Definitions live in orchestration/ (states/, transitions/, contracts/, policies/, tools/),
    found from the current folder or the --root option of each command.

    \b
    Typical use:
      flowctl validate                       check every file (CI: --format github)
      flowctl graph order_return -o g.svg   draw a flow
      flowctl run order_return --input @orchestration/examples/order_return.json
      flowctl trace RUN_ID                   what a run did, step by step

    Exit codes: 0 ok, 1 failed/errors, 2 unusable invocation, 3 paused or waiting.
    """
    _escape_unencodable()


def _escape_unencodable() -> None:
    """Text UTF-8 cannot hold (a lone surrogate a tool put in a message, kept as its escape by the
    store) is printed as its backslash escape instead of failing the command (breaker finding:
    every command showing such a run ended in an internal error). In ``--format json`` output the
    escape is the JSON escape of the same character, so the JSON stays valid."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot change (closed, or not text)
                pass


@main.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--root", type=click.Path(), help="Project folder (holding orchestration/); default: found from the current folder.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github", "sarif"]), default="text", show_default=True,
              help="text for people, json for tools, github for Actions annotations, sarif for code scanning.")
@click.option("--strict", is_flag=True, help="Fail (exit 1) on warnings too.")
@click.option("--import-check", is_flag=True, help="Also import every tool entrypoint, verify and compensate.")
def validate(paths, root, fmt, strict, import_check):
    """Check definition files: schemas, references, graph, handler order, expressions, contracts.

    PATHS may be project folders or single files (only their problems are reported, e.g. from
    pre-commit). Exit 0 when there are no errors (warnings alone pass unless --strict), 1 when
    there are errors, 2 when the invocation is unusable.

    \b
    Examples:
      flowctl validate
      flowctl validate --format sarif > flowctl.sarif
      flowctl validate orchestration/states/get_logistics.yaml
    """
    _call("validate", paths=paths, root=root, fmt=fmt, strict=strict, import_check=import_check)


@main.command()
@click.argument("kind", type=click.Choice(SCHEMA_KINDS))
def schema(kind):
    """Print the JSON Schema (2020-12) of a kind of file.

    \b
    Save it and point your editor at it, e.g. in a state file:
      mkdir -p .flowctl/schemas && flowctl schema state > .flowctl/schemas/state.json
      # then, first line of a state file:
      # yaml-language-server: $schema=../../.flowctl/schemas/state.json
    """
    _call("schema", kind=kind)


@main.command()
@click.argument("folder", default=".", type=click.Path(file_okay=False))
@click.option("--template", default="basic", show_default=True, metavar="NAME",
              help="The project to start from: basic (a sign-up flow with a gated side effect, "
                   "compensation and golden cases) or agent (support-ticket triage: an llm state, a review, "
                   "an agent state calling a gated refund tool, on a scripted model profile).")
def init(folder, template):
    """Create a new project in FOLDER (default: here) that validates, runs and has golden cases.

    \b
    Refuses, writing nothing, when FOLDER already has orchestration/. Prints the next steps.
      flowctl init /tmp/my-project && cd /tmp/my-project && flowctl test
      flowctl init /tmp/my-agent --template agent
    """
    _call("init", folder=folder, template=template)


# ------------------------------------------------------------------------------------ running
_root_db = root_db  # --db, --root (cli/options.py)


def _wait_opt(f):
    return click.option("--max-inline-wait", default="10s", show_default=True, metavar="DURATION",
                        help="Longest wait or retry delay slept in process; longer ones park the run (exit 3).")(f)


@main.command(name="run")
@click.argument("flow")
@click.option("--input", "input_", metavar="JSON|@FILE", help="Run input: JSON text, @file.json / @file.yaml, or @- for standard input (default: {}).")
@click.option("--param", "params", multiple=True, metavar="K=V", help="Set a flow param (repeatable); V is JSON or text.")
@click.option("--params-file", type=click.Path(), help="JSON/YAML mapping of params.")
@_root_db
@_wait_opt
@click.option("-q", "--quiet", is_flag=True, help="No live progress on stderr.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def run_cmd(flow, input_, params, params_file, root, db, max_inline_wait, quiet, fmt):
    """Run FLOW on an input, checkpointing every step.

    Live progress goes to stderr; the outcome, the path and the output to stdout.
    Exit 0 succeeded, 1 failed or definition errors (as validate), 2 unusable (bad flags or input,
    unknown flow), 3 paused for review or waiting on a timer (flowctl resume / flowctl recover).

    \b
    Examples:
      flowctl run order_return --input '{"order_id": "A-1001", "reason": "damaged"}'
      flowctl run order_return --input @orchestration/examples/order_return.json
      flowctl run outbound_report --input @orchestration/examples/outbound_report.json --param sender=ops@corp.example
      flowctl run order_return --input @in.json --db postgresql://postgres@127.0.0.1/flowctl
    """
    _call("run", flow=flow, input=input_, params=params, params_file=params_file, root=root, db=db,
          max_inline_wait=max_inline_wait, quiet=quiet, fmt=fmt)


@main.command()
@click.argument("run_id", metavar="RUN")
@click.option("--token", help="The review's one-time token (printed when the run paused, or sent by notify).")
@click.option("--decision", help="One of the review's decisions, e.g. approve or reject.")
@click.option("--data", metavar="JSON|@FILE", help="The decision's data, visible as review.data; checked against the "
              "review state's data_schema when it has one (refused, exit 2, naming where it is wrong).")
@click.option("--by", metavar="NAME", help="Who decided (recorded in the audit log; default: your login name).")
@_root_db
@_wait_opt
@click.option("-q", "--quiet", is_flag=True, help="No live progress on stderr.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def resume(run_id, token, decision, data, by, root, db, max_inline_wait, quiet, fmt):
    """Continue RUN: decide its pending review, continue a run an operator paused (from the
    console, flowctl pause or POST /v1/runs/{id}/pause), continue a wait that is due, or take
    over a run whose process died (a side effect in flight is verified before it is repeated).

    \b
    Examples:
      flowctl resume 01a2b3 --token T0k3n --decision approve --by alice
      flowctl resume 01a2b3            # an operator-paused run, a due wait or an orphaned run
    """
    _call("resume", run_id=run_id, token=token, decision=decision, data=data, by=by or _login(), root=root, db=db,
          max_inline_wait=max_inline_wait, quiet=quiet, fmt=fmt)


@main.command()
@_root_db
@_wait_opt
@click.option("-q", "--quiet", is_flag=True, help="No live progress on stderr.")
def recover(root, db, max_inline_wait, quiet):
    """Continue every orphaned run, every wait that is due and every review whose timeout passed."""
    _call("recover", root=root, db=db, max_inline_wait=max_inline_wait, quiet=quiet)


@main.command()
@click.argument("run_id", metavar="RUN")
@click.option("--no-compensate", is_flag=True, help="Do not undo completed side effects.")
@click.option("--by", metavar="NAME", help="Who cancelled (recorded; default: your login name).")
@_root_db
def cancel(run_id, no_compensate, by, root, db):
    """Stop RUN and undo its completed side effects, newest first.

    A run a live `flowctl worker` holds is cancelled by that worker at its next step (never in
    the middle of a side effect): the request is recorded and this exits 3. Exit 0 cancelled
    with every side effect undone, 1 cancelled but a side effect could not be undone (residue
    listed), 2 the run had already ended or a live process runs it, or bad input or store."""
    _call("cancel", run_id=run_id, no_compensate=no_compensate, by=by or _login(), root=root, db=db)


@main.command()
@click.option("--status", help="Only runs with this status (running, waiting, paused, succeeded, failed, cancelled).")
@click.option("--flow", help="Only runs of this flow.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1, max=LIMIT_MAX), help="How many runs to show.")
@click.option("--all", "all_", is_flag=True, help="Include child runs (parallel, map, subflow); default: top-level runs.")
@_root_db
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def runs(status, flow, limit, all_, root, db, fmt):
    """List runs, newest first (top-level runs; --all adds child runs)."""
    _call("runs", status=status, flow=flow, limit=limit, root=root, db=db, fmt=fmt, all_=all_)


@main.command()
@click.argument("run_id", metavar="RUN")
@_root_db
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--last", type=click.IntRange(min=1), metavar="N", help="Only the last N steps (the output says how many were left out).")
def trace(run_id, root, db, fmt, last):
    """Show what RUN did: the path in one line (a → b ×3 → c) and a table of steps with
    durations, errors and policy decisions. RUN may be a unique prefix of the id."""
    _call("trace", run_id=run_id, root=root, db=db, fmt=fmt, last=last)


@main.command()
@_root_db
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(min=1, max=LIMIT_MAX), help="How many recent runs to include.")
@click.option("--since", metavar="TIME|DURATION", help="Only runs started since an ISO-8601 time or a duration ago (e.g. 1h).")
@click.option("--flow", help="Only runs of this flow (neither a flow of the project nor stored: exit 2, did you mean).")
@click.option("--all", "all_", is_flag=True, help="Include child runs (parallel, map, subflow); default: top-level runs.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prometheus"]), default="text", show_default=True,
              help="prometheus: the text exposition format (for a node_exporter textfile or a push gateway).")
@click.option("--check", is_flag=True,
              help="Also compute the defence rates and exit 1 naming each one over its threshold (for cron or CI).")
@click.option("--bucket", metavar="DURATION", help="Also per tool per time bucket (1h, 15m): calls, failures, mean/p95 ms.")
def stats(root, db, limit, since, flow, all_, fmt, check, bucket):
    """Success rate, mean steps, failure and retry rate per tool, compensation failures, p50/p99, model
    tokens, cost and re-ask rate per flow, state and model (top-level runs; --all adds child runs).

    \b
    With --check (or --format prometheus) also the defence rates, each against its threshold:
      validation_block_rate   calls blocked by a schema, verify or the gate    (default > 20%)
      pause_timeout_rate      reviews nobody decided in time                   (default > 10%)
      rollback_failure_rate   undos that failed for good                       (default > 1%)
      human_takeover_rate     runs cancelled, redriven or edited by a person   (default > 5%)
    Thresholds: `thresholds:` in orchestration/project.yaml (fractions, e.g. pause_timeout_rate: 0.05).
      flowctl stats --check --since 1h || page-the-on-call
    """
    _call("stats", root=root, db=db, fmt=fmt, limit=limit, since=since, flow=flow, all_=all_, check=check,
          bucket=bucket)


@main.command()
@_root_db
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--reissue", metavar="RUN", help="Issue a new one-time token for RUN's pending review (the old one stops working).")
@click.option("--by", metavar="NAME", help="Who asked for the new token (recorded; default: your login name).")
def reviews(root, db, fmt, reissue, by):
    """List runs paused for review, with what the reviewer sees and the deadline.

    Tokens are stored only as hashes, so a lost token cannot be shown again: --reissue RUN
    prints a new one and records who asked.
    """
    _call("reviews", root=root, db=db, fmt=fmt, reissue=reissue, by=by or _login())


@main.group()
def audit():
    """The append-only audit log."""


@audit.command(name="log")
@click.argument("run_id", metavar="RUN")
@_root_db
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def audit_log(run_id, root, db, fmt):
    """Print RUN's audit events in order: sequence, time, type, state, attempt and data.

    In text, an event's data longer than 160 characters is cut short (marked …, and counted at the
    end); --format json prints every event whole."""
    _call("audit_log", run_id=run_id, root=root, db=db, fmt=fmt)


@main.group()
def secrets():
    """Keys sealing the live runs of flows with sensitive fields (FLOWCTL_SECRET_KEY)."""


@secrets.command(name="keygen")
def secrets_keygen():
    """Print a new key for FLOWCTL_SECRET_KEY: 32 random bytes, urlsafe base64."""
    _call("secrets", action="keygen", root=None, db=None)


@secrets.command(name="rotate")
@_root_db
def secrets_rotate(root, db):
    """Re-seal every sealed run field under the first key of FLOWCTL_SECRET_KEY (the others must
    still open them). Afterwards the old keys can be removed from the variable."""
    _call("secrets", action="rotate", root=root, db=db)


# ------------------------------------------------------------------------------------ review
@main.command()
@click.argument("flow")
@click.option("--root", type=click.Path(), help="Project folder (holding orchestration/); default: found from the current folder.")
@click.option("--format", "fmt", type=click.Choice(["dot", "svg", "png", "mermaid"]), default=None,
              help="Default: from the -o file's suffix (.dot .gv .svg .png .mmd .mermaid), else dot. svg/png need Graphviz's dot program.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE instead of stdout.")
@click.option("--show-data", is_flag=True, help="Annotate each state with the context keys defined on entry (key? = on some paths).")
def graph(flow, root, fmt, output, show_data):
    """Draw FLOW: states shaped by type, transitions labelled with their conditions, error
    edges dashed, retries and fallbacks on the states, child flows as collapsed nodes.

    \b
    Examples:
      flowctl graph order_return -o order_return.svg
      flowctl graph order_return --format mermaid
      flowctl graph order_return --show-data --format mermaid
      flowctl graph order_return | dot -Tpdf > order_return.pdf
    """
    _call("graph", flow=flow, root=root, fmt=fmt, output=output, show_data=show_data)


@main.command()
@click.argument("base", required=False)
@click.argument("head", required=False)
@click.option("--root", type=click.Path(), help="Project folder (holding orchestration/); default: found from the current folder.")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json", "svg"]), default="text", show_default=True,
              help="text for people, markdown for a PR comment, json for tools, svg for a picture (needs Graphviz).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE instead of stdout.")
@click.option("--replay", type=click.IntRange(min=1), metavar="N",  # issue 7: flowctl.testing.replay
              help="Also replay the last N recorded runs (run store: FLOWCTL_DB or .flowctl/flowctl.db) under HEAD and list those whose path would change.")
@click.option("--fail-on-risk", is_flag=True, help="Exit 1 when a change is flagged as a risk or a file of HEAD does not load (CI); else 0 even with risks.")
def diff(base, head, root, fmt, output, replay, fail_on_risk):
    """Show what changed between two versions of the flows: flows, states, transitions,
    handlers, contracts and policies added (+), removed (-) or changed (~), field by field,
    with risks flagged (a new side effect, a loosened policy) and the flows affected.

    BASE and HEAD are git revisions (read from git objects; the working tree is not touched)
    or folders holding orchestration/. Default BASE: the merge base with the default branch
    (origin/HEAD, else main or master); default HEAD: the working tree.

    \b
    Examples:
      flowctl diff                                 this branch's changes so far
      flowctl diff origin/main HEAD --format markdown -o comment.md
      flowctl diff old_checkout/ new_checkout/ --format json
    """
    _call("diff", base=base, head=head, root=root, fmt=fmt, output=output, replay=replay, fail_on_risk=fail_on_risk)


@main.group()
def policy():
    """The policy gate in front of side-effecting tools."""


@policy.command(name="check")
@click.argument("tool")
@click.option("--input", "input_", metavar="JSON|@FILE", help="The tool input to decide on.")
@click.option("--flow", help="Flow name, for rate limits counted per flow.")
@click.option("--run", "run_id", help="Run id, for rate limits per run and dedupe.")
@click.option("--run-input", metavar="JSON|@FILE", help="The run's input, as checks see it (run_input).")
@click.option("--context", "context_", metavar="JSON|@FILE", help="The run's context, as checks see it (context).")
@click.option("--param", "params", multiple=True, metavar="K=V", help="A run param, as checks see it (repeatable).")
@_root_db
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def policy_check(tool, input_, flow, run_id, run_input, context_, params, root, db, fmt):
    """Explain the gate's decision for TOOL (id or id@constraint) on an input, without running it.

    Exit 0 allow, 1 deny, 3 review, 2 unusable (e.g. a policy on TOOL has a regex the gate
    cannot run: FC701, located).

    \b
    Example:
      flowctl policy check send_email --input @orchestration/examples/tool_inputs/send_email.json
      flowctl policy check refund_payment --input '{"order_id": "A-1001", "payment_id": "P-1001",
          "amount": 49.9, "currency": "EUR"}' --run-input '{"order_id": "A-1001"}'
    The input must satisfy the contract's input_schema (a run fails such a call before the gate).
    """
    _call("policy", tool=tool, input=input_, flow=flow, run_id=run_id, root=root, db=db, fmt=fmt,
          run_input=run_input, context=context_, params=params)


# ------------------------------------------------------------------------------------ flow tests (issue 7)
@main.command(name="test")
@click.argument("flow", required=False)
@click.option("--contracts", is_flag=True,
              help="Run the contract tests instead: each side-effecting tool's examples against the real tool, in "
                   "its sandbox (invoke, verify, compensate, verify again).")
@click.option("--min-coverage", type=float, metavar="N",
              help="Fail (exit 1) when a flow's transition or handler coverage is below N percent.")
@click.option("--suggest", is_flag=True, help="List uncovered transitions, handlers and error edges, each with a case skeleton that would reach it.")
@click.option("--junit", type=click.Path(dir_okay=False), metavar="FILE", help="Also write the results as JUnit XML (for CI).")
@click.option("--record", is_flag=True, help="Call the real model of each llm and agent state the case does not mock (its "
              "profile's provider, not a fake one); write its replies to orchestration/tests/<flow>/cassettes/<case>.yaml, "
              "which later runs replay with no network.")
@click.option("--root", type=click.Path(), help="Project folder (holding orchestration/); default: found from the current folder.")
def test_cmd(flow, contracts, min_coverage, suggest, junit, record, root):
    """Run the golden path cases in orchestration/tests/<flow>/*.yaml: mocked tools, a fake clock
    (no real waiting), the real policy gate; failures print as path diffs; coverage per flow.

    FLOW is a flow id, a case file or a folder of cases (default: every flow). Exit 0 all passed,
    1 a case failed, coverage is below --min-coverage or the flow has definition errors (as
    flowctl validate), 2 unusable (malformed case files, an unknown flow, no cases).

    \b
    Examples:
      flowctl test                              every golden case, with coverage
      flowctl test order_return --min-coverage 100 --junit report.xml
      flowctl test --suggest                    skeletons for what no case reaches
      flowctl test --contracts                  verify and compensate really undo
      FLOWCTL_MODEL_PROFILE=live flowctl test --record   record a real model's replies once
    """
    _call("test", flow=flow, contracts=contracts, min_coverage=min_coverage, suggest=suggest, junit=junit, record=record, root=root)


@main.command()
@click.argument("run_id", metavar="RUN")
@click.option("--definition", metavar="PATH|REV",
              help="The definition to replay under: a folder holding orchestration/ or a git revision (default: the working tree).")
@_root_db
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def replay(run_id, definition, root, db, fmt):
    """Re-run recorded RUN under another definition with its recorded tool outputs, uuid() and now()
    values and review decisions (no tool is called), and report the first step where the path,
    or a gate decision (a review no longer asked for, a call now allowed or denied), differs.
    Exit 0 same path and outcome, 1 diverged, 2 unusable.

    \b
    Examples:
      flowctl replay 01a2b3                            under the working tree
      flowctl replay 01a2b3 --definition origin/main   under a git revision
      flowctl replay 01a2b3 --definition ../other-checkout
    """
    _call("replay", run_id=run_id, definition=definition, root=root, db=db, fmt=fmt)


# ------------------------------------------------------------------------------------ scale-out
@main.command()
@click.argument("flow")
@click.option("--input", "input_", metavar="JSON|@FILE", help="Run input: JSON text, @file.json / @file.yaml, or @- for standard input (default: {}).")
@click.option("--param", "params", multiple=True, metavar="K=V", help="Set a flow param (repeatable); V is JSON or text.")
@click.option("--params-file", type=click.Path(), help="JSON/YAML mapping of params.")
@_root_db
@click.option("--queue", default="default", show_default=True, metavar="Q", help="Queue to put the run in (workers choose queues).")
@click.option("--priority", default=0, show_default=True, type=click.IntRange(-2**31, 2**31 - 1), metavar="N",
              help="Higher runs are claimed first; a 32-bit integer (-2147483648 to 2147483647).")
@click.option("--delay", metavar="DURATION", help="Not before this long from now (database clock), e.g. 5m.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def submit(flow, input_, params, params_file, root, db, queue, priority, delay, fmt):
    """Queue a run of FLOW for workers and print its id (exit 0). The input is checked and the
    definition saved exactly as flowctl run does; a worker (flowctl worker) runs it.

    \b
    Examples:
      flowctl submit order_return --input @in.json --db postgresql://flowctl@db/flowctl
      flowctl submit outbound_report --input '{}' --queue reports --priority 10
    """
    _call("submit", flow=flow, input=input_, params=params, params_file=params_file, root=root, db=db, queue=queue,
          priority=priority, delay=delay, fmt=fmt)


@main.command()
@_root_db
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(min=1), metavar="N",
              help="Runs driven at once by this process.")
@click.option("--queues", multiple=True, metavar="Q[,Q…]", help="Only these queues (repeatable or comma-separated); default: all.")
@click.option("--lease", default="30s", show_default=True, metavar="DURATION",
              help="How long a claim lasts without a heartbeat; a silent worker's runs are taken over after it.")
@click.option("--poll", default="2s", show_default=True, metavar="DURATION",
              help="Longest idle wait between claims (PostgreSQL LISTEN/NOTIFY wakes workers sooner).")
@click.option("--max-inline-wait", default="1s", show_default=True, metavar="DURATION",
              help="Longest wait or retry delay slept while holding a run; longer ones park it until due.")
@click.option("--limit", "limits", multiple=True, metavar="flow:NAME=N|queue:NAME=N",
              help="Set a store-wide limit of runs held at once by all workers (N = none removes it; repeatable).")
@click.option("--max-runs", type=click.IntRange(min=1), metavar="N", help="Exit after driving N runs (default: until stopped).")
@click.option("-q", "--quiet", is_flag=True, help="Log only start, stop, lost leases and errors.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def worker(root, db, concurrency, queues, lease, poll, max_inline_wait, limits, max_runs, quiet, log_format):
    """Claim queued, due and orphaned runs from the store and drive them, until stopped.

    Any number of workers, on any hosts, may share a PostgreSQL store; several local processes may
    share a SQLite file (one writer at a time). Runs are leased (heartbeats renew the lease) and
    every write is fenced, so a run is never driven by two workers at once. SIGTERM or Ctrl-C
    finishes the current steps, releases the runs and exits 0; a second signal exits at once.

    \b
    Examples:
      flowctl worker --db postgresql://flowctl@db/flowctl --concurrency 8
      flowctl worker --queues reports,mail --limit queue:mail=2
    """
    _call("worker", root=root, db=db, concurrency=concurrency, queues=queues, lease=lease, poll=poll,
          max_inline_wait=max_inline_wait, limits=limits, max_runs=max_runs, quiet=quiet, log_format=log_format)


@main.command()
@_root_db
@click.option("--all", "show_all", is_flag=True, help="Also workers that stopped or went silent.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def workers(root, db, show_all, fmt):
    """List live workers: heartbeat age, queues, slots in use, runs done and the runs they hold."""
    _call("workers", root=root, db=db, show_all=show_all, fmt=fmt)


# ------------------------------------------------------------------------------------ serve (issue 19)
@main.command()
@_root_db
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; another than loopback needs at least one live API key.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--rate", default=50.0, show_default=True, type=click.FloatRange(min=0.001), metavar="N",
              help="Requests per second per API key, on average.")
@click.option("--burst", default=100, show_default=True, type=click.IntRange(min=1), metavar="N",
              help="Requests an API key may send at once.")
def serve(root, db, host, port, rate, burst):
    """Serve the gate, runs and reviews over HTTP (OpenAPI at /openapi.json). Needs flowctl[serve].

    \b
    Examples:
      flowctl keys create agent --scope gate && flowctl serve
      flowctl serve --host 0.0.0.0 --port 9000 --db postgresql://flowctl@db/flowctl
    """
    _call("serve", host=host, port=port, root=root, db=db, rate=rate, burst=burst)


@main.command(name="mcp")
@_root_db
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP only: address to listen on.")
@click.option("--port", default=8081, show_default=True, type=click.IntRange(0, 65535), help="HTTP only.")
def mcp_command(root, db, transport, host, port):
    """Serve the contracts and flows as MCP tools (stdio or streamable HTTP). Needs flowctl[mcp].

    \b
    Examples:
      flowctl mcp                                   # an MCP client's "command": flowctl, "args": ["mcp"]
      flowctl mcp --transport http --port 8081      # http://127.0.0.1:8081/mcp, with an API key
    """
    _call("mcp", transport=transport, host=host, port=port, root=root, db=db)


from flowctl.cli.access import register as _access  # noqa: E402 - the keys commands (cli/access.py)
from flowctl.cli.observe import register as _observe  # noqa: E402 - issue 21: events, policy report
from flowctl.cli.retention import prune  # noqa: E402 - its click command (cli/retention.py)
from flowctl.cli.auditing import audit_head, audit_verify  # noqa: E402 - (cli/auditing.py)
_access(main, _root_db, _login)
_observe(main, policy, _root_db)
main.add_command(prune)
audit.add_command(audit_verify)
audit.add_command(audit_head)

from flowctl.cli.takeover import register as _takeover  # noqa: E402 - after main's options exist

_takeover(main, _root_db, _login)

if __name__ == "__main__":  # pragma: no cover
    main()
