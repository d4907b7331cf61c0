"""State types, one module per type."""
