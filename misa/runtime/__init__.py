"""The job's parts and its per-batch phases (job_parts, batch_loop, batch_input, continuity, watermark_sync; the
job itself is :mod:`misa.job`), the commit controller, recovery, hint wiring, process settings."""
