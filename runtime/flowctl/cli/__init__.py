"""The ``flowctl`` command line: click layer and one module per command."""
