"""Definitions as written: reading, the typed model, kinds' schemas, versions, durations."""
