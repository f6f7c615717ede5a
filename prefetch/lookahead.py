"""Adaptive lookahead: which of a job's candidate upstream stages the hints are extracted from.

A job may declare several stages that can yield its state keys, earliest first. An earlier stage
gives hints sooner (more slack) but may name keys the stateful stage never reads (rows a later
filter drops), which are wasted prefetches. The selector starts with the earliest stage and moves
to the next one when the wasted share of prefetches stays above a threshold.
"""

from __future__ import annotations


class LookaheadSelector:
    """Chooses the hint stage from the wasted-prefetch ratio of the batches it observed."""

    def __init__(self, stages: int, wasted_threshold: float, patience: int = 2, min_prefetches: int = 100):
        if stages < 1:
            raise ValueError(f"stages must be at least 1, not {stages}")
        if not 0.0 <= wasted_threshold <= 1.0:
            raise ValueError(f"wasted_threshold must be in [0, 1], not {wasted_threshold}")
        self.stages = stages
        self.threshold = wasted_threshold
        self.patience = patience
        self.min_prefetches = min_prefetches
        self.current = 0
        self._strikes = 0

    def observe(self, prefetched: int, wasted: int) -> int:
        """Record one batch of the current stage; returns the stage to use for the next batch.

        Batches with fewer than ``min_prefetches`` prefetches say too little and are ignored.
        """
        if prefetched < self.min_prefetches:
            return self.current
        if wasted / prefetched > self.threshold:
            self._strikes += 1
        else:
            self._strikes = 0
        if self._strikes >= self.patience and self.current + 1 < self.stages:
            self.current += 1
            self._strikes = 0
        return self.current
