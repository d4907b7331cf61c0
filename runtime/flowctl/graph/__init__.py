"""A flow's graph of states and its renderings."""
