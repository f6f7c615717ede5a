"""Where batches leave the runtime: the output sink, the quarantine of bad records, their shared per-batch write."""
