"""Keyed prefetching: Count-Min sketch, hint extraction, the state cache (TAC, LRU, Clock), the prefetch manager."""
