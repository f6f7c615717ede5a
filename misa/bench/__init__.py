"""The runtime's benchmarks: checkpoint upload sizes and state-cache policies."""
