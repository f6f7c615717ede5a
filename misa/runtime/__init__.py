"""The job and its per-batch phases, the commit controller, recovery against Spark's logs, hint wiring, process settings."""
