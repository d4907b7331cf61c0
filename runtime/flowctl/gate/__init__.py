"""The policy gate: default deny in front of side-effecting tools, every decision explained (its
counters live in the store: :mod:`flowctl.store.counters`)."""
