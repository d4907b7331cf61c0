"""The ``flowctl`` command line: a thin layer over the library.

Each command parses its options here and calls ``flowctl.commands.<name>.run(...)``, which returns
the exit code. :func:`_call` is the one place that maps errors to exit codes: a
:class:`~flowctl.errors.UsageError` or :class:`~flowctl.errors.ProjectError` is exit 2, any other
flowctl error exit 1, and nothing ever prints a traceback unless ``FLOWCTL_DEBUG=1``.

Exit codes: 0 success, 1 failure (errors found, run failed), 2 unusable invocation,
3 run paused or waiting.
"""
from __future__ import annotations

import importlib
import os
import sys

import click

from .commands import EXIT_FAILED, EXIT_USAGE

SCHEMA_KINDS = ("state", "flow", "contract", "policy")


def _call(command: str, **kwargs) -> None:
    from .errors import FlowctlError, ProjectError, UsageError

    try:
        module = importlib.import_module(f"flowctl.commands.{command}")
        code = module.run(**kwargs)
    except (UsageError, ProjectError) as exc:
        _fail(exc, EXIT_USAGE)
    except FlowctlError as exc:
        _fail(exc, EXIT_FAILED)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except (click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # noqa: BLE001 - last line of defence: no tracebacks for users
        if os.environ.get("FLOWCTL_DEBUG"):
            raise
        click.echo(f"error: internal error: {type(exc).__name__}: {exc}", err=True)
        click.echo("hint: this is a flowctl bug; rerun with FLOWCTL_DEBUG=1 for details and report it", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(code)


def _fail(exc, code: int) -> None:
    label = getattr(exc, "code", "ERROR")
    click.echo(f"error: [{label}] {exc.message or exc}", err=True)
    if getattr(exc, "hint", ""):
        click.echo(f"hint: {exc.hint}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="flowctl", prog_name="flowctl")
def main() -> None:
    """flowctl: run declarative workflows whose every side effect is declared, checked,
    recorded and undoable.

    Definitions live in orchestration/ (states/, transitions/, contracts/, policies/, tools/),
    found from the current folder or --root.

    \b
    Typical use:
      flowctl validate                       check every file (CI: --format github)
      flowctl graph order_return -o g.svg   draw a flow
      flowctl run order_return --input @orchestration/examples/order_return.json
      flowctl trace RUN_ID                   what a run did, step by step

    Exit codes: 0 ok, 1 failed/errors, 2 unusable invocation, 3 paused or waiting.
    """


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
      # yaml-language-server: $schema=../../.flowctl/schemas/state.json
      flowctl schema state > .flowctl/schemas/state.json
    """
    _call("schema", kind=kind)


if __name__ == "__main__":  # pragma: no cover
    main()
