"""One module per CLI command. Each exposes ``run(...) -> int`` (the exit code) and does its
printing through ``click.echo``; :mod:`flowctl.cli.main` only parses options and maps errors."""

EXIT_OK = 0
EXIT_FAILED = 1  # validation errors, a failed run, a refused resume
EXIT_USAGE = 2  # the invocation itself is unusable
EXIT_PAUSED = 3  # a run is paused for review or waiting on a timer
