"""Adapters that plug kvtier into inference engines (kvtier.integrations.sglang)."""
