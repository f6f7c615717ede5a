"""Observability: the per-batch metrics record and the report over it."""
