"""The job and its per-batch phases, the commit controller, recovery, hint wiring, process settings."""
