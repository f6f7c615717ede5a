"""Benchmark drivers that run the jobs side by side with spark-submit."""
