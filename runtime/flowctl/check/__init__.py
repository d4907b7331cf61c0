"""``flowctl validate``: the checks table, the data-flow analysis, diagnostics rendering."""
