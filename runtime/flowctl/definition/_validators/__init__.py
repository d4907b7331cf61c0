"""Generated fast validators, one module per kind (see scripts/generate_validators.py)."""
