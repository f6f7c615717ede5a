"""Stateful operators: a Spark part that builds per-key deltas and a driver part that merges them into state."""
