"""Running one command: its exit code, and every error as one located line, never a traceback.

:func:`call` imports ``flowctl.cli.commands.<name>``, runs its ``run(**options)`` and exits with
the code it returns. Errors of the exception tree (:mod:`flowctl.errors`) print ``error: [CODE]
message`` and a hint and exit 1 (a run conflict or failure, a flow with definition errors) or 2
(usage, project, store); Ctrl-C
and SIGTERM exit 130 saying how the run continues; a full disk or closed output is ``[OUTPUT]``;
anything else is one ``internal error`` line (``FLOWCTL_DEBUG=1`` re-raises it).
"""
from __future__ import annotations

import errno
import importlib
import os
import sys

import click

from flowctl.cli.commands import EXIT_FAILED, EXIT_USAGE


def call(command: str, **kwargs) -> None:
    from flowctl.errors import DefinitionError, FlowctlError, ProjectError, RunConflict, StoreError, UsageError

    if sys.stdout is None or sys.stderr is None:
        _closed_output()
    previous = _sigterm_interrupts()
    try:
        module = importlib.import_module(f"flowctl.cli.commands.{command}")
        code = module.run(**kwargs)
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not at interpreter exit
    except (RunConflict, DefinitionError) as exc:  # a refused resume; a flow validate rejects
        _fail(exc, EXIT_FAILED)
    except (UsageError, ProjectError, StoreError) as exc:
        _fail(exc, EXIT_USAGE)
    except FlowctlError as exc:
        _fail(exc, EXIT_FAILED)
    except KeyboardInterrupt:
        if command == "worker":  # stopped while still importing, before its own handler: it held nothing
            sys.exit(0)
        click.echo("interrupted: a run this command was driving keeps its last checkpoint; "
                   "`flowctl recover` continues it (`flowctl runs --status running` lists it)", err=True)
        sys.exit(130)
    except BrokenPipeError:  # `flowctl audit log RUN | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except (click.exceptions.Exit, click.ClickException):
        raise
    except OSError as exc:
        where = _output_failure(exc)
        if where is None:
            _internal(exc)
        _quiet_stdout()
        click.echo(f"error: [OUTPUT] cannot write {where}: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001 - last line of defence: no tracebacks for users
        _internal(exc)
    finally:
        _restore_sigterm(previous)
    sys.exit(code)


def _sigterm_interrupts() -> None:
    """SIGTERM (``kill``, a container stop) interrupts a command as Ctrl-C does: the same message
    and exit 130, instead of dying silently (``flowctl worker`` installs its own graceful handler)."""
    import signal
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        return signal.signal(signal.SIGTERM, interrupt)
    return None


def _restore_sigterm(previous) -> None:
    """Put back the SIGTERM handler :func:`_sigterm_interrupts` replaced (when flowctl's commands
    are called in process, e.g. by tests)."""
    import signal

    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


#: errno values that mean "the output could not be written" (disk full, quota, file too large, I/O).
_OUTPUT_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG", "EIO", "EBADF") if hasattr(errno, n))


def _output_failure(exc: OSError) -> str | None:
    """What could not be written, when ``exc`` is an output failure (``to standard output``, the
    file a command was writing, or just ``output``), else None."""
    try:
        sys.stdout.flush()  # what failed is still buffered: flushing again fails the same way
    except (OSError, ValueError):
        return "to standard output"
    if exc.errno in _OUTPUT_ERRNOS:
        return exc.filename if exc.filename else "output"
    return None


def _quiet_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so what is still buffered is dropped at exit quietly."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _closed_output() -> None:
    """Standard output or error is closed (``flowctl runs >&-``): refuse before anything opens a
    file, which would otherwise get descriptor 1 or 2 and receive the output."""
    if sys.stderr is not None:
        click.echo("error: [OUTPUT] standard output is closed: nothing can be written; flowctl did nothing",
                   err=True)  # (with standard error closed there is nowhere to say so: the exit code does)
    sys.exit(EXIT_USAGE)


def _internal(exc: BaseException) -> None:
    """Report an unexpected error in one line (exit 2); re-raise it with FLOWCTL_DEBUG=1. Called
    from an ``except`` block."""
    if os.environ.get("FLOWCTL_DEBUG"):
        raise  # noqa: PLE0704 - the exception being handled by the caller
    click.echo(f"error: internal error: {type(exc).__name__}: {exc}", err=True)
    click.echo("hint: this is a flowctl bug; rerun with FLOWCTL_DEBUG=1 for details and report it", err=True)
    sys.exit(EXIT_USAGE)


def _fail(exc, code: int) -> None:
    label = getattr(exc, "code", "ERROR")
    click.echo(f"error: [{label}] {exc.message or exc}", err=True)
    if getattr(exc, "hint", ""):
        click.echo(f"hint: {exc.hint}", err=True)
    sys.exit(code)


__all__ = ["call"]
