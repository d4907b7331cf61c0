"""The policy gate: default deny in front of side-effecting tools, and its counters."""
