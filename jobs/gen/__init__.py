"""Input generators for the jobs, sharing one part-file writer and one bad-record injector."""
