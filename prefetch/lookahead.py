"""Adaptive lookahead: which of a job's candidate upstream stages the hints are extracted from, and when.

A job may declare several stages that can yield its state keys, earliest first. An earlier stage
gives hints sooner (more slack) but may name keys the stateful stage never reads (rows a later
filter drops), which are wasted prefetches. :class:`LookaheadSelector` starts with the earliest
stage and moves to the next one when the wasted share of prefetches stays above a threshold.

Hints have two sources in time: *ahead* (between batches, from the next batch's input as it
arrives: free, as the driver and the executors idle) and *in the batch* (a hint job beside the
batch's own compute: it costs the batch cores, but names exactly the batch's rows).
:class:`HintTiming` prefers ahead, and goes back to in-batch hints while ahead's measured outcome is
poor: too many of its prefetches never read (the arrived files were not the next batch's) or too
many of its hits read before their fetch ended (no slack). It tries ahead again after a while.
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


AHEAD, IN_BATCH = "ahead", "in-batch"


class HintTiming:
    """Chooses the hint source of the next batch (:data:`AHEAD` or :data:`IN_BATCH`) from measured outcomes."""

    def __init__(
        self,
        wasted_threshold: float,
        late_threshold: float = 0.5,
        patience: int = 2,
        retry_after: int = 20,
        min_prefetches: int = 100,
    ):
        if not 0.0 <= wasted_threshold <= 1.0 or not 0.0 <= late_threshold <= 1.0:
            raise ValueError(f"thresholds must be in [0, 1], not {wasted_threshold} and {late_threshold}")
        self.wasted_threshold = wasted_threshold
        self.late_threshold = late_threshold
        self.patience = patience
        self.retry_after = retry_after
        self.min_prefetches = min_prefetches
        self.current = AHEAD
        self._strikes = 0
        self._in_batch = 0  # batches hinted in the batch since ahead was left

    def observe(self, source: str, prefetched: int, wasted: int, hits: int, late: int) -> str:
        """Record one batch hinted from ``source``; returns the source for the next batch.

        A batch is poor when more than the wasted threshold of its prefetches were never read, or more
        than the late threshold of its prefetch hits were read before their fetch ended; batches with
        fewer than ``min_prefetches`` prefetches say too little and are ignored."""
        if self.current == IN_BATCH:
            self._in_batch += 1
            if self._in_batch >= self.retry_after:
                self.current, self._in_batch, self._strikes = AHEAD, 0, 0
            return self.current
        if source != AHEAD or prefetched < self.min_prefetches:
            return self.current
        poor = wasted / prefetched > self.wasted_threshold or (hits and late / hits > self.late_threshold)
        self._strikes = self._strikes + 1 if poor else 0
        if self._strikes >= self.patience:
            self.current, self._strikes = IN_BATCH, 0
        return self.current
