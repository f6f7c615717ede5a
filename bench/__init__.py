"""The benchmarks: the jobs side by side with spark-submit (per mode, rate, regime and placement), the driver's
ceiling, recovery, Kafka, and the runtime's own (checkpoint upload sizes, state-cache policies, state reads)."""
