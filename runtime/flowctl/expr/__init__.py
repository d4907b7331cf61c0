"""Expressions: JMESPath compiled to closures, flowctl's functions, lint, the run scope."""
